"""PDMM average consensus with subspace perturbation (``pdmm-sp``).

Average consensus as the problem min sum_i 1/2 ||x_i - s_i||^2 subject to x_i = x_j on every
edge, solved by PDMM (Zhang & Heusdens 2018).  With B_{i|j} = +1 if i < j else -1 and a dual
z_{i|j} per directed edge, one synchronous round is (eq. (10)-(11) of Li et al. 2022)::

    x_i  <- (s_i - sum_j B_{i|j} z_{i|j}) / (1 + c d_i)
    z_{j|i} <- (1 - theta) z_{j|i} + theta (z_{i|j} + 2 c B_{i|j} x_i)

theta = 1 is PDMM, theta = 1/2 averaged PDMM (ADMM).  Subspace perturbation (Li, Heusdens &
Christensen 2020): the initial duals z^(0) are drawn with a large standard deviation and
exchanged once per aggregation over an encrypted channel; afterwards every node broadcasts
only x_i, and each node tracks both z_{i|j} and z_{j|i} of its edges itself.  The part of
z^(0) in H-perp (the orthogonal complement of span(C) + span(PC)) never converges, which hides
s_i in x_i, while x converges to the exact average because x depends on z only through H.

Heavy-ball acceleration (``accel = "heavy-ball"``, the default in sync mode with theta = 1).
Summing the dual updates shows that PDMM's primal obeys a three-term recurrence of the
heavy-ball type, (1 + c d_i) x(t+2) = 2c sum_j x_j(t+1) + (1 - c d_i) x(t), whose momentum
is tied to c, so one parameter cannot reach the optimal heavy-ball rate.  We add a node-local
term w_i to the dual sums and weight the edges (c_ij = c / max(d_i, d_j), symmetric)::

    x_i  <- (s_i - u_i) / N,                       N = 2 / (1 - beta)
    u_i  <- v_i - 2 sum_j c_ij x_j - w_i x_i,       w_i = K - 2 sum_j c_ij,  K = 2 (1 + beta) / (1 - beta)
    v_i  <- u_i + K x_i

Then x(t+2) = (1 + beta) x(t+1) - (1 - beta) L_c x(t+1) - beta x(t) exactly, Polyak's heavy
ball on the weighted Laplacian L_c (step alpha = (1 - beta) c), and with beta and alpha from
L_c's extreme eigenvalues its rate is Chebyshev's, (sqrt(kappa) - 1) / (sqrt(kappa) + 1).
The per-edge duals still follow PDMM's update z_{j|i} <- z_{i|j} + 2 c_ij B_{i|j} x_i (the
w_i terms are a node-local accumulator beside them), so their H-perp part still flips with P
forever and never converges; sum_i (u_i + v_i) is conserved and N x(t+1) + (N - K) x(t) sums
to 2 sum_i s_i, so the fixed point is the exact average.  What a node reveals is unchanged:
x_i(1), x_i(2) expose s_i - u_i(0) and s_i - v_i(0) (hidden by the duals of an honest edge),
and every later x_i is a function of earlier broadcasts.

Deflated heavy ball (``accel = "deflated"``, the default from 6 to 20 000 nodes where the public
spectrum predicts fewer rounds, :func:`deflation_pays`: on geometric graphs nearly always).  The
lowest eigenvalues of the Metropolis Laplacian are public and, on geometric graphs, isolated
(lambda_5 ~ 4 lambda_2): heavy ball tuned to [lambda_5, lambda_max] plus three steps
x <- x - L_g x / lambda_j (j = 2, 3, 4) that remove the modes it does not damp converges
about sqrt(4) times faster, less the cost of those steps (``sim/bench_consensus.py --part c``:
0.76x heavy ball's rounds at 1 000 nodes, 0.89x at 10 000, at a smaller error; ``--part d``: 0.47-0.88x
on geometric graphs of 8-300 nodes).  It is the same dual-sum iteration with a public per-round schedule of N, K and the
edge scale (:func:`deflation_schedule`); the fixed point stays exact, the per-edge duals
follow PDMM's update with c_ij = c_t g_ij, so their H-perp part never converges, and what a
node reveals is unchanged.  No node counts as settled before the schedule's last special
round.

Messages.  ``dual-init`` (round 0, encrypted, one per directed edge: z_{i|j}); then one
``primal`` broadcast per round t >= 1 with payload x_i(t) and ``meta = (g, stop_at)``: the
settled counter g_i(t - 1) and the stop round known to i before round t (``NEVER`` = 2**62
while none), both integers >= 0 (async mode: ``meta = (g, stop_flag)``).

Stopping (evaluated by each node on what it sees): node i is *locally settled* in round t when
both its own change |x_i(t) - x_i(t-1)| and its disagreement with the (weighted) mean of its
neighbours are at most ``tol * max|x_i(t)|`` (infinity norms).  A counter
g_i(t) = 1 + min(g_i(t-1), min_j g_j(t-1)) while settled (0 otherwise) rides on the
broadcasts; by induction g_i(t) >= k iff every node j at distance delta < k was settled in all
rounds t - k + 1 .. t - delta.  With e_i a public upper bound on i's eccentricity
(``Topology.eccentricity``), g_i(t) >= e_i + 1 therefore means every node j was settled in
rounds t - e_i .. t - dist(i, j) (all of them at least in round t - e_i), and node i fixes ``stop_at = t + e_i`` and floods it (the minimum
of proposals): a proposal made at node i in round t reaches every node by round t + e_i, so
all nodes know the smallest proposal by the round it names and stop together (or at
``max_iter``).  Using e_i instead of the diameter D lets the central nodes decide first: the
overhead after the last node settles falls from about 2D rounds to about twice the radius.

Engines.  :class:`PdmmNode` is the per-node state machine (simulator and deployment);
:meth:`PdmmSP.aggregate` runs all nodes at once with the same update functions, on NumPy
(bit-identical to the nodes) or, with ``device``, on another array-API namespace (CuPy).  On
NumPy a round reuses preallocated buffers and SciPy's CSC product, which adds each node's
neighbour terms in the node's own order; the settle test skips its full form while a cheap,
exact prefilter already fails every node (see :func:`settled`).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Union

import numpy as np

from p2pem.errors import ConfigError, GraphError, ProtocolError
from p2pem.gmm import round_significant
from p2pem.messages import Message
from p2pem.protocols.base import AggregateOutcome, Aggregation, NodeContext, ProtocolSpec, ProtocolViolation, Topology, check_vector

if TYPE_CHECKING:
    import networkx as nx

NEVER = 2**62


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
    to) constant on a connected graph: consensus.  ``xp`` is the array namespace (NumPy for
    a node).  Shortcuts that give the same answer more cheaply: for a batch (2-D x), a node
    whose change in the first or the middle entry already exceeds tol times the largest |x|
    of *all* nodes fails, so while every node fails that way nothing else is computed (most
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


def _dual_sum_matrices(topology: Topology):
    """Sparse (n, m) matrices taking the per-edge initial duals (CSR edge order) to
    u_i = sum_j B_{i|j} z_{i|j} and v_i = sum_j B_{i|j} z_{j|i}.

    Their product adds a row's terms from zero in neighbour order, as :func:`neighbour_sum`
    does on a node (same bits), without the (m, p) temporaries of a gather.
    """
    import scipy.sparse as sp

    n, m = topology.n_nodes, topology.dst.size
    sign = topology.sign.astype(float)
    return (sp.csr_matrix((sign, np.arange(m), topology.indptr), shape=(n, m)),
            sp.csr_matrix((sign, topology.reverse, topology.indptr), shape=(n, m)))


LAMBDA2_MARGIN = 0.98


#: Up to this many nodes the spectra are computed densely with NumPy (no SciPy import: a
#: deployed node process computes its step parameters itself and starts faster without it).
DENSE_NODES = 400


def dense_laplacian(topology: Topology, weights: np.ndarray) -> np.ndarray:
    """The weighted Laplacian as a dense NumPy array, bit for bit :func:`sparse_laplacian`
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
    import scipy.sparse as sp

    W = topology.weighted_adjacency(weights)
    return sp.diags(np.asarray(W.sum(axis=1)).ravel()) - W


