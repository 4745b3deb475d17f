"""The public spectra pdmm-sp's step parameters come from: weighted Laplacians and their eigenvalues.

Every node computes these from the public topology alone, so they are the same on every node
of the same platform (a deployment compares the derived parameters before it starts).  Results
are cached per ``p2pem.protocols.base.Topology`` object in a table this module owns
(``per_topology``), never in the caller's objects.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from p2pem.gmm import round_significant
from p2pem.protocols.base import Topology

T = TypeVar("T")

#: Results derived from a topology (spectra, step parameters, device matrices), per topology
#: object: an entry lives as long as its topology does (the values never refer back to it).
_CACHE: weakref.WeakKeyDictionary[Topology, dict[Any, Any]] = weakref.WeakKeyDictionary()


def per_topology(topology: Topology, key: object, compute: Callable[[], T]) -> T:
    """``compute()``, once per ``topology`` object and ``key`` (public data only)."""
    table = _CACHE.setdefault(topology, {})
    if key not in table:
        table[key] = compute()
    return table[key]


LAMBDA2_MARGIN = 0.98

#: Up to this many nodes the spectra are computed densely with NumPy (no SciPy import: a
#: deployed node process computes its step parameters itself and starts faster without it).
DENSE_NODES = 400


def dense_laplacian(topology: Topology, weights: np.ndarray) -> np.ndarray:
    """The weighted Laplacian as a dense NumPy array, bit for bit ``sparse_laplacian``
    (SciPy's row sums are ``np.add.reduceat`` over edge order), without importing SciPy."""
    n = topology.n_nodes
    src = topology.src
    lap = np.zeros((n, n))
    lap[src, topology.dst] = -weights
    row_sums = np.add.reduceat(weights, topology.row_start) if weights.size else np.zeros(n)
    lap[np.arange(n), np.arange(n)] = np.where(topology.degrees > 0, row_sums, 0.0)
    return lap


def sparse_laplacian(topology: Topology, weights: np.ndarray):
    """The weighted Laplacian ``diags(W.sum(axis=1)) - W`` as a SciPy sparse matrix."""
    import scipy.sparse as sp  # lazily: a node process of a small graph never needs SciPy

    W = topology.weighted_adjacency(weights)
    return sp.diags(np.asarray(W.sum(axis=1)).ravel()) - W


def metropolis_weights(topology: Topology) -> np.ndarray:
    """1 / max(d_i, d_j) per directed edge (i, j): symmetric, and sum_j <= 1 at every node."""
    deg = topology.degrees.astype(float)
    return 1.0 / np.maximum(deg[topology.src], deg[topology.dst])


def laplacian_extremes(topology: Topology, weights: np.ndarray) -> tuple[float, float]:
    """(lambda_2, lambda_max) of the weighted Laplacian with edge ``weights`` (in edge order).

    Up to 400 nodes a dense eigendecomposition.  Above, methods of O(m) work per step and
    no factorisation, from fixed starts, so every node computes the same values on the same
    platform (the heavy-ball rate depends on sqrt(kappa), so a percent in kappa is half a
    percent in rounds):

    * lambda_max by Lanczos (``top_eigenvalue``): the top Ritz value raised by its residual
      norm (the Ritz value is a lower bound, and heavy ball is stable only up to
      lambda_max + lambda_2), capped by Gershgorin's 2 max_i sum_j c_ij;
    * lambda_2 by LOBPCG (relative residual 1e-3) with the constant vector deflated, started
      from the hop distances to the two ends of a long shortest path (a double BFS sweep):
      smooth along the graph's longest direction, like the Fiedler vector, so it converges in
      a few iterations.  The Ritz value errs high by about 1 %.

    ``sim/bench_scaling.py`` measures both against shift-invert and reports the rounds impact.
    """
    n = topology.n_nodes
    if n <= DENSE_NODES:
        ev = np.linalg.eigvalsh(dense_laplacian(topology, weights))
        return float(ev[1]), float(ev[-1])
    import scipy.sparse.linalg as spla  # lazily, as in sparse_laplacian

    lap = sparse_laplacian(topology, weights).tocsr()
    lmax = min(top_eigenvalue(lap), 2.0 * float(lap.diagonal().max()))
    db, dc = topology.sweep
    start = np.column_stack([db - dc, db + dc])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lobpcg warns when it stops at maxiter; the estimate still holds
        low, _ = spla.lobpcg(lap, start, Y=np.ones((n, 1)), largest=False, tol=1e-3, maxiter=2000)
    # where lambda_2 is below the residual tolerance (long rings and paths) LOBPCG may return
    # nothing useful: then Mohar's lower bound lambda_2 >= 4 / (n D) of the unit Laplacian,
    # times the smallest weight (Mohar 1991), which is safe, if slow
    floor = 4.0 * float(np.min(weights)) / (n * max(topology.diameter, 1))
    return max(LAMBDA2_MARGIN * float(np.min(low)), floor), lmax


def top_eigenvalue(matrix, rtol: float = 1e-2, max_steps: int = 400) -> float:
    """The largest eigenvalue of the symmetric ``matrix``, estimated from above: Lanczos from a
    fixed start (Lanczos 1950; no reorthogonalisation, so O(n) memory) until the top Ritz
    value's residual norm is at most ``rtol`` times it, checked every 10 steps; returns the
    Ritz value plus that residual norm.

    On the Metropolis Laplacian of a 10^5-node geometric graph 40 steps give lambda_max to
    2e-4 above (``sim/bench_scaling.py``), where LOBPCG with two vectors took about as long
    at 10^5 and 20 times as long at 10^6.
    """
    n = matrix.shape[0]
    q = np.random.default_rng(0).standard_normal(n)
    q /= np.linalg.norm(q)
    q_prev = np.zeros(n)
    alphas: list[float] = []
    betas: list[float] = []
    beta = 0.0
    top = resid = 0.0
    for step in range(1, max_steps + 1):
        w = matrix @ q
        alpha = float(q @ w)
        w -= alpha * q
        w -= beta * q_prev
        beta = float(np.linalg.norm(w))
        alphas.append(alpha)
        betas.append(beta)
        if step % 10 == 0 or beta == 0.0 or step == max_steps:
            tri = np.diag(alphas) + np.diag(betas[:-1], 1) + np.diag(betas[:-1], -1)
            ritz, vecs = np.linalg.eigh(tri)
            top, resid = float(ritz[-1]), beta * abs(float(vecs[-1, -1]))
            if resid <= rtol * top or beta == 0.0:
                break
        q_prev, q = q, w / beta
    return top + resid


def metropolis_extremes(topology: Topology) -> tuple[float, float]:
    """(lambda_2, lambda_max) of the Metropolis Laplacian (``laplacian_extremes``), cached per topology."""
    return per_topology(topology, "metropolis", lambda: laplacian_extremes(topology, metropolis_weights(topology)))


def metropolis_spectrum(topology: Topology) -> np.ndarray:
    """All nonzero eigenvalues lambda_2 <= ... <= lambda_n of the Metropolis Laplacian, to 12
    significant digits (dense: up to ``DENSE_NODES`` nodes; cached per topology)."""
    if topology.n_nodes > DENSE_NODES:
        raise ValueError(f"the whole spectrum is computed for at most {DENSE_NODES} nodes")

    def compute() -> np.ndarray:
        ev = np.linalg.eigvalsh(dense_laplacian(topology, metropolis_weights(topology)))
        return np.array([round_significant(float(v), 12) for v in ev[1:]])

    return per_topology(topology, "spectrum", compute)


def low_eigenvalues(topology: Topology, k: int) -> np.ndarray:
    """lambda_2 .. lambda_{k+1} of the Metropolis Laplacian, to 12 significant digits.

    Dense up to 400 nodes, else shift-invert Lanczos (ARPACK, tolerance 1e-14) around
    -lambda_2 / 2, with the shifted Laplacian (positive definite) factorised once by SuperLU in
    symmetric mode without pivoting, in a minimum-degree order of its pattern: the deflation
    steps and the polynomial's roots need them to about 1e-11 relative, which LOBPCG does not
    give cheaply.  About 15 s and 2 GB at 10^5 nodes for 21 eigenvalues
    (``sim/bench_scaling.py``); the factor grows faster than n, so larger graphs run heavy
    ball.
    """
    if topology.n_nodes <= DENSE_NODES:
        return metropolis_spectrum(topology)[:k]

    def compute() -> np.ndarray:
        import scipy.sparse as sp  # lazily, as in sparse_laplacian
        import scipy.sparse.linalg as spla

        n = topology.n_nodes
        lap = sparse_laplacian(topology, metropolis_weights(topology)).tocsc()
        shift = 0.5 * metropolis_extremes(topology)[0]
        # positive definite: no pivoting, and a minimum-degree order of the symmetric pattern
        lu = spla.splu(lap + shift * sp.identity(n, format="csc"), permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                       options={"SymmetricMode": True})
        solve = spla.LinearOperator((n, n), matvec=lu.solve, dtype=float)
        ev = np.sort(spla.eigsh(lap, k=k + 1, sigma=-shift, which="LM", OPinv=solve, return_eigenvectors=False, tol=1e-14))
        return np.array([round_significant(float(v), 12) for v in ev[1 : k + 1]])

    return per_topology(topology, ("low_eigenvalues", k), compute)
