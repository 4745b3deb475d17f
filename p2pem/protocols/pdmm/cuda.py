"""The sparse product of pdmm-sp's GPU engine: one CUDA kernel for a CSR matrix times a row-major block.

``cupyx.scipy.sparse`` multiplies a CSR matrix with a dense block through cuSPARSE's SpMM,
which wants the block in column-major order: CuPy copies x to Fortran order every round and
returns a column-major result that every following elementwise operation then reads with
strides.  With the 20-odd columns of a statistics block this took 4.7 ms per round at 10^5
nodes on an H100 (``sim/bench_gpu.py``).  This kernel reads x in its own (C) order: thread
(i, k) sums ``data[e] * x[indices[e], k]`` over row i's entries in CSR order, so the p threads
of a row read the p consecutive doubles of each neighbour's row together.

Each product and sum is rounded separately (``__dmul_rn`` / ``__dadd_rn``: no fused
multiply-add), in the CSR order that SciPy's ``csr_matvecs`` uses on the CPU, so for the same x
the device's rows equal the CPU's bit for bit.

Needs CuPy; imported only for ``device = "cuda"``.
"""

from __future__ import annotations

import numpy as np

_SOURCE = r"""
extern "C" __global__ void csr_times_rows(
    const long long* indptr, const long long* indices, const double* data,
    const double* x, double* out, const long long n, const int p)
{
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long row = t / p;
    if (row >= n) return;
    const int col = (int)(t - row * p);
    double acc = 0.0;
    const long long end = indptr[row + 1];
    for (long long e = indptr[row]; e < end; ++e)
        acc = __dadd_rn(acc, __dmul_rn(data[e], x[indices[e] * p + col]));
    out[row * p + col] = acc;
}
"""

_THREADS = 256


class CsrRowProduct:
    """``matrix @ x`` for a SciPy CSR ``matrix`` held on the GPU and C-ordered float64 ``x``."""

    def __init__(self, matrix) -> None:
        import cupy  # here: an optional dependency (the gpu extra)

        self._cp = cupy
        csr = matrix.tocsr()
        csr.sort_indices()
        self.n = int(csr.shape[0])
        self.indptr = cupy.asarray(csr.indptr.astype(np.int64))
        self.indices = cupy.asarray(csr.indices.astype(np.int64))
        self.data = cupy.asarray(csr.data.astype(np.float64))
        self.kernel = cupy.RawKernel(_SOURCE, "csr_times_rows")

    def __call__(self, x):
        cp = self._cp
        x = cp.ascontiguousarray(x, dtype=cp.float64)
        vector = x.ndim == 1
        if vector:
            x = x[:, None]
        p = int(x.shape[1])
        out = cp.empty((self.n, p), dtype=cp.float64)
        total = self.n * p
        if total:
            blocks = (total + _THREADS - 1) // _THREADS
            self.kernel((blocks,), (_THREADS,), (self.indptr, self.indices, self.data, x, out, np.int64(self.n), np.int32(p)))
        return out[:, 0] if vector else out
