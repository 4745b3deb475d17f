"""pdmm-sp's step parameters from the public spectrum: plain PDMM's c, heavy ball's (c, beta), the schedules.

Heavy ball (``updates``) with beta and alpha from the extreme eigenvalues of the
Metropolis Laplacian L_g converges at Chebyshev's rate (sqrt(kappa) - 1) / (sqrt(kappa) + 1).
Faster: a public per-round schedule (``schedules``) that runs a polynomial in L_g fitted to
the spectrum, the Leja polynomial (the default where it is predicted to need fewer rounds than
heavy ball, ``polynomial_schedule``) or deflated heavy ball (``deflation_schedule``).  Each is
the same dual-sum iteration with other public coefficients: the fixed point stays exact, the
per-edge duals follow PDMM's update with c_ij = c_t g_ij, so their H-perp part never
converges, and what a node reveals is unchanged.  No node counts as settled before a
schedule's last special round.  ``sim/bench_consensus.py --part c`` and ``--part d`` measure
the rounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from p2pem.gmm import round_significant
from p2pem.protocols.base import Topology
from p2pem.protocols.pdmm.schedules import (
    CHECK_REFINE,
    GRID_PER_ROUND,
    Schedule,
    deflated_heavy_ball,
    leja_schedule,
    rounds_to,
    spectrum_points,
)
from p2pem.protocols.pdmm.spectra import (
    DENSE_NODES,
    LAMBDA2_MARGIN,
    laplacian_extremes,
    low_eigenvalues,
    metropolis_extremes,
    metropolis_spectrum,
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
    def threads(self) -> int | str: ...
    @property
    def accel(self) -> str: ...
    @property
    def c(self) -> float | str: ...
    @property
    def momentum(self) -> float | str: ...
    @property
    def stop_tol(self) -> float: ...
    @property
    def stop(self) -> str: ...
    @property
    def accelerated(self) -> bool: ...
    def step_size(self, topology: Topology) -> float: ...
    def step_parameters(self, topology: Topology) -> tuple[float, float]: ...
    def schedule(self, topology: Topology) -> Schedule | None: ...


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
DEFLATE_NODES = (N_DEFLATE + 3, 100_000)

#: The Leja polynomial (the default where it pays) from 3 nodes (a cycle) to this many: the
#: lowest eigenvalues it needs are computed exactly by shift-invert up to here (about 20 s and
#: 2 GB at 10^5 nodes; the sparse factor grows faster than n).
POLYNOMIAL_NODES = (3, 100_000)

#: Eigenvalues computed exactly above ``DENSE_NODES`` (below, all of them are): the polynomial
#: puts a root on each isolated low eigenvalue, the grid covers the rest.  On a 10^4-node
#: geometric graph 20 need one round more than 40, and take a fifth of the time.
N_EXACT = 20

#: No polynomial where heavy ball would need more rounds than this (its construction grows
#: with the square of the rounds; such graphs, long rings or paths, are far from geometric).
POLYNOMIAL_MAX_ROUNDS = 2500

#: The polynomial reduces the error by this factor times the stopping tolerance: the initial
#: duals make the first broadcasts about 10^2-10^3 times the inputs, so the nodes find
#: themselves settled soon after its last root.
TARGET_PER_TOL = 1e-3

#: The same factor where the nodes stop at a public round right after the polynomial
#: (``fixed_stop``): no heavy-ball round follows it, so it reduces the error by about as much
#: as the counters' extra rounds would have: the average to within 1e-11 of the largest input
#: (``tests/test_pdmm_stopping.py``) and about 1e-12 of each entry at 10^3 and 10^4 nodes
#: (``sim/bench_consensus.py --part c``).
TARGET_PER_TOL_FIXED = 1e-4


def deflation_schedule(topology: Topology) -> Schedule:
    """Heavy ball on [lambda_5, lambda_max] with the three lowest modes removed (public, cached;
    ``schedules.deflated_heavy_ball``).  ``sim/bench_consensus.py --part c`` measures the rounds."""

    def compute() -> Schedule:
        # the polynomial's eigenvalues (one computation for both schedules)
        low = low_eigenvalues(topology, N_EXACT + 1)[: N_DEFLATE + 1]
        # public and the same on every node: rounded like heavy_ball_params' (other BLAS builds
        # may differ in the last bits), lambda_max only needs to bound the spectrum
        lmax = round_significant(metropolis_extremes(topology)[1])
        return deflated_heavy_ball([float(v) for v in low[:N_DEFLATE]], LAMBDA2_MARGIN * float(low[N_DEFLATE]), lmax)

    return per_topology(topology, "deflation", compute)


def polynomial_target(tol: float, fixed: bool = False) -> float:
    """The error reduction the Leja polynomial is built for, at stopping tolerance ``tol``
    (``fixed``: for a public stop round right after it, ``TARGET_PER_TOL_FIXED``)."""
    return min(1e-3, max((TARGET_PER_TOL_FIXED if fixed else TARGET_PER_TOL) * tol, 1e-15))


def polynomial_schedule(topology: Topology, target: float) -> Schedule | None:
    """The Leja polynomial reducing the error by ``target`` (``schedules.leja_schedule``), or None
    where it would not need fewer rounds than heavy ball (public, cached).

    Up to ``DENSE_NODES`` nodes on the whole spectrum (exact: a finite-time polynomial where
    ``target`` asks for no less); above, on the lowest ``N_EXACT`` eigenvalues (shift-invert)
    and a grid on the rest of [lambda_2, lambda_max].
    """

    def compute() -> Schedule | None:
        n = topology.n_nodes
        if n < POLYNOMIAL_NODES[0] or n > POLYNOMIAL_NODES[1]:
            return None
        beta = heavy_ball_params(topology)[1]
        hb_rounds = rounds_to(beta, target)
        if hb_rounds > POLYNOMIAL_MAX_ROUNDS:
            return None
        if n <= DENSE_NODES:
            points = metropolis_spectrum(topology)
            lam2, lmax = float(points[0]), float(points[-1])
        else:
            low = low_eigenvalues(topology, N_EXACT + 1)
            lam2, lmax = float(low[0]), round_significant(metropolis_extremes(topology)[1])
            # the grid does not depend on the target, so smaller targets only add roots after the same ones
            n_grid = max(256, int(GRID_PER_ROUND * rounds_to(beta, 1e-15)))
            points = spectrum_points(low[:N_EXACT], float(low[N_EXACT]), lmax, n_grid)
            # the rest of the spectrum lies in [lambda_{N_EXACT+2}, lambda_max]: check it finer
            check = spectrum_points(np.empty(0), float(low[N_EXACT]), lmax, CHECK_REFINE * n_grid)
            return leja_schedule(points, lam2, lmax, target, math.floor(hb_rounds), check)
        return leja_schedule(points, lam2, lmax, target, math.floor(hb_rounds))

    return per_topology(topology, ("polynomial", target), compute)


def predicted_rounds(topology: Topology, target: float = 1e-13) -> dict[str, float | None]:
    """Rounds each iteration is predicted to need to reduce the error by ``target``, from the public spectrum.

    Heavy ball's error falls by sqrt(beta) per round; deflation adds its special rounds
    (``Schedule.end``) and then falls by its own sqrt(beta); the Leja polynomial is built to
    reach ``target`` at its last special round (None where it would need more rounds than
    heavy ball; deflation None below ``DEFLATE_NODES[0]`` nodes).  ``sim/bench_consensus.py --part d`` puts them beside measured rounds.
    """
    sched = deflation_schedule(topology) if topology.n_nodes >= DEFLATE_NODES[0] else None
    poly = polynomial_schedule(topology, target)
    return {"heavy-ball": rounds_to(heavy_ball_params(topology)[1], target),
            "deflated": None if sched is None else sched.end + rounds_to(sched.beta, target),
            "polynomial": None if poly is None else float(poly.end)}


@dataclass(frozen=True)
class StepParams:
    """The public per-round coefficients of one node or, as arrays, of all nodes.

    ``weights`` 2 c_ij per directed edge (None: plain PDMM, all c_ij equal to ``c``), ``denom``
    the primal's divisor, ``two_c``, ``two_cd`` and ``w`` as ``updates.sums_update`` takes them,
    ``degree`` the divisor of the (weighted) neighbour sum in ``updates.settled``;
    ``fixed_stop`` the public round every node stops at (None: the stopping rule's counters
    decide, ``stopping``).
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
    fixed_stop: int | None = None

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