def laplacian_extremes(topology: Topology, weights: np.ndarray) -> tuple[float, float]:
    """(lambda_2, lambda_max) of the weighted Laplacian with edge ``weights`` (in edge order).

    Up to 400 nodes a dense eigendecomposition.  Above, LOBPCG (O(m) per iteration, no
    factorisation, unlike shift-invert), fixed starts so every node
    computes the same values on the same platform (the heavy-ball rate depends on
    sqrt(kappa), so a percent in kappa is half a percent in rounds):

    * lambda_max (relative residual 1e-2), raised by the residual norm (the Ritz value is a lower bound, and heavy ball
      is stable only up to lambda_max + lambda_2) and capped by Gershgorin's 2 max_i sum_j c_ij;
    * lambda_2 (relative residual 1e-3) with the constant vector deflated, started from the hop distances to the two
      ends of a long shortest path (a double BFS sweep): smooth along the graph's longest
      direction, like the Fiedler vector, so it converges in tens of iterations.  The
      Ritz value errs high by about 1 %.

    ``sim/bench_scaling.py`` measures both against shift-invert and reports the rounds impact.
    """
    n = topology.n_nodes
    if n <= DENSE_NODES:
        ev = np.linalg.eigvalsh(dense_laplacian(topology, weights))
        return float(ev[1]), float(ev[-1])
    import scipy.sparse.linalg as spla

    lap = sparse_laplacian(topology, weights).tocsr()
    wdeg = lap.diagonal()
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # lobpcg warns when it stops at maxiter; the bounds below still hold
        top, vec = spla.lobpcg(lap, rng.standard_normal((n, 2)), largest=True, tol=1e-2, maxiter=500)
        k = int(np.argmax(top))
        resid = float(np.linalg.norm(lap @ vec[:, k] - top[k] * vec[:, k]) / np.linalg.norm(vec[:, k]))
        lmax = min(float(top[k]) + resid, 2.0 * float(wdeg.max()))

        db, dc = topology.sweep
        start = np.column_stack([db - dc, db + dc])
        low, _ = spla.lobpcg(lap, start, Y=np.ones((n, 1)), largest=False, tol=1e-3, maxiter=2000)
    return LAMBDA2_MARGIN * float(np.min(low)), lmax


def _cached(topology: Topology, key: object, compute):
    cache = topology.__dict__.setdefault("_pdmm_cache", {})
    if key not in cache:
        cache[key] = compute()
    return cache[key]


def auto_c(topology: Topology) -> float:
    """Plain PDMM's step size from the graph alone (public): 1 / sqrt(lambda_2 * lambda_max) of the Laplacian.

    A common heuristic for ADMM-type consensus, it balances the slowest and the fastest
    modes; ``sim/bench_consensus.py`` compares it with a grid of fixed values.  Cached on the
    topology object.
    """

    def compute() -> float:
        lam2, lmax = laplacian_extremes(topology, np.ones(topology.dst.size))
        return round_significant(1.0 / math.sqrt(lam2 * lmax))

    return _cached(topology, "auto_c", compute)


def metropolis_weights(topology: Topology) -> np.ndarray:
    """1 / max(d_i, d_j) per directed edge (i, j): symmetric, and sum_j <= 1 at every node."""
    deg = topology.degrees.astype(float)
    return 1.0 / np.maximum(deg[topology.src], deg[topology.dst])


def metropolis_extremes(topology: Topology) -> tuple[float, float]:
    """(lambda_2, lambda_max) of the Metropolis Laplacian (:func:`laplacian_extremes`), cached on the topology."""
    return _cached(topology, "metropolis", lambda: laplacian_extremes(topology, metropolis_weights(topology)))


def heavy_ball_params(topology: Topology) -> tuple[float, float]:
    """(c, beta) of the heavy-ball variant: Polyak's optimal parameters on the Metropolis Laplacian.

    With lambda_2, lambda_max of L_g (g_ij = 1 / max(d_i, d_j)) and kappa = lambda_max / lambda_2:
    alpha = 4 / (sqrt(lambda_max) + sqrt(lambda_2))^2, beta = ((sqrt(kappa) - 1) / (sqrt(kappa) + 1))^2
    (Polyak 1964), and c = alpha / (1 - beta), so that the primal recurrence of the module
    docstring is heavy ball with step alpha on L_g.  Both rounded to 6 significant digits.
    """

    def compute() -> tuple[float, float]:
        lam2, lmax = metropolis_extremes(topology)
        kappa = lmax / lam2
        beta = ((math.sqrt(kappa) - 1.0) / (math.sqrt(kappa) + 1.0)) ** 2
        alpha = 4.0 / (math.sqrt(lmax) + math.sqrt(lam2)) ** 2
        return round_significant(alpha / (1.0 - beta)), round_significant(beta)

    return _cached(topology, "heavy_ball", compute)


N_DEFLATE = 3
DEFLATE_NODES = (N_DEFLATE + 3, 20_000)


@dataclass(frozen=True)
class Schedule:
    """Per-round coefficients of deflated heavy ball: ``denom`` N_t, ``scale`` c_t and ``local``
    K_t for rounds t = 1..``end``; every later round uses the last entries (plain heavy ball).

    No node counts as settled before round ``end`` + 1 (the stopping rule starts after the
    last special round).  See :func:`deflation_schedule`.
    """

    deflate_at: int
    denom: tuple[float, ...]
    scale: tuple[float, ...]
    local: tuple[float, ...]

    @property
    def end(self) -> int:
        return len(self.denom)

    @property
    def beta(self) -> float:
        """Heavy ball's momentum after the special rounds (N = 2 / (1 - beta) there)."""
        return 1.0 - 2.0 / self.denom[-1]

    def at(self, t: int) -> tuple[float, float, float]:
        i = min(t, self.end) - 1
        return self.denom[i], self.scale[i], self.local[i]


