"""Where the batch engine's arrays live: NumPy/SciPy, CuPy (``device = "cuda"``) or array-api-strict.

The engine's round is written against an array-API namespace; the two operations the array API
lacks (a sparse product and a segmented minimum over neighbours) are the classes here, each with
a host form (SciPy, NumPy) and a portable device form.  On the host a round can also be split
over threads (``RowBlocks``): NumPy's and SciPy's kernels release the GIL, so contiguous
blocks of nodes are worked on by several cores at once, and its nodes are renumbered into a
locality order (``Locality``) so that the sparse product reads neighbours' rows from nearby
memory.
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


class Locality:
    """The host engine's renumbering of the nodes into a locality order, neighbour order kept.

    A geometric graph's node ids follow the order its points were drawn in, so a node's
    neighbours' rows lie anywhere in an (n, p) array: at 10^5 nodes the sparse product then
    waits on memory for nearly every neighbour (``sim/bench_rounds.py``).  Reverse
    Cuthill-McKee (``scipy.sparse.csgraph.reverse_cuthill_mckee``, public: the graph alone)
    numbers them so that neighbours are close.  Node ``perm[k]`` becomes row k; row k of
    ``matrix(weights)`` holds that node's edges in its ORIGINAL neighbour order (ascending
    original ids, so its column indices are not sorted), and SciPy's CSR product adds a row's
    terms in stored order from zero: each node's neighbour sum is the same sum, term by term,
    as in the original numbering (the same bits).  Every other per-node operation of a round
    is elementwise or an exact maximum or minimum, so the renumbered round is the original
    round with its rows permuted.

    Attributes
    ----------
    perm, inv : (n,) int64
        ``perm[k]`` the original id of row k; ``inv[i]`` the row of node i (``a[perm]``
        renumbers a per-node array, ``a[inv]`` maps it back).
    indptr, dst : CSR arrays of the renumbered graph (``dst`` in the kept neighbour order).
    edges : (m,) int64
        The original position (CSR edge order) of each renumbered edge: per-edge weights are
        ``weights[edges]``.
    """

    def __init__(self, t_: Topology) -> None:
        from scipy.sparse.csgraph import reverse_cuthill_mckee  # lazily, as namespace's SciPy

        n = t_.n_nodes
        self.perm = reverse_cuthill_mckee(t_.adjacency, symmetric_mode=True).astype(np.int64)
        self.inv = np.empty_like(self.perm)
        self.inv[self.perm] = np.arange(n, dtype=np.int64)
        deg = t_.degrees[self.perm]
        self.indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(deg, out=self.indptr[1:])
        self.edges = np.repeat(t_.indptr[:-1][self.perm] - self.indptr[:-1], deg) + np.arange(self.indptr[-1], dtype=np.int64)
        self.dst = self.inv[t_.dst[self.edges]]
        self.n = n

    def matrix(self, weights: np.ndarray):
        """The renumbered (n, n) CSR matrix with per-edge ``weights`` (original edge order),
        each row's entries in the node's original neighbour order."""
        import scipy.sparse as sp

        return sp.csr_matrix((np.asarray(weights, dtype=float)[self.edges], self.dst, self.indptr), shape=(self.n, self.n))

    def rows(self, a):
        """A per-node array (or column (n, 1)) in the renumbered order; scalars unchanged."""
        return a[self.perm] if isinstance(a, np.ndarray) and a.ndim and a.shape[0] == self.n else a

    def back(self, a: np.ndarray) -> np.ndarray:
        """A renumbered per-node array in the original order."""
        return a[self.inv]


class SparseProduct:
    """``matrix @ x`` on the engine's device: SciPy / CuPy CSR, or via NumPy for array-api-strict.

    array-api-strict has no sparse matrices; its arrays go through SciPy and back, so the rest
    of the engine still runs on the strict namespace and non-portable code fails in tests.

    ``in_order=True`` (a ``Locality`` matrix, NumPy/SciPy only): the matrix's rows hold their
    entries in the order they must be added in, so it runs as CSR, never sorted or converted.
    """

    def __init__(self, matrix, xp, sparse, blocks: RowBlocks | None = None, *, in_order: bool = False) -> None:
        self.xp = xp
        self.blocks = blocks if blocks is not None and len(blocks) > 1 else None
        if in_order and (sparse is None or sparse.__name__ != "scipy.sparse"):
            raise ProtocolError("pdmm-sp: a renumbered product runs on the CPU only (internal error)")
        if self.blocks is not None:
            if sparse is None or sparse.__name__ != "scipy.sparse":
                raise ConfigError("pdmm-sp: threads > 1 needs device = 'cpu'")
            if not in_order and not matrix.has_sorted_indices:
                raise ProtocolError("pdmm-sp: the topology's neighbour lists must be sorted (internal error)")
            # the rows of each block as a CSR matrix: with sorted indices its product adds row
            # i's terms in ascending column order, as the CSC product below does (same bits)
            # (row slices of a CSR matrix keep each row's stored order)
            csr = matrix if in_order else matrix.tocsr()
            self.rows = {lo: csr[lo:hi] for lo, hi in self.blocks.spans}
            self.host = False
            self.matrix = csr
        elif sparse is None:
            self.matrix = matrix
            self.host = True
        elif in_order:
            self.host = False
            self.matrix = matrix
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

    def __init__(self, t_: Topology, xp, on_host: bool, order: Locality | None = None) -> None:
        self.on_host = on_host
        if on_host:  # (a minimum is exact: the renumbered edges give the renumbered answer)
            self.dst: np.ndarray = t_.dst if order is None else order.dst
            self.starts: np.ndarray = t_.row_start if order is None else order.indptr[:-1]
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
