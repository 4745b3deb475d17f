"""pdmm-sp's update formulas, each written once: both engines call these, so they round identically.

PDMM for average consensus (Zhang & Heusdens 2018) solves min sum_i 1/2 ||x_i - s_i||^2
subject to x_i = x_j on every edge.  With B_{i|j} = +1 if i < j else -1 and a dual z_{i|j} per
directed edge, one synchronous round is (eq. (10)-(11) of Li et al. 2022)::

    x_i  <- (s_i - sum_j B_{i|j} z_{i|j}) / (1 + c d_i)
    z_{j|i} <- (1 - theta) z_{j|i} + theta (z_{i|j} + 2 c B_{i|j} x_i)

theta = 1 is PDMM, theta = 1/2 averaged PDMM (ADMM).  Subspace perturbation (Li, Heusdens &
Christensen 2020): the initial duals z^(0) are drawn with a large standard deviation and
exchanged once per aggregation over an encrypted channel; afterwards every node broadcasts
only x_i, and each node tracks both z_{i|j} and z_{j|i} of its edges itself.  The part of
z^(0) in H-perp (the orthogonal complement of span(C) + span(PC)) never converges, which hides
s_i in x_i, while x converges to the exact average because x depends on z only through H.

Heavy ball.  Summing the dual updates shows that PDMM's primal obeys a three-term recurrence
of the heavy-ball type, (1 + c d_i) x(t+2) = 2c sum_j x_j(t+1) + (1 - c d_i) x(t), whose
momentum is tied to c, so one parameter cannot reach the optimal heavy-ball rate.  We add a
node-local term w_i to the dual sums and weight the edges (c_ij = c / max(d_i, d_j),
symmetric)::

    x_i  <- (s_i - u_i) / N,                       N = 2 / (1 - beta)
    u_i  <- v_i - 2 sum_j c_ij x_j - w_i x_i,       w_i = K - 2 sum_j c_ij,  K = 2 (1 + beta) / (1 - beta)
    v_i  <- u_i + K x_i

Then x(t+2) = (1 + beta) x(t+1) - (1 - beta) L_c x(t+1) - beta x(t) exactly, Polyak's heavy
ball on the weighted Laplacian L_c (step alpha = (1 - beta) c).  The per-edge duals still
follow PDMM's update z_{j|i} <- z_{i|j} + 2 c_ij B_{i|j} x_i (the w_i terms are a node-local
accumulator beside them), so their H-perp part still flips with P forever and never
converges; sum_i (u_i + v_i) is conserved and N x(t+1) + (N - K) x(t) sums to 2 sum_i s_i, so
the fixed point is the exact average.  What a node reveals is unchanged: x_i(1), x_i(2)
expose s_i - u_i(0) and s_i - v_i(0) (hidden by the duals of an honest edge), and every later
x_i is a function of earlier broadcasts.  The step parameters: ``steps``.
"""

from __future__ import annotations

import numpy as np


def dual_update(z: np.ndarray, z_other: np.ndarray, coef: np.ndarray, x_other: np.ndarray, theta: float) -> np.ndarray:
    """z_{i|j} <- (1 - theta) z_{i|j} + theta (z_{j|i} + 2 c B_{j|i} x_j); ``coef`` = 2 c B_{j|i}.

    The one place this formula is written: the node and the vectorised engine both call it,
    elementwise, so they round identically.
    """
    return (1.0 - theta) * z + theta * (z_other + coef * x_other)