def low_eigenvalues(topology: Topology, k: int) -> np.ndarray:
    """lambda_2 .. lambda_{k+1} of the Metropolis Laplacian, to 12 significant digits.

    Dense up to 400 nodes, else shift-invert Lanczos (ARPACK, tolerance 1e-14): the
    deflation steps need them to about 1e-9 relative, which LOBPCG does not give cheaply.
    """
    def compute() -> np.ndarray:
        if topology.n_nodes <= DENSE_NODES:
            ev = np.linalg.eigvalsh(dense_laplacian(topology, metropolis_weights(topology)))
        else:
            import scipy.sparse.linalg as spla

            lap = sparse_laplacian(topology, metropolis_weights(topology)).tocsc()
            lam2, _ = metropolis_extremes(topology)
            ev = np.sort(spla.eigsh(lap, k=k + 1, sigma=-0.5 * lam2, which="LM", return_eigenvectors=False, tol=1e-14))
        return np.array([round_significant(float(v), 12) for v in ev[1 : k + 1]])

    return _cached(topology, ("low_eigenvalues", k), compute)


def deflation_schedule(topology: Topology) -> Schedule:
    """Heavy ball on [lambda_5, lambda_max] with the three lowest modes removed (public, cached).

    On a geometric graph the lowest eigenvalues of the Metropolis Laplacian L_g are
    isolated (lambda_3 ~ 1.1 lambda_2, lambda_4 ~ 2 lambda_2, lambda_5 ~ 4 lambda_2), so heavy
    ball tuned to [0.98 lambda_5, lambda_max] converges about sqrt(lambda_5 / lambda_2) times
    faster, and three steps x <- x - L_g x / lambda_j (j = 2, 3, 4) remove the modes it does
    not damp.  Those steps amplify the other modes by up to prod_j lambda_max / lambda_j, so
    they come at the round where heavy ball has damped them by as much (earlier, float64
    rounding would leak into the removed modes); the momentum restarts after them.

    Any schedule of steps x(k) = (1 + m_k) x(k-1) - b_k L_g x(k-1) - m_k x(k-2) is the primal
    of the dual-sum iteration (:func:`sums_update`, edge weights c_t g_ij, node-local term
    w_t = K_t - 2 c_t sum_j g_ij) with primal divisor N_t, where N_{k-1} = 2 + m_k N_k
    (backwards from heavy ball's 2 / (1 - beta)), c_{k-1} = b_k N_k / 2 and
    K_t = N_t + N_{t+1} - 2.  The same K_t in both dual sums keeps sum_i (u_i + v_i) = 0, and
    N_{t+1} + N_t - K_t = 2 makes the exact average the fixed point; the per-edge duals
    follow PDMM's update with c_ij = c_t g_ij, so their H-perp part still never converges.
    ``sim/bench_consensus.py --part c`` measures the rounds.
    """

    def compute() -> Schedule:
        low = low_eigenvalues(topology, N_DEFLATE + 1)
        # public and the same on every node: rounded like heavy_ball_params' (other BLAS builds
        # may differ in the last bits), lambda_max only needs to bound the spectrum
        lmax = round_significant(metropolis_extremes(topology)[1])
        roots, lo = [float(v) for v in low[:N_DEFLATE]], LAMBDA2_MARGIN * float(low[N_DEFLATE])
        kappa = lmax / lo
        beta = ((math.sqrt(kappa) - 1.0) / (math.sqrt(kappa) + 1.0)) ** 2
        alpha = 4.0 / (math.sqrt(lmax) + math.sqrt(lo)) ** 2
        at = max(3, math.ceil(sum(math.log(lmax / r) for r in roots) / -math.log(math.sqrt(beta))))
        end = at + N_DEFLATE

        def step(k: int) -> tuple[float, float]:  # (m_k, b_k) of the step that makes x(k)
            if at <= k < end:
                return 0.0, 1.0 / roots[k - at]
            return (0.0 if k == end else beta), alpha

        big_n = {end: 2.0 / (1.0 - beta)}
        for k in range(end, 1, -1):
            big_n[k - 1] = 2.0 + step(k)[0] * big_n[k]
        big_n[end + 1] = big_n[end]
        rounds = range(1, end + 1)
        return Schedule(
            at,
            tuple(big_n[t] for t in rounds),
            tuple(step(t + 1)[1] * big_n[t + 1] / 2.0 for t in rounds),
            tuple(big_n[t] + big_n[t + 1] - 2.0 for t in rounds),
        )

    return _cached(topology, "deflation", compute)


def predicted_rounds(topology: Topology) -> tuple[float, float]:
    """Rounds (heavy ball, deflated heavy ball) predicted from the public spectrum.

    Heavy ball's error falls by sqrt(beta) per round; deflation adds its special rounds
    (:attr:`Schedule.end`) and then falls by its own sqrt(beta), so with 1e-10 as the target
    the predictions are log(1e10) / -log sqrt(beta) rounds, plus ``end`` for deflation.
    """

    def rounds(beta: float) -> float:
        return 0.0 if beta <= 0.0 else math.log(1e10) / (-0.5 * math.log(beta))

    sched = deflation_schedule(topology)
    return rounds(heavy_ball_params(topology)[1]), sched.end + rounds(sched.beta)


def deflation_pays(topology: Topology) -> bool:
    """Whether deflated heavy ball is predicted to need fewer rounds than heavy ball (public, cached).

    The prediction (:func:`predicted_rounds`) picks the faster variant on 20 of the 21 graphs
    of ``sim/bench_consensus.py --part d``: deflation wins where the lowest eigenvalues are
    isolated (geometric graphs, rings, grids, barbells), heavy ball where they are not
    (complete and Erdos-Renyi graphs).
    """

    def compute() -> bool:
        heavy_ball, deflated = predicted_rounds(topology)
        return deflated < heavy_ball

    return _cached(topology, "deflation_pays", compute)


@dataclass(frozen=True)
class StepParams:
    """The public per-round coefficients of one node or, as arrays, of all nodes.

    ``weights`` 2 c_ij per directed edge (None: plain PDMM, all c_ij equal to ``c``), ``denom``
    the primal's divisor, ``two_c``, ``two_cd`` and ``w`` as :func:`sums_update` takes them,
    ``degree`` the divisor of the (weighted) neighbour sum in :func:`settled`.
    """

    c: float
    beta: float | None
    weights: np.ndarray | None
    denom: object
    two_c: float
    two_cd: object
    w: object
    degree: object
    schedule: Schedule | None = None

    @property
    def settle_after(self) -> int:
        """No node counts as settled up to this round."""
        return 1 if self.schedule is None else self.schedule.end

    def at(self, t: int):
        """(denom, two_c, two_cd, w) of round t: constant, or from the deflation schedule
        (weights 2 g_ij scaled by c_t, w_t = K_t - c_t sum_j 2 g_ij)."""
        if self.schedule is None:
            return self.denom, self.two_c, self.two_cd, self.w
        n_t, c_t, k_t = self.schedule.at(t)
        degree: Any = self.degree  # a float (one node) or an (n, 1) array (all nodes)
        return n_t, c_t, k_t, k_t - c_t * degree


