"""Where the batch engine's arrays live: NumPy/SciPy, CuPy (``device = "cuda"``) or array-api-strict.

The engine's round is written against an array-API namespace; the two operations the array API
lacks (a sparse product and a segmented minimum over neighbours) are the classes here, each with
a host form (SciPy, NumPy) and a portable device form.  On the host a round can also be split
over threads (``RowBlocks``): NumPy's and SciPy's kernels release the GIL, so contiguous
blocks of nodes are worked on by several cores at once.
"""

from __future__ import annotations

import numpy as np

from collections.abc import Callable
from concurrent.futures import Executor

from p2pem.errors import ConfigError, ProtocolError
from p2pem.protocols.base import Topology


def namespace(device: str):
    """(array namespace, sparse module) for ``device``."""
    if device == "cpu":
        import scipy.sparse  # lazily: a node process never runs the batch engine

        # NumPy itself has everything the engine calls (asarray, abs, max, any); the compat
        # wrapper would only add call overhead, which dominates rounds at small n
        return np, scipy.sparse
    if device == "cuda":
        try:  # the optional gpu extra
            import array_api_compat
            import cupy
            import cupyx.scipy.sparse
        except ImportError as exc:  # pragma: no cover - needs the gpu extra
            raise ConfigError("pdmm-sp: device = 'cuda' needs CuPy: pip install 'p2pem[gpu]'") from exc
        return array_api_compat.array_namespace(cupy.empty(0)), cupyx.scipy.sparse
    if device == "array-api-strict":
        try:  # an optional test dependency
            import array_api_strict
        except ImportError as exc:
            raise ConfigError("pdmm-sp: device = 'array-api-strict' needs the array-api-strict package") from exc
        return array_api_strict, None
    raise ConfigError(f"pdmm-sp: device must be 'cpu', 'cuda' or 'array-api-strict', got {device!r}")


def to_host(a) -> np.ndarray:
    """A NumPy copy (or the array itself) of a device array."""
    if isinstance(a, np.ndarray):
        return a
    if hasattr(a, "get"):  # CuPy
        return a.get()
    return np.from_dlpack(a)


class RowBlocks:
    """Contiguous blocks of nodes (rows) holding about equal numbers of directed edges.

    A node's edges are contiguous in CSR order, so a block of nodes is a block of edges: the
    sparse product of a block of rows reads only that block's edges and writes only its rows,
    and every elementwise update of the round is row by row.  ``run`` works the blocks on a
    thread pool, the first in the calling thread; each row is computed by exactly the same
    operations as in one block (a row's neighbour terms still add in ascending order from
    zero), so the result is the same to the last bit for every number of blocks.
    """

    def __init__(self, indptr: np.ndarray, n_blocks: int) -> None:
        n, m = indptr.size - 1, int(indptr[-1])
        # block k starts at the first node whose edges start at or after k m / n_blocks
        cuts = np.searchsorted(indptr, np.arange(1, n_blocks) * (m / n_blocks)).tolist()
        bounds = sorted({0, n, *(min(max(int(c), 0), n) for c in cuts)})
        self.spans: list[tuple[int, int]] = list(zip(bounds[:-1], bounds[1:], strict=True))

    def __len__(self) -> int:
        return len(self.spans)

    def run(self, pool: Executor | None, fn: Callable[[int, int], object]) -> None:
        """``fn(lo, hi)`` for every block, on ``pool``'s threads and this one (all of them
        finished on return; an exception in any is raised here)."""
        if pool is None or len(self.spans) == 1:
            for lo, hi in self.spans:
                fn(lo, hi)
            return
        futures = [pool.submit(fn, lo, hi) for lo, hi in self.spans[1:]]
        try:
            fn(*self.spans[0])
        finally:
            for f in futures:
                f.result()


class SparseProduct:
    """``matrix @ x`` on the engine's device: SciPy / CuPy CSR, or via NumPy for array-api-strict.

    array-api-strict has no sparse matrices; its arrays go through SciPy and back, so the rest
    of the engine still runs on the strict namespace and non-portable code fails in tests.
    """

    def __init__(self, matrix, xp, sparse, blocks: RowBlocks | None = None) -> None:
        self.xp = xp
        self.blocks = blocks if blocks is not None and len(blocks) > 1 else None
        if self.blocks is not None:
            if sparse is None or sparse.__name__ != "scipy.sparse":
                raise ConfigError("pdmm-sp: threads > 1 needs device = 'cpu'")
            if not matrix.has_sorted_indices:
                raise ProtocolError("pdmm-sp: the topology's neighbour lists must be sorted (internal error)")
            # the rows of each block as a CSR matrix: with sorted indices its product adds row
            # i's terms in ascending column order, as the CSC product below does (same bits)
            csr = matrix.tocsr()
            self.rows = {lo: csr[lo:hi] for lo, hi in self.blocks.spans}
            self.host = False
            self.matrix = csr
        elif sparse is None:
            self.matrix = matrix
            self.host = True
        elif sparse.__name__ == "scipy.sparse":
            self.host = False
            # CSC: SciPy's CSC product is 15-25 % faster than CSR's here, and it adds row i's
            # terms in ascending column order, as the CSR product does when the row's indices
            # are sorted (a Topology's are): the same bits as neighbour_sum on a node
            if not matrix.has_sorted_indices:
                raise ProtocolError("pdmm-sp: the topology's neighbour lists must be sorted (internal error)")
            self.matrix = matrix.tocsc()
        else:
            self.host = False
            # CuPy: a kernel that keeps x row-major (cuSPARSE's SpMM wants column-major)
            from p2pem.protocols.pdmm.cuda import CsrRowProduct  # needs CuPy (the optional gpu extra)

            self.matrix = CsrRowProduct(matrix)

    def __call__(self, x, pool: Executor | None = None):
        if self.blocks is not None:
            out = np.empty((self.matrix.shape[0], *x.shape[1:]))

            def block(lo: int, hi: int) -> None:
                out[lo:hi] = self.rows[lo] @ x

            self.blocks.run(pool, block)
            return out
        if self.host:
            return self.xp.asarray(self.matrix @ np.from_dlpack(x))
        return self.matrix(x) if callable(self.matrix) else self.matrix @ x


class NeighbourMin:
    """``a -> min(a_i, min_{j in N(i)} a_j)`` for integer node vectors.

    On the host a segmented ``minimum.reduceat`` over the CSR edges; on a device (the array
    API has no segmented reductions) a gather through an (n, 1 + max degree) index table whose
    row i holds i itself, then i's neighbours, padded with i: one ``take`` and one ``min``.
    """

    def __init__(self, t_: Topology, xp, on_host: bool) -> None:
        self.on_host = on_host
        if on_host:
            self.dst, self.starts = t_.dst, t_.row_start
            return
        n, deg = t_.n_nodes, t_.degrees
        width = 1 + int(deg.max())
        table = np.repeat(np.arange(n, dtype=np.int64), width).reshape(n, width)
        table[t_.src, 1 + np.arange(t_.dst.size) - t_.indptr[t_.src]] = t_.dst
        self.xp, self.shape = xp, (n, width)
        self.table = xp.asarray(table.reshape(-1))

    def __call__(self, a):
        if self.on_host:
            return np.minimum(a, np.minimum.reduceat(a[self.dst], self.starts))
        xp = self.xp
        return xp.min(xp.reshape(xp.take(a, self.table), self.shape), axis=1)