def sums_update(u, v, x, nb_sum, two_c, two_cd, theta: float, w=None, *, inplace: bool = False):
    """The synchronous PDMM round on per-node dual sums (no per-edge state needed).

    With u_i = sum_j B_{i|j} z_{i|j} and v_i = sum_j B_{i|j} z_{j|i}, summing the dual update
    over a node's edges (B_{i|j} B_{j|i} = -1) gives::

        u_i <- (1 - theta) u_i + theta (v_i - 2c sum_j x_j)
        v_i <- (1 - theta) v_i + theta (u_i + 2c d_i x_i)

    so a node needs only u_i, v_i and its neighbours' broadcasts; x_i = (s_i - u_i)/(1 + c d_i)
    is the same iterate as with per-edge duals.  (The per-edge parts, including the H-perp
    component that never converges, are still there implicitly: tests run the per-edge
    recursion beside this one.)  Node and batch engine both call this function.

    Heavy-ball mode passes ``nb_sum`` = sum_j 2 c_ij x_j, ``two_c`` = 1, ``two_cd`` = K and the
    node-local term ``w`` (module docstring): u_i <- v_i - 2 sum_j c_ij x_j - w_i x_i,
    v_i <- u_i + K x_i.

    ``inplace=True`` (the batch engine on NumPy, theta = 1) writes the new u into ``nb_sum``'s
    buffer and the new v into ``u``'s, with the same operations in the same order, so the
    bits are those of the allocating form; the caller must own both buffers.
    """
    if inplace and theta == 1.0:
        scratch = np.multiply(w, x) if w is not None else None
        u_new = np.subtract(v, nb_sum if two_c == 1.0 else np.multiply(two_c, nb_sum), out=nb_sum)
        if scratch is not None:
            np.subtract(u_new, scratch, out=u_new)
            v_new = np.add(u, np.multiply(two_cd, x, out=scratch), out=u)
        else:
            v_new = np.add(u, np.multiply(two_cd, x), out=u)
        return u_new, v_new
    u_new = v - nb_sum if two_c == 1.0 else v - two_c * nb_sum
    if w is not None:
        u_new = u_new - w * x
    v_new = u + two_cd * x
    if theta == 1.0:
        return u_new, v_new
    return (1.0 - theta) * u + theta * u_new, (1.0 - theta) * v + theta * v_new


def settled(x, x_prev, nb_sum, degree, tol: float, xp=np):
    """Local stopping test of node i: max(|x_i - x_i_prev|, |x_i - nb_sum_i / degree_i|) <= tol max|x_i|.

    Infinity norms over the vector; ``nb_sum / degree`` is the (weighted) mean of the
    neighbours.  When every node passes, x is (close to) harmonic on the graph, i.e. (close
    to) constant on a connected graph: consensus.  For one node (1-D ``x``) ``nb_sum`` may
    also hold one row per neighbour with ``degree`` 1 (asynchronous mode, which compares with
    each neighbour's last broadcast): then the answer is one flag per row.  ``xp`` is the
    array namespace (NumPy for a node).

    Shortcuts that give the same answer more cheaply: for a batch (2-D x), a node whose
    change in the first or the middle entry already exceeds tol times the largest |x| of
    *all* nodes fails, so while every node fails that way nothing else is computed (most
    rounds); the gap term is only computed when some node's change passes.  Maxima are
    exact, so the answer does not depend on how they are taken.
    """
    if x.ndim == 2 and x.shape[0] > 1:
        # (NumPy's methods: a few microseconds less per call, which counts at 80 nodes)
        bound = tol * (max(x.max(), -x.min()) if xp is np else xp.maximum(xp.max(x), -xp.min(x)))
        # two entries, as one entry of a heavy-ball iterate crosses zero change now and then
        j = x.shape[1] // 2
        candidates = (xp.abs(x[:, 0] - x_prev[:, 0]) <= bound) & (xp.abs(x[:, j] - x_prev[:, j]) <= bound)
        if not (candidates.any() if xp is np else bool(xp.any(candidates))):
            return candidates
    threshold = tol * _row_max(xp.abs(x), xp)
    ok = _row_max(xp.abs(x - x_prev), xp) <= threshold
    if not bool(xp.any(ok)):
        return ok
    return ok & (_row_max(xp.abs(x - nb_sum / degree), xp) <= threshold)


def _row_max(a, xp):
    """max over the last axis.  NumPy reduces a short last axis of a tall array slowly (a
    call per row); a running maximum over the columns is several times faster there, and
    exact like any maximum."""
    if xp is np and a.ndim == 2 and a.shape[0] >= 256 and a.shape[1] > 1:
        acc = a[:, 0].copy()
        for j in range(1, a.shape[1]):
            np.maximum(acc, a[:, j], out=acc)
        return acc
    return xp.max(a, axis=-1)


def neighbour_sum(x_nb: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """sum_j (c_ij) x_j in neighbour order, starting from zero: the order of a CSR product's row."""
    acc = np.zeros(x_nb.shape[1:])
    if weights is None:
        for row in x_nb:
            acc += row
    else:
        for w, row in zip(weights, x_nb, strict=True):
            acc += w * row
    return acc