def stops_publicly(spec: Options) -> bool:
    """Whether ``spec`` stops at a public round where its schedule allows (``stop = "auto"``, tol > 0)."""
    return spec.stop == "auto" and spec.stop_tol > 0


def fixed_stop(spec: Options, schedule: Schedule) -> int | None:
    """The public stop round of ``stop = "auto"``: one round after the last special round of a
    polynomial known to be below its target on the whole spectrum (``Schedule.bounded``),
    where every node's x is the average to that reduction; None (the counters decide) for
    other schedules, ``stop = "adaptive"`` or ``tol = 0``.

    The round after the last root is the first a node can check itself settled in (its own
    change and its neighbours' disagreement within ``tol``); a node that is not records the
    aggregation as unconverged, as one stopped by ``max_iter``.
    """
    if not (stops_publicly(spec) and schedule.bounded):
        return None
    return schedule.end + 1


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
        sched = spec.schedule(topology)
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
            return StepParams(c_t, None, weights, n_t, c_t, k_t, k_t - c_t * wdeg2, wdeg2, sched, fixed_stop(spec, sched))
        k = 2.0 * (1.0 + beta) / (1.0 - beta)
        return StepParams(c, beta, weights, 2.0 / (1.0 - beta), 1.0, k, k - wdeg2, wdeg2)
    c = spec.step_size(topology)
    return StepParams(c, None, None, 1.0 + c * deg, 2.0 * c, (2.0 * c) * deg, None, deg)
