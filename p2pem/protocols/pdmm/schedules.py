"""Public per-round schedules of pdmm-sp from the Laplacian's spectrum: deflated heavy ball and Leja polynomials.

Any sequence of steps x(k) = (1 + m_k) x(k-1) - b_k L_g x(k-1) - m_k x(k-2) (k >= 2) on the
Metropolis Laplacian L_g is the primal of pdmm-sp's dual-sum iteration (``updates.sums_update``,
edge weights c_t g_ij, node-local term w_t = K_t - 2 c_t sum_j g_ij) with primal divisor N_t,
where N_{k-1} = 2 + m_k N_k (backwards from heavy ball's 2 / (1 - beta)), c_{k-1} = b_k N_k / 2
and K_t = N_t + N_{t+1} - 2 (:func:`schedule_from_steps`).  The same K_t in both dual sums keeps
sum_i (u_i + v_i) = 0, and N_{t+1} + N_t - K_t = 2 makes the exact average the fixed point; the
per-edge duals follow PDMM's update with c_ij = c_t g_ij, so their H-perp part never converges,
and every x_i(t), t >= 3, is a function of earlier broadcasts: what a node reveals is that of
plain heavy ball.  So any polynomial in L_g may be run, with its roots as steps, and the
eigenvalues of L_g are public (the graph is).  Two such schedules:

* :func:`deflation_schedule`: heavy ball on [lambda_5, lambda_max] with three steps
  x <- x - L_g x / lambda_j (j = 2, 3, 4) removing the modes it does not damp;
* :func:`leja_schedule`: a polynomial with roots chosen greedily on the known spectrum (the
  lowest eigenvalues exactly, the rest of [lambda_2, lambda_max] on a grid), each where the
  polynomial built so far is largest (discrete Leja points, Edrei 1939, Leja 1957): roots at the
  isolated low eigenvalues, then a Chebyshev-like distribution on the bulk, in an order whose
  partial products stay small (Reichel 1990), until the polynomial is below the target
  reduction everywhere.  Near the best polynomial on the discrete spectrum: on a 1 000-node
  geometric graph a linear program over all polynomials needs 2-3 fewer roots (of 50-60) for
  the same reduction.

No node counts as settled before a schedule's last special round (:attr:`Schedule.end`);
after it, heavy ball runs with constant coefficients.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from p2pem.gmm import round_significant


@dataclass(frozen=True)
class Schedule:
    """Per-round coefficients: ``denom`` N_t, ``scale`` c_t and ``local`` K_t for rounds
    t = 1..``end``; every later round uses the last entries (heavy ball).

    ``deflate_at`` is the round of the first special step (x(deflate_at) is its result).
    No node counts as settled before round ``end`` + 1 (the stopping rule starts after the
    last special round).  ``bounded``: the polynomial is known to be below about its target on
    every eigenvalue of L_g (all of them known, or checked on a finer grid where they are
    not: :func:`leja_schedule`), so x(``end``) is the average to that reduction and rounding,
    whatever the inputs.
    """

    deflate_at: int
    denom: tuple[float, ...]
    scale: tuple[float, ...]
    local: tuple[float, ...]
    bounded: bool = False

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


def heavy_ball(lo: float, hi: float) -> tuple[float, float]:
    """(beta, alpha): Polyak's optimal heavy ball on the spectrum interval [lo, hi] (Polyak 1964)."""
    kappa = hi / lo
    beta = ((math.sqrt(kappa) - 1.0) / (math.sqrt(kappa) + 1.0)) ** 2
    return beta, 4.0 / (math.sqrt(hi) + math.sqrt(lo)) ** 2


def schedule_from_steps(steps: Sequence[tuple[float, float]], beta: float, alpha: float, first: int, bounded: bool = False) -> Schedule:
    """The dual-sum coefficients of the steps (m_k, b_k), k = 2 .. len(steps) + 1, then heavy
    ball (beta, alpha) for ever (module docstring); ``first`` becomes ``deflate_at``."""
    end = len(steps) + 1

    def step(k: int) -> tuple[float, float]:
        return steps[k - 2] if k <= end else (beta, alpha)

    big_n = {end: 2.0 / (1.0 - beta)}
    for k in range(end, 1, -1):
        big_n[k - 1] = 2.0 + step(k)[0] * big_n[k]
    big_n[end + 1] = big_n[end]
    rounds = range(1, end + 1)
    return Schedule(
        first,
        tuple(big_n[t] for t in rounds),
        tuple(step(t + 1)[1] * big_n[t + 1] / 2.0 for t in rounds),
        tuple(big_n[t] + big_n[t + 1] - 2.0 for t in rounds),
        bounded,
    )