def step_params(spec: PdmmSP, topology: Topology, node: int | None = None) -> StepParams:
    """The coefficients of node ``node``'s update, or of all nodes (``node=None``) as column arrays.

    Computed elementwise from public data in the same way for one node and for all, so the
    two engines round identically.
    """
    deg_all = _cached(topology, "degrees_float", lambda: topology.degrees.astype(float))
    if node is None:
        lo, hi, deg = 0, topology.dst.size, deg_all[:, None]
    else:
        lo, hi = int(topology.row_start[node]), int(topology.row_start[node] + topology.degrees[node])
        deg = float(deg_all[node])
    if spec.accelerated:
        c, beta = spec.step_parameters(topology)
        sched = deflation_schedule(topology) if spec.deflates(topology) else None
        # 2 c_ij: the factor 2 of the update rides in the product (exact: a power of two), which
        # saves one pass over the (n, p) block per round; the neighbour mean is unchanged.  The
        # deflated schedule scales 2 g_ij by c_t per round instead.
        scale = 2.0 if sched is not None else 2.0 * c
        weights = scale / np.maximum(deg_all[topology.src[lo:hi]], deg_all[topology.dst[lo:hi]])
        if node is None:
            wdeg2 = topology.weighted_adjacency(weights) @ np.ones((topology.n_nodes, 1))
        else:
            wdeg2 = float(neighbour_sum(weights[:, None])[0])
        if sched is not None:
            n_t, c_t, k_t = sched.at(sched.end)
            return StepParams(c_t, None, weights, n_t, c_t, k_t, k_t - c_t * wdeg2, wdeg2, sched)
        k = 2.0 * (1.0 + beta) / (1.0 - beta)
        return StepParams(c, beta, weights, 2.0 / (1.0 - beta), 1.0, k, k - wdeg2, wdeg2)
    c = spec.step_size(topology)
    return StepParams(c, None, None, 1.0 + c * deg, 2.0 * c, (2.0 * c) * deg, None, deg)


def _namespace(device: str):
    """(array namespace, sparse module) for ``device``."""
    if device == "cpu":
        import scipy.sparse

        # NumPy itself has everything the engine calls (asarray, abs, max, any); the compat
        # wrapper would only add call overhead, which dominates rounds at small n
        return np, scipy.sparse
    if device == "cuda":
        try:
            import array_api_compat
            import cupy
            import cupyx.scipy.sparse
        except ImportError as exc:  # pragma: no cover - needs the gpu extra
            raise ConfigError("pdmm-sp: device = 'cuda' needs CuPy: pip install 'p2pem[gpu]'") from exc
        return array_api_compat.array_namespace(cupy.empty(0)), cupyx.scipy.sparse
    if device == "array-api-strict":
        try:
            import array_api_strict
        except ImportError as exc:
            raise ConfigError("pdmm-sp: device = 'array-api-strict' needs the array-api-strict package") from exc
        return array_api_strict, None
    raise ConfigError(f"pdmm-sp: device must be 'cpu', 'cuda' or 'array-api-strict', got {device!r}")


def _to_host(a) -> np.ndarray:
    if isinstance(a, np.ndarray):
        return a
    if hasattr(a, "get"):  # CuPy
        return a.get()
    return np.from_dlpack(a)


class _Product:
    """``matrix @ x`` on the engine's device: SciPy / CuPy CSR, or via NumPy for array-api-strict.

    array-api-strict has no sparse matrices; its arrays go through SciPy and back, so the rest
    of the engine still runs on the strict namespace and non-portable code fails in tests.
    """

    def __init__(self, matrix, xp, sparse) -> None:
        self.xp = xp
        if sparse is None:
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
            from p2pem.protocols._cuda import CsrRowProduct

            self.matrix = CsrRowProduct(matrix)

    def __call__(self, x):
        if self.host:
            return self.xp.asarray(self.matrix @ np.from_dlpack(x))
        return self.matrix(x) if callable(self.matrix) else self.matrix @ x


class _NeighbourMin:
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


