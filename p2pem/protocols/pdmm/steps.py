"""pdmm-sp's step parameters from the public spectrum: plain PDMM's c, heavy ball's (c, beta), the deflated schedule.

Heavy ball (``updates``) with beta and alpha from the extreme eigenvalues of the
Metropolis Laplacian L_g converges at Chebyshev's rate (sqrt(kappa) - 1) / (sqrt(kappa) + 1).

Deflated heavy ball (the default from 6 to 20 000 nodes where the public spectrum predicts
fewer rounds, ``deflation_pays``: on geometric graphs nearly always).  The lowest
eigenvalues of L_g are public and, on geometric graphs, isolated (lambda_5 ~ 4 lambda_2):
heavy ball tuned to [lambda_5, lambda_max] plus three steps x <- x - L_g x / lambda_j
(j = 2, 3, 4) that remove the modes it does not damp converges about sqrt(4) times faster,
less the cost of those steps (``sim/bench_consensus.py --part c`` and ``--part d`` measure
it).  It is the same dual-sum iteration with a public per-round schedule of N, K and the edge
scale (``deflation_schedule``); the fixed point stays exact, the per-edge duals follow
PDMM's update with c_ij = c_t g_ij, so their H-perp part never converges, and what a node
reveals is unchanged.  No node counts as settled before the schedule's last special round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from p2pem.gmm import round_significant
from p2pem.protocols.base import Topology
from p2pem.protocols.pdmm.spectra import (
    LAMBDA2_MARGIN,
    laplacian_extremes,
    low_eigenvalues,
    metropolis_extremes,
    per_topology,
)
from p2pem.protocols.pdmm.updates import neighbour_sum


class Options(Protocol):
    """What the rooms below the spec read from a pdmm-sp spec (``p2pem.protocols.pdmm.PdmmSP``)."""

    @property
    def asynchronous(self) -> bool: ...
    @property
    def theta(self) -> float: ...
    @property
    def perturbation_std(self) -> float: ...
    @property
    def max_iter(self) -> int: ...
    @property
    def encrypt_duals(self) -> bool: ...
    @property
    def device(self) -> str: ...
    @property
    def accel(self) -> str: ...
    @property
    def c(self) -> float | str: ...
    @property
    def momentum(self) -> float | str: ...
    @property
    def stop_tol(self) -> float: ...
    @property
    def accelerated(self) -> bool: ...
    def step_size(self, topology: Topology) -> float: ...
    def step_parameters(self, topology: Topology) -> tuple[float, float]: ...
    def deflates(self, topology: Topology) -> bool: ...


def auto_c(topology: Topology) -> float:
    """Plain PDMM's step size from the graph alone (public): 1 / sqrt(lambda_2 * lambda_max) of the Laplacian.

    A common heuristic for ADMM-type consensus, it balances the slowest and the fastest
    modes; ``sim/bench_consensus.py`` compares it with a grid of fixed values.  Cached per
    topology.
    """

    def compute() -> float:
        lam2, lmax = laplacian_extremes(topology, np.ones(topology.dst.size))
        return round_significant(1.0 / math.sqrt(lam2 * lmax))

    return per_topology(topology, "auto_c", compute)


def heavy_ball_params(topology: Topology) -> tuple[float, float]:
    """(c, beta) of the heavy-ball variant: Polyak's optimal parameters on the Metropolis Laplacian.

    With lambda_2, lambda_max of L_g (g_ij = 1 / max(d_i, d_j)) and kappa = lambda_max / lambda_2:
    alpha = 4 / (sqrt(lambda_max) + sqrt(lambda_2))^2, beta = ((sqrt(kappa) - 1) / (sqrt(kappa) + 1))^2
    (Polyak 1964), and c = alpha / (1 - beta), so that the primal recurrence of
    ``updates`` is heavy ball with step alpha on L_g.  Both rounded to 6 significant digits.
    """

    def compute() -> tuple[float, float]:
        lam2, lmax = metropolis_extremes(topology)
        kappa = lmax / lam2
        beta = ((math.sqrt(kappa) - 1.0) / (math.sqrt(kappa) + 1.0)) ** 2
        alpha = 4.0 / (math.sqrt(lmax) + math.sqrt(lam2)) ** 2
        return round_significant(alpha / (1.0 - beta)), round_significant(beta)

    return per_topology(topology, "heavy_ball", compute)


N_DEFLATE = 3
DEFLATE_NODES = (N_DEFLATE + 3, 20_000)


@dataclass(frozen=True)
class Schedule:
    """Per-round coefficients of deflated heavy ball: ``denom`` N_t, ``scale`` c_t and ``local``
    K_t for rounds t = 1..``end``; every later round uses the last entries (plain heavy ball).

    No node counts as settled before round ``end`` + 1 (the stopping rule starts after the
    last special round).  See ``deflation_schedule``.
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
    of the dual-sum iteration (``updates.sums_update``, edge weights c_t g_ij, node-local term
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

    return per_topology(topology, "deflation", compute)


def predicted_rounds(topology: Topology) -> tuple[float, float]:
    """Rounds (heavy ball, deflated heavy ball) predicted from the public spectrum.

    Heavy ball's error falls by sqrt(beta) per round; deflation adds its special rounds
    (``Schedule.end``) and then falls by its own sqrt(beta), so with 1e-10 as the target
    the predictions are log(1e10) / -log sqrt(beta) rounds, plus ``end`` for deflation.
    """

    def rounds(beta: float) -> float:
        return 0.0 if beta <= 0.0 else math.log(1e10) / (-0.5 * math.log(beta))

    sched = deflation_schedule(topology)
    return rounds(heavy_ball_params(topology)[1]), sched.end + rounds(sched.beta)


def deflation_pays(topology: Topology) -> bool:
    """Whether deflated heavy ball is predicted to need fewer rounds than heavy ball (public, cached).

    The prediction (``predicted_rounds``) picks the faster variant on 20 of the 21 graphs
    of ``sim/bench_consensus.py --part d``: deflation wins where the lowest eigenvalues are
    isolated (geometric graphs, rings, grids, barbells), heavy ball where they are not
    (complete and Erdos-Renyi graphs).
    """

    def compute() -> bool:
        heavy_ball, deflated = predicted_rounds(topology)
        return deflated < heavy_ball

    return per_topology(topology, "deflation_pays", compute)


@dataclass(frozen=True)
class StepParams:
    """The public per-round coefficients of one node or, as arrays, of all nodes.

    ``weights`` 2 c_ij per directed edge (None: plain PDMM, all c_ij equal to ``c``), ``denom``
    the primal's divisor, ``two_c``, ``two_cd`` and ``w`` as ``updates.sums_update`` takes them,
    ``degree`` the divisor of the (weighted) neighbour sum in ``updates.settled``.
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


def step_params(spec: Options, topology: Topology, node: int | None = None) -> StepParams:
    """The coefficients of node ``node``'s update, or of all nodes (``node=None``) as column arrays.

    Computed elementwise from public data in the same way for one node and for all, so the
    two engines round identically.
    """
    deg_all = per_topology(topology, "degrees_float", lambda: topology.degrees.astype(float))
    deg: Any  # an (n, 1) column, or a float for one node
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
        wdeg2: Any  # sum_j 2 g_ij (times c): an (n, 1) array, or a float for one node
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