def deflated_heavy_ball(roots: Sequence[float], lo: float, lmax: float) -> Schedule:
    """Heavy ball on [``lo``, ``lmax``] with steps x <- x - L_g x / r for each of ``roots`` (below ``lo``).

    On a geometric graph the lowest eigenvalues of the Metropolis Laplacian L_g are
    isolated (lambda_3 ~ 1.1 lambda_2, lambda_4 ~ 2 lambda_2, lambda_5 ~ 4 lambda_2), so heavy
    ball tuned to [0.98 lambda_5, lambda_max] converges about sqrt(lambda_5 / lambda_2) times
    faster, and three steps x <- x - L_g x / lambda_j (j = 2, 3, 4) remove the modes it does
    not damp.  Those steps amplify the other modes by up to prod_j lambda_max / lambda_j, so
    they come at the round where heavy ball has damped them by as much (earlier, float64
    rounding would leak into the removed modes); the momentum restarts after them.
    """
    beta, alpha = heavy_ball(lo, lmax)
    at = max(3, math.ceil(sum(math.log(lmax / r) for r in roots) / -math.log(math.sqrt(beta))))
    steps = [(beta, alpha)] * (at - 2) + [(0.0, 1.0 / r) for r in roots] + [(0.0, alpha)]
    return schedule_from_steps(steps, beta, alpha, at)


#: The polynomial's grid on the part of the spectrum not computed exactly: this many points per
#: round heavy ball would need (a polynomial of degree k varies on a scale of 1/k of the interval).
GRID_PER_ROUND = 8


def leja_roots(points: np.ndarray, target: float, max_roots: int) -> list[float] | None:
    """Roots r_1, r_2, ... each at the point of ``points`` where |prod_j (1 - lambda / r_j)| is
    largest so far, until it is at most ``target`` on all points; None past ``max_roots``.

    The first root is the smallest point.  The running product is kept as a sum of logarithms,
    so no product overflows.
    """
    logp = np.zeros(points.size)
    bound = math.log(target)
    roots: list[float] = []
    with np.errstate(divide="ignore"):  # a root on a point: log 0 = -inf, that point is done
        while True:
            i = int(np.argmax(logp))
            if logp[i] <= bound:
                return roots
            if len(roots) >= max_roots:
                return None
            r = float(points[i])
            roots.append(r)
            logp += np.log(np.abs(1.0 - points / r))


def spectrum_points(low: np.ndarray, top: float, lmax: float, n_grid: int) -> np.ndarray:
    """The exactly known eigenvalues ``low`` and, where the spectrum is not known exactly, an
    ``n_grid``-point grid on [``top``, ``lmax``], dense towards both ends like Chebyshev points
    (u -> 3u^2 - 2u^3 of a uniform u: arithmetic only, the same bits on every host)."""
    if n_grid == 0:
        return np.asarray(low, dtype=float)
    u = np.arange(n_grid) / (n_grid - 1)
    grid = top + (lmax - top) * (u * u * (3.0 - 2.0 * u))
    return np.concatenate([np.asarray(low, dtype=float), grid])


#: Where the spectrum is known only as an interval, the polynomial counts as bounded when it
#: is at most this many times its target on a grid this many times finer than its own.
BOUND_SLACK = 10.0
CHECK_REFINE = 8


def polynomial_peak(roots: Sequence[float], points: np.ndarray) -> float:
    """max over ``points`` of |prod_j (1 - lambda / r_j)| (a sum of logarithms: no overflow)."""
    logp = np.zeros(points.size)
    with np.errstate(divide="ignore"):  # a root on a point: log 0
        for r in roots:
            logp += np.log(np.abs(1.0 - points / r))
    return float(np.exp(logp.max())) if points.size else 0.0


def leja_schedule(points: np.ndarray, lam2: float, lmax: float, target: float, max_rounds: int,
                  check: np.ndarray | None = None) -> Schedule | None:
    """The polynomial with :func:`leja_roots` on ``points`` as steps x <- x - L_g x / r, then heavy
    ball on [``lam2``, ``lmax``]; None when it would take more than ``max_rounds`` special rounds.

    Round 2's step only turns the first broadcast into the second (x(2) also carries the
    second dual sum, an independent start), so the roots act on x(2) from round 3 on; the
    heavy ball after them damps whatever rounding left behind.  Roots are rounded to 12
    significant digits: public numbers every node derives itself.

    :attr:`Schedule.bounded`: with ``check`` None, ``points`` are all the eigenvalues of L_g
    (a finite-time polynomial); else the polynomial (its rounded roots) must stay within
    :data:`BOUND_SLACK` times ``target`` on ``check``, a finer grid of the interval that holds
    the eigenvalues ``points`` does not list.
    """
    roots = leja_roots(points, target, max_rounds - 2)
    if roots is None:
        return None
    beta, alpha = heavy_ball(lam2, lmax)
    rounded = [round_significant(r, 12) for r in roots]
    steps = [(0.0, alpha)] + [(0.0, 1.0 / r) for r in rounded] + [(0.0, alpha)]
    bounded = check is None or polynomial_peak(rounded, check) <= BOUND_SLACK * target
    return schedule_from_steps(steps, beta, alpha, 3, bounded)


def rounds_to(beta: float, target: float) -> float:
    """Rounds heavy ball needs to reduce the error by ``target``: its error falls by sqrt(beta) per round."""
    return 0.0 if beta <= 0.0 else math.log(target) / (0.5 * math.log(beta))