@dataclass(frozen=True)
class PdmmSP(ProtocolSpec):
    """``pdmm-sp``: PDMM average consensus with subspace perturbation.

    Parameters
    ----------
    mode : {"sync", "async"}
        Synchronous rounds, or one uniformly random node wakes per tick.
    c : float or "auto"
        Step size.  Plain PDMM: the penalty c of every edge, "auto" = :func:`auto_c`.
        Heavy ball: the scale of the edge weights c_ij = c / max(d_i, d_j), "auto" =
        :func:`heavy_ball_params`.
    theta : float
        1 for PDMM, 0.5 for averaged PDMM (ADMM).
    perturbation_std : float
        Standard deviation of the initial duals (the privacy noise).
    tol : float or None
        Relative local stopping tolerance (see the module docstring); None picks 1e-10 in
        sync mode and 1e-12 in async mode.
    max_iter : int
        Rounds at most (in async mode: activations per node at most).
    encrypt_duals : bool
        Send the initial duals encrypted (the protocol).  False is an *insecure* variant kept
        only as a labelled comparison for the leakage analysis.
    accel : {"auto", "deflated", "heavy-ball", "none"}
        "heavy-ball": the accelerated iteration of the module docstring (sync, theta = 1
        only); "deflated": heavy ball with the three lowest Laplacian modes removed
        (:func:`deflation_schedule`; c and momentum "auto"); "none": plain PDMM; "auto"
        (default): deflated from 6 to 20 000 nodes with c and momentum "auto" where
        :func:`deflation_pays`, else heavy ball where it applies, else plain.
    momentum : float or "auto"
        Heavy ball's beta in [0, 1); "auto" from the graph (:func:`heavy_ball_params`).
    device : {"cpu", "cuda", "array-api-strict"}
        Where the vectorised engine runs: "cpu" (NumPy/SciPy; bit-identical to the
        message-level engine), "cuda" (CuPy, float64, needs ``p2pem[gpu]``; agrees with the
        CPU to about 1e-12 relative, summation order differs), "array-api-strict" (a test
        device: the portable code path on the strict reference namespace).  The
        message-level engine and deployments always run on the CPU.
    """

    mode: Literal["sync", "async"] = "sync"
    c: Union[float, str] = "auto"
    theta: float = 1.0
    perturbation_std: float = 100.0
    tol: Union[float, None] = None
    max_iter: int = 5000
    encrypt_duals: bool = True
    accel: Literal["auto", "deflated", "heavy-ball", "none"] = "auto"
    momentum: Union[float, str] = "auto"
    device: Literal["cpu", "cuda", "array-api-strict"] = "cpu"
    name: str = field(init=False, default="pdmm-sp")
    exact: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        if self.mode not in ("sync", "async"):
            raise ConfigError(f"pdmm-sp: mode must be 'sync' or 'async', got {self.mode!r}")
        object.__setattr__(self, "asynchronous", self.mode == "async")
        if isinstance(self.c, str):
            if self.c != "auto":
                raise ConfigError(f"pdmm-sp: c must be a positive number or 'auto', got {self.c!r}")
        elif not (_is_number(self.c) and self.c > 0):
            raise ConfigError(f"pdmm-sp: c must be a positive number or 'auto', got {self.c!r}")
        if not (_is_number(self.theta) and 0 < self.theta <= 1):
            raise ConfigError(f"pdmm-sp: theta must be in (0, 1], got {self.theta!r}")
        if not (_is_number(self.perturbation_std) and self.perturbation_std >= 0):
            raise ConfigError(f"pdmm-sp: perturbation_std must be a number >= 0, got {self.perturbation_std!r}")
        if self.tol is not None and not (_is_number(self.tol) and self.tol >= 0):
            raise ConfigError(f"pdmm-sp: tol must be a number >= 0, got {self.tol!r}")
        if not (isinstance(self.max_iter, int) and not isinstance(self.max_iter, bool) and self.max_iter >= 1):
            raise ConfigError(f"pdmm-sp: max_iter must be a positive integer, got {self.max_iter!r}")
        if not isinstance(self.encrypt_duals, bool):
            raise ConfigError(f"pdmm-sp: encrypt_duals must be true or false, got {self.encrypt_duals!r}")
        if self.accel not in ("auto", "deflated", "heavy-ball", "none"):
            raise ConfigError(f"pdmm-sp: accel must be 'auto', 'deflated', 'heavy-ball' or 'none', got {self.accel!r}")
        if self.accel in ("heavy-ball", "deflated") and (self.asynchronous or self.theta != 1.0):
            raise ConfigError(f"pdmm-sp: accel = {self.accel!r} needs mode = 'sync' and theta = 1 (use accel = 'none')")
        if self.accel == "deflated" and (self.c != "auto" or self.momentum != "auto"):
            raise ConfigError("pdmm-sp: accel = 'deflated' takes its steps from the graph: leave c and momentum 'auto'")
        if isinstance(self.momentum, str):
            if self.momentum != "auto":
                raise ConfigError(f"pdmm-sp: momentum must be a number in [0, 1) or 'auto', got {self.momentum!r}")
        elif not (_is_number(self.momentum) and 0 <= self.momentum < 1):
            raise ConfigError(f"pdmm-sp: momentum must be a number in [0, 1) or 'auto', got {self.momentum!r}")
        if self.device not in ("cpu", "cuda", "array-api-strict"):
            raise ConfigError(f"pdmm-sp: device must be 'cpu', 'cuda' or 'array-api-strict', got {self.device!r}")

    @property
    def accelerated(self) -> bool:
        """Whether heavy ball (deflated or not) runs (``accel`` resolved)."""
        return self.accel in ("heavy-ball", "deflated") or (self.accel == "auto" and not self.asynchronous and self.theta == 1.0)

    def deflates(self, topology: Topology) -> bool:
        """Whether the deflated schedule runs on ``topology``: asked for, or by default (c and
        momentum "auto") from 6 to 20 000 nodes (its exact eigenvalues take seconds up there)
        where :func:`deflation_pays` predicts fewer rounds than heavy ball."""
        if self.accel == "deflated":
            if topology.n_nodes < DEFLATE_NODES[0]:
                raise ConfigError(f"pdmm-sp: accel = 'deflated' needs at least {DEFLATE_NODES[0]} nodes")
            return True
        return (self.accel == "auto" and self.accelerated and self.c == "auto" and self.momentum == "auto"
                and DEFLATE_NODES[0] <= topology.n_nodes <= DEFLATE_NODES[1] and deflation_pays(topology))

    @property
    def stop_tol(self) -> float:
        """The stopping tolerance in force: ``tol``, or by default 1e-10 (sync) / 1e-12 (async).

        Asynchronous nodes judge convergence against neighbours' possibly stale broadcasts
        and stop one by one, so they need a tighter threshold for the same final accuracy.
        """
        if self.tol is not None:
            return float(self.tol)
        return 1e-12 if self.asynchronous else 1e-10

    @property
    def label(self) -> str:
        return "pdmm-sp" + ("" if self.encrypt_duals else " (INSECURE: plaintext duals)")

    @property
    def message_kinds(self) -> frozenset[str]:
        return frozenset({"dual-init", "primal"})

    @property
    def secret_kinds(self) -> frozenset[str]:
        """The initial duals: an observer who knew z_{i|j}(0) could undo the subspace perturbation."""
        return frozenset({"dual-init"})

    @property
    def max_ahead(self) -> int:
        """One: a neighbour's dual-init.  Its first primal of an aggregation (in both modes) needs
        every neighbour's dual-init, this node's included, which this node sends when it begins."""
        return 1

    def validate(self, g: nx.Graph | Topology) -> None:
        from p2pem.graphs import require_cycle

        if not isinstance(g, Topology):
            require_cycle(g)
        elif g.dst.size // 2 < g.n_nodes:  # connected by construction; a tree has n - 1 edges
            raise GraphError("the topology has no cycle (it is a tree): pdmm-sp would hide nothing; add edges or use secure-sum")

    def step_size(self, topology: Topology) -> float:
        """Plain PDMM's c (see :meth:`step_parameters` for the heavy-ball pair)."""
        return auto_c(topology) if self.c == "auto" else float(self.c)

    def step_parameters(self, topology: Topology) -> tuple[float, float]:
        """Heavy ball's (c, beta): from the graph where "auto", else as given."""
        if self.c != "auto" and self.momentum != "auto":
            return float(self.c), float(self.momentum)
        c, beta = heavy_ball_params(topology)
        return (c if self.c == "auto" else float(self.c)), (beta if self.momentum == "auto" else float(self.momentum))

    def public_parameters(self, topology: Topology) -> tuple[float, ...]:
        """Plain PDMM's c; heavy ball's (c, beta); the deflated schedule's N_t, c_t and K_t."""
        if not self.accelerated:
            return (self.step_size(topology),)
        if self.deflates(topology):
            sched = deflation_schedule(topology)
            return (float(sched.deflate_at), *sched.denom, *sched.scale, *sched.local)
        return self.step_parameters(topology)

    def resolved_params(self, topology: Topology) -> dict:
        """The iteration that ran (``accel``: "deflated", "heavy-ball" or "none") and its step
        size ``c`` and ``momentum`` (heavy ball's beta; for deflation those of the rounds
        after its special ones, and ``deflate_at``, the round of the first special step)."""
        if not self.accelerated:
            return {"accel": "none", "c": self.step_size(topology), "momentum": None}
        if self.deflates(topology):
            sched = deflation_schedule(topology)
            return {"accel": "deflated", "c": sched.scale[-1], "momentum": sched.beta, "deflate_at": sched.deflate_at}
        c, beta = self.step_parameters(topology)
        return {"accel": "heavy-ball", "c": c, "momentum": beta}

    def node_aggregation(self, ctx: NodeContext, iteration: int) -> Aggregation:
        return PdmmNode(self, ctx, iteration)

    # -- the batch path -------------------------------------------------------------------

    def aggregate(self, values, topology, rngs, iteration, *, record=False) -> AggregateOutcome:
        """All nodes at once on ``device``: the same arithmetic as :class:`PdmmNode`, in the same order.

        The vector work (primal, sparse product, dual sums, settle test) and the integer
        stopping counters run on the array namespace of ``device``.  On the CPU the initial
        duals come from the per-node generators (bit for bit the message-level engine); on a
        device they are drawn there as one block (:meth:`_dual_sums_device`).
        """
        if self.asynchronous:
            raise NotImplementedError("asynchronous pdmm-sp runs only at message level")
        if record and self.device != "cpu":
            raise ConfigError("pdmm-sp: recording a message trace needs device = 'cpu'")
        xp, sparse = _namespace(self.device)
        t_ = topology
        n, p = values.shape
        prm = _cached(t_, ("steps", self.accel, self.accelerated, self.c, self.momentum, self.theta), lambda: step_params(self, t_))
        theta = self.theta
        trace: list[Message] | None = [] if record else None
        worst = int(np.argmin(np.max(np.abs(values), axis=1))) if n else 0
        check_precision(self, values[worst], worst)
        on_host = self.device == "cpu"
        if on_host:
            u, v = self._dual_sums_host(values, t_, rngs, iteration, trace)
        else:
            u, v = self._dual_sums_device(p, t_, rngs, xp, sparse)
        # the product's matrix (on the device) is built once per topology and step parameters
        product = _cached(t_, ("product", self.device, prm.c, prm.beta, prm.schedule is None), lambda: _Product(
            t_.adjacency if prm.weights is None else t_.weighted_adjacency(prm.weights), xp, sparse))
        # min(a_i, min over i's neighbours of a_j): the stopping counters' one reduction; the
        # counters live beside x (host for the CPU, else the device: no transfer per round)
        nb_min = _cached(t_, ("nb_min", self.device), lambda: _NeighbourMin(t_, xp, on_host))
        cxp = np if on_host else xp

        def dev(a):
            return a if not isinstance(a, np.ndarray) else xp.asarray(a)

        u, v, s_dev = dev(u), dev(v), dev(np.ascontiguousarray(values, dtype=float))
        denom, two_cd, w, degree = dev(prm.denom), dev(prm.two_cd), dev(prm.w), dev(prm.degree)
        two_c = prm.two_c
        settle_after = prm.settle_after
        ecc = t_.eccentricity if on_host else xp.asarray(t_.eccentricity)
        zeros = cxp.zeros(n, dtype=cxp.int64)  # never written to: g_new may alias it
        g = zeros
        stop_at = cxp.full(n, NEVER, dtype=cxp.int64)
        flooding = False  # does any node hold a stop round yet?
        x_prev = None
        # on NumPy the round runs in preallocated buffers (same operations, same bits): x goes
        # into `spare`, sums_update writes the new u and v over nb_sum and the old u
        inplace = xp is np and theta == 1.0
        spare = np.empty_like(u) if inplace else None
        t = 0
        while True:
            t += 1
            if prm.schedule is not None:
                denom, two_c, two_cd, _ = prm.at(t)
                w = two_cd - two_c * degree  # as prm.at computes it, on the device
            if inplace:
                x = np.divide(np.subtract(s_dev, u, out=spare), denom, out=spare)
            else:
                x = (s_dev - u) / denom
            if trace is not None:
                for i in range(n):
                    trace.append(Message(i, t_.neighbours[i], iteration, t, "primal", x[i].copy(), False, (int(g[i]), int(stop_at[i]))))
            nb_sum = product(x)
            # the floods below are skipped while there is nothing to flood (same result, cheaper)
            stop_in = nb_min(stop_at) if flooding else stop_at
            g_new = zeros
            if t > settle_after:
                ok = settled(x, x_prev, nb_sum, degree, self.stop_tol, xp)
                if bool(cxp.any(ok)):
                    g_new = cxp.where(ok, 1 + nb_min(g), zeros)
                    trigger = g_new >= ecc + 1
                    if bool(cxp.any(trigger)):
                        stop_in = cxp.where(trigger, cxp.minimum(stop_in, t + ecc), stop_in)
                        flooding = True
            if t >= int(stop_in[0]) or t >= self.max_iter:
                # stop_at is flooded, so at the stopping round every node holds the same value
                if not bool(cxp.all(t >= stop_in)) and t < self.max_iter:
                    raise ProtocolError("pdmm-sp: nodes disagree on the stopping round (internal error)")
                converged = bool(t >= int(stop_in[0]))
                break
            g, stop_at = g_new, stop_in
            spare = v if x_prev is None else x_prev  # free after this round (trace rows are copies)
            u, v = sums_update(u, v, x, nb_sum, two_c, two_cd, theta, w, inplace=inplace)
            x_prev = x
        n_edges = t_.dst.size
        messages = n_edges + n * t
        nbytes = n_edges * 8 * p + n * t * (8 * p + 16)
        return AggregateOutcome(_to_host(x), t, messages, nbytes, converged, trace)

    def _dual_sums_host(self, values, t_, rngs, iteration, trace):
        """u_i = sum_j s_ij z_{i|j}(0) and v_i = sum_j s_ij z_{j|i}(0) from every node's own stream.

        Node i draws the initial duals of its outgoing edges from its generator, as
        :class:`PdmmNode` does, so this engine and the message-level one agree bit for bit.
        """
        n, p = values.shape
        z = np.empty((t_.dst.size, p))
        bounds = t_.indptr.tolist()
        for i in range(n):
            lo, hi = bounds[i], bounds[i + 1]
            z[lo:hi] = rngs[i].normal(0.0, self.perturbation_std, size=(hi - lo, p))
        if trace is not None:
            src = t_.src
            for d in range(t_.dst.size):
                trace.append(Message(int(src[d]), (int(t_.dst[d]),), iteration, 0, "dual-init", z[d].copy(), self.encrypt_duals))
        to_u, to_v = _cached(t_, "dual_sums", lambda: _dual_sum_matrices(t_))
        return to_u @ z, to_v @ z

    def _dual_sums_device(self, p, t_, rngs, xp, sparse):
        """u and v as in :meth:`_dual_sums_host`, with the initial duals drawn on the device.

        At 10^5 nodes the per-node host draws (a Python loop over the nodes, then 7 million
        edges times p columns copied to the device) cost seconds per aggregation, more than the
        consensus itself on a GPU.  Here one block of N(0, std^2) duals is drawn on the device
        from a generator seeded by the run's last protocol stream (the asynchronous schedule's,
        unused by synchronous runs): the same distribution, not the same numbers as the CPU
        engine, so device and CPU results agree to the consensus tolerance, not bit for bit.
        A simulation, not a deployment: nothing here is a secret.
        """
        if len(rngs) <= t_.n_nodes:
            raise ConfigError("pdmm-sp on a device needs the run's protocol streams (p2pem.simulate.protocol_streams)")
        seed = int(rngs[t_.n_nodes].integers(2**63))
        m = t_.dst.size
        if self.device == "cuda":
            import cupy

            z = cupy.random.default_rng(seed).standard_normal((m, p)) * self.perturbation_std
        else:  # array-api-strict has no random numbers: drawn by NumPy, then moved
            z = xp.asarray(np.random.default_rng(seed).normal(0.0, self.perturbation_std, size=(m, p)))
        to_u, to_v = _cached(t_, ("dual_sums", self.device), lambda: tuple(
            _Product(a, xp, sparse) for a in _dual_sum_matrices(t_)))
        return to_u(z), to_v(z)


class PrecisionWarning(UserWarning):
    """The initial duals are so large that float64 rounding exceeds the stopping tolerance."""


def check_precision(spec: PdmmSP, value: np.ndarray, node: int | str) -> None:
    """Warn when eps * perturbation_std exceeds tol * max|s_i|: the float64 floor is reached.

    Consensus then still settles, on a value whose error is about eps * std (times the
    rounding growth of the iteration): the nodes agree, but the average is off.  Runs with
    ``tol = 0`` (a fixed number of rounds) are not checked.
    ``sim/bench_precision.py`` maps the floor.
    """
    scale = float(np.max(np.abs(value))) if value.size else 0.0
    if spec.stop_tol > 0 and scale > 0 and spec.perturbation_std * np.finfo(float).eps > spec.stop_tol * scale:
        warnings.warn(
            f"pdmm-sp: perturbation_std {spec.perturbation_std:g} is too large for float64 at node {node} "
            f"(eps * std > tol * max|input| = {spec.stop_tol * scale:.2g}): the average will be off by about "
            f"{spec.perturbation_std * np.finfo(float).eps:.1g}; lower perturbation_std or raise tol",
            PrecisionWarning,
            stacklevel=3,
        )


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class PdmmNode(Aggregation):
    """One node of pdmm-sp for one aggregation (synchronous or asynchronous)."""

    def __init__(self, spec: PdmmSP, ctx: NodeContext, iteration: int) -> None:
        super().__init__()
        self.spec = spec
        self.ctx = ctx
        self.iteration = iteration
        self.nbrs = ctx.neighbours
        self.index = {j: k for k, j in enumerate(self.nbrs)}
        i = ctx.node_id
        sign_out = np.array([1.0 if i < j else -1.0 for j in self.nbrs])
        self.sign_out = sign_out
        if spec.asynchronous:
            self.c = spec.step_size(ctx.topology)
            self.coef_in = (2.0 * self.c) * (-sign_out)[:, None]  # 2 c B_{j|i}
            self.coef_out = (2.0 * self.c) * sign_out[:, None]  # 2 c B_{i|j}
            self.denom: Any = 1.0 + self.c * float(len(self.nbrs))
        else:
            self.prm = step_params(spec, ctx.topology, i)
            self.denom = self.prm.denom
        self.u: np.ndarray | None = None  # sum_j B_{i|j} z_{i|j}   (synchronous mode)
        self.v: np.ndarray | None = None  # sum_j B_{i|j} z_{j|i}
        self.diam = ctx.topology.diameter
        self.ecc = int(ctx.topology.eccentricity[i])
        # set by start() and the dual-inits before any primal is handled (the state machine's order)
        self.z_own: Any = None  # z_{i|j}, one row per neighbour
        self.z_nb: Any = None  # z_{j|i}
        self._inits: dict[int, np.ndarray] = {}
        self._round_msgs: dict[int, dict[int, Message]] = {}
        self.round = 0  # last round whose x was broadcast
        self.g = 0
        self.stop_at = NEVER
        self.x: Any = None  # set by the first broadcast, before any round completes
        self.x_prev: np.ndarray | None = None
        # asynchronous bookkeeping
        self._x_nb: list[np.ndarray | None] = [None] * len(self.nbrs)
        self._g_nb = [0] * len(self.nbrs)
        self._stop_nb = False

    # -- shared pieces -----------------------------------------------------------------------

    def _primal(self) -> np.ndarray:
        if not self.spec.asynchronous:
            return (self.s - self.u) / self.prm.at(self.round)[0]
        acc = np.zeros(self.s.shape)
        for k in range(len(self.nbrs)):
            acc += self.sign_out[k] * self.z_own[k]
        return (self.s - acc) / self.denom

    def _msg(self, rnd: int, meta: tuple[int, ...]) -> Message:
        return Message(self.ctx.node_id, self.nbrs, self.iteration, rnd, "primal", self.x.copy(), False, meta)

    def awaiting(self) -> tuple[int, ...]:
        """The neighbours whose dual-init has not arrived; then (synchronous mode) those whose
        primal of the current round has not (an asynchronous node goes on without them)."""
        if self.done:
            return ()
        if len(self._inits) < len(self.nbrs) or self.spec.asynchronous:
            return tuple(j for j in self.nbrs if j not in self._inits)
        box = self._round_msgs.get(self.round, {})
        return tuple(j for j in self.nbrs if j not in box)

    def start(self, value: np.ndarray) -> list[Message]:
        self.s = value
        check_precision(self.spec, value, self.ctx.node_id)
        p = value.shape[0]
        self.z_own = self.ctx.rng.normal(0.0, self.spec.perturbation_std, size=(len(self.nbrs), p))
        me = self.ctx.node_id
        return [
            Message(me, (j,), self.iteration, 0, "dual-init", self.z_own[k].copy(), self.spec.encrypt_duals)
            for k, j in enumerate(self.nbrs)
        ]

    def check(self, msg: Message) -> None:
        """What an honest neighbour sends in synchronous mode (see the module docstring).

        ``dual-init``: round 0, only to this node, encrypted, no meta.  ``primal``: round
        1..max_iter to all of the sender's neighbours, in clear, meta ``(g, stop_at)`` with
        ``0 <= g < round`` (g grows by at most one per round; on the deflated schedule
        ``g <= round - 1 - end``, as no node settles before the schedule's end) and ``stop_at`` either never or
        in ``[round, round - 1 + D]`` (a sender past its stop round has stopped; a stop round
        is fixed at most D rounds ahead).  Both carry a finite float64 vector of this node's
        input length.
        """
        def bad(check: str, detail: str) -> ProtocolViolation:
            return ProtocolViolation(msg.sender, msg.iteration, msg.round, check, f"{msg.kind} message: {detail}")

        j, t = msg.sender, msg.round
        if j not in self.index:
            raise bad("sender", "the sender is not a neighbour")
        if msg.kind == "dual-init":
            if t != 0 or msg.receivers != (self.ctx.node_id,) or msg.meta != () or msg.encrypted != self.spec.encrypt_duals:
                raise bad("header", f"round {t}, receivers {msg.receivers}, meta {msg.meta}, encrypted {msg.encrypted}")
        elif msg.kind == "primal":
            if not 1 <= t <= self.spec.max_iter or msg.encrypted or tuple(msg.receivers) != self.ctx.topology.neighbours[j]:
                raise bad("header", f"round {t} (1..{self.spec.max_iter}), receivers {msg.receivers}, encrypted {msg.encrypted}")
            if len(msg.meta) != 2:
                raise bad("meta", f"{len(msg.meta)} meta fields, expected 2 (g, stop round)")
            g, stop_at = msg.meta
            # g rides one round late and counts settled rounds, which start after settle_after
            deflated = not self.spec.asynchronous and self.prm.schedule is not None
            g_max = max(0, t - 1 - self.prm.settle_after) if deflated else t - 1
            if not 0 <= g <= g_max:
                raise bad("meta", f"settled counter {g} outside 0..{g_max}")
            if stop_at != NEVER and not t <= stop_at <= t - 1 + self.diam:
                raise bad("meta", f"stop round {stop_at} outside {t}..{t - 1 + self.diam}")
        else:
            raise bad("kind", "pdmm-sp sends only dual-init and primal messages")
        check_vector(msg, self.s.shape[0])

    def receive(self, msg: Message) -> list[Message]:
        k = self.index.get(msg.sender)
        if k is None:
            raise ProtocolError(f"pdmm-sp: node {self.ctx.node_id} got a message from non-neighbour {msg.sender}")
        if msg.kind == "dual-init":
            if msg.round != 0 or msg.sender in self._inits or len(self._inits) == len(self.nbrs):
                raise ProtocolError(f"pdmm-sp: unexpected dual-init from node {msg.sender}")
            self._inits[msg.sender] = np.asarray(msg.payload)
            if self.spec.asynchronous:
                if self.z_nb is None:
                    self.z_nb = np.full_like(self.z_own, np.nan)
                self.z_nb[k] = self._inits[msg.sender]
            elif len(self._inits) == len(self.nbrs):
                self.z_nb = np.stack([self._inits[j] for j in self.nbrs])
                if not self.spec.asynchronous:
                    self.u = neighbour_sum(self.z_own, self.sign_out)
                    self.v = neighbour_sum(self.z_nb, self.sign_out)
                    self.z_own = self.z_nb = None
                    return self._broadcast_next()
            return []
        if msg.kind != "primal":
            raise ProtocolError(f"pdmm-sp: unexpected message kind {msg.kind!r} from node {msg.sender}")
        if self.spec.asynchronous:
            return self._receive_async(k, msg)
        if self.done or not (self.round <= msg.round <= self.round + 1) or msg.round == 0:
            raise ProtocolError(
                f"pdmm-sp: out-of-round message from node {msg.sender} (round {msg.round}, node {self.ctx.node_id} is in round {self.round})"
            )
        box = self._round_msgs.setdefault(msg.round, {})
        if msg.sender in box:
            raise ProtocolError(f"pdmm-sp: second round-{msg.round} message from node {msg.sender}")
        box[msg.sender] = msg
        if self.u is not None and len(self._round_msgs.get(self.round, ())) == len(self.nbrs):
            return self._complete_round()
        return []

    # -- synchronous --------------------------------------------------------------------------

    def _broadcast_next(self) -> list[Message]:
        meta = (self.g, self.stop_at)
        self.round += 1
        self.x = self._primal()
        out = [self._msg(self.round, meta)]
        if len(self._round_msgs.get(self.round, ())) == len(self.nbrs):
            out += self._complete_round()
        return out

    def _complete_round(self) -> list[Message]:
        t = self.round
        box = self._round_msgs.pop(t)
        msgs = [box[j] for j in self.nbrs]
        nb_sum = neighbour_sum(np.stack([np.asarray(m.payload, dtype=float) for m in msgs]), self.prm.weights)
        g_nb = min(m.meta[0] for m in msgs)
        stop_at = min(self.stop_at, min(m.meta[1] for m in msgs))
        x = self.x
        if t <= self.prm.settle_after:
            g_new = 0
        else:
            g_new = 1 + min(self.g, g_nb) if settled(x, self.x_prev, nb_sum, self.prm.degree, self.spec.stop_tol) else 0
        if g_new >= self.ecc + 1:
            stop_at = min(stop_at, t + self.ecc)
        if t >= stop_at or t >= self.spec.max_iter:
            self.done = True
            self.converged = t >= stop_at
            self.result = x
            self.rounds = t
            return []
        self.g, self.stop_at = g_new, stop_at
        _, two_c, two_cd, w = self.prm.at(t)
        self.u, self.v = sums_update(self.u, self.v, x, nb_sum, two_c, two_cd, self.spec.theta, w)
        self.x_prev = x
        return self._broadcast_next()

    # -- asynchronous -------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return len(self._inits) == len(self.nbrs) and not self.done

    def wake(self) -> list[Message]:
        if not self.ready:
            return []
        self.round += 1
        x = self._primal()
        if self.x is None or any(v is None for v in self._x_nb):
            settled = False
        else:
            change = np.max(np.abs(x - self.x))
            gap = max(np.max(np.abs(x - v)) for v in self._x_nb)
            settled = max(change, gap) <= self.spec.stop_tol * np.max(np.abs(x))
        self.g = 1 + min(self.g, min(self._g_nb)) if settled else 0
        stop = self._stop_nb or self.g >= self.diam + 1 or self.round >= self.spec.max_iter
        self.x = x
        self.z_nb = dual_update(self.z_nb, self.z_own, self.coef_out, x, self.spec.theta)
        out = [self._msg(self.round, (self.g, int(stop)))]
        if stop:
            self.done = True
            self.converged = self.round < self.spec.max_iter or self._stop_nb or self.g >= self.diam + 1
            self.result = x
            self.rounds = self.round
        return out

    def _receive_async(self, k: int, msg: Message) -> list[Message]:
        if msg.sender not in self._inits:
            raise ProtocolError(f"pdmm-sp: primal from node {msg.sender} before its dual-init")
        if self.done:
            return []
        x_j = np.asarray(msg.payload)
        self._x_nb[k] = x_j
        self._g_nb[k] = msg.meta[0]
        self._stop_nb = self._stop_nb or bool(msg.meta[1])
        self.z_own[k] = dual_update(self.z_own[k], self.z_nb[k], self.coef_in[k], x_j, self.spec.theta)
        return []
