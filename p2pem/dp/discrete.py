"""Exact discrete Laplace and discrete Gaussian noise, vectorised (Canonne, Kamath & Steinke 2020).

Floating-point Laplace or Gaussian noise leaks the value it hides through the low bits of its
output (Mironov, "On significance of the least significant bits for differential privacy",
CCS 2012).  This module draws noise on a public grid with integer arithmetic only, so the
output is an exact function of an integer whose distribution is the mechanism's:

- :func:`bernoulli_exp`: Bernoulli(exp(-gamma)) for a rational gamma = num / den,
  Algorithm 1 of Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy"
  (NeurIPS 2020), using only Bernoulli(a / b) draws with integer a, b;
- :func:`discrete_laplace`: P(Z = z) proportional to exp(-|z| / t) for an integer scale t
  (their Algorithm 2 with s = 1);
- :func:`discrete_gaussian`: P(Z = z) proportional to exp(-z^2 / (2 sigma^2)) for an integer
  sigma (their Algorithm 3: discrete Laplace proposals with t = sigma + 1, accepted with
  Bernoulli(exp(-(|Y| - sigma^2 / t)^2 / (2 sigma^2)))).

Every loop of the algorithms runs over all pending coordinates at once (rejection in
batches: each round proposes twice as many candidates as are missing and keeps the first
accepted ones in order, which are i.i.d.); the integers are Python ints in NumPy object arrays, so no product overflows.  The
only randomness used is uniform 62-bit integers from a :class:`numpy.random.Generator`
(``Generator.integers`` is exact: Lemire's rejection), consumed in a fixed order: the same
generator state gives the same noise, which is how every node of a Bayesian-network run
repeats the central draw from the seed they share.  A publication seeds that generator from
OS entropy (:mod:`p2pem.dp.publication`).

:func:`snapped_release` puts a value on the grid and adds the noise:
``gamma * (round(x / gamma) + Z)``, with ``gamma`` a power of two at most ``scale * 2**-GRID_BITS``
(and at most 1, so integer counts are on the grid exactly), and the noise's scale in grid units
rounded *up* to an integer: the noise is never smaller than the accountant's calibration, so
the epsilon (Laplace) or rho (Gaussian, CKS 2020 Theorem 4: the discrete Gaussian is
(Delta^2 / (2 sigma^2))-zCDP, as the continuous one) the accountant charges still holds for
integer-valued releases (counts).  A release that is not on the grid moves by at most one
more grid unit per coordinate when rounded: for D coordinates its L1 sensitivity grows by at
most ``D * gamma`` (Laplace: epsilon grows by at most ``D * 2**-GRID_BITS``) and its L2
sensitivity by ``sqrt(D) * gamma``.

This module imports the standard library and NumPy only.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["GRID_BITS", "DISCRETE_SAMPLER", "bernoulli", "bernoulli_exp", "discrete_gaussian", "discrete_laplace",
           "grid", "snapped_release"]

#: The grid is at most ``scale * 2**-GRID_BITS``: the noise scale in grid units is at least 2**GRID_BITS.
GRID_BITS = 20

#: What a privacy block says about this sampler.
DISCRETE_SAMPLER = ("discrete: exact discrete Laplace/Gaussian (Canonne, Kamath & Steinke 2020, Algorithms 1-3) on a public "
                    f"power-of-two grid of at most 2^-{GRID_BITS} of the noise scale, integer arithmetic only, which resists "
                    "attacks on the low bits of floating-point noise (Mironov 2012)")

_CHUNK = 62  # bits of one uniform draw (int64-safe)
_RUN = 4  # Bernoulli(exp(-1)) draws per coordinate and round of a geometric run

ObjArray = NDArray[Any]


def _ints(values: Any, size: int) -> ObjArray:
    """``values`` (a scalar or ``size`` values) as a flat object array of Python ints."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "iuO":
        raise TypeError(f"the discrete samplers take integers, got {arr.dtype}")
    out = np.empty(size, dtype=object)
    out[:] = [int(v) for v in np.broadcast_to(arr, (size,)).ravel()]
    return out


def bernoulli(rng: np.random.Generator, a: Any, b: Any, size: int) -> NDArray[np.bool_]:
    """Exact Bernoulli(a / b) draws for integers ``0 <= a <= b``, ``b > 0`` (scalars or ``size`` values).

    U uniform in [0, 1) is read 62 bits at a time: with ``h = floor(a 2^62 / b)`` and ``u`` the
    next 62 bits, U < a / b if u < h, U > a / b if u > h; on a tie (probability 2^-62) the
    comparison continues with the fractional remainder.  Exact for any size of integers.
    """
    num, den = _ints(a, size), _ints(b, size)
    if size and (any(d <= 0 for d in den) or any(not 0 <= n <= d for n, d in zip(num, den, strict=True))):
        raise ValueError("bernoulli needs integers 0 <= a <= b and b > 0")
    return _bernoulli(rng, num, den)


def _bernoulli(rng: np.random.Generator, num: ObjArray, den: ObjArray) -> NDArray[np.bool_]:
    """:func:`bernoulli` on checked object arrays; int64 arithmetic when every ``den`` is below 2^62."""
    size = num.size
    if size and max(den) < 1 << _CHUNK:
        return rng.integers(0, den.astype(np.int64), dtype=np.int64) < num.astype(np.int64)  # exact: Lemire's rejection
    num = num.copy()
    out = np.zeros(size, dtype=bool)
    pending = np.arange(size)
    while pending.size:
        shifted = num[pending] * (1 << _CHUNK)
        h = shifted // den[pending]
        u = rng.integers(0, 1 << _CHUNK, size=pending.size, dtype=np.int64).astype(object)
        less = np.asarray(u < h, dtype=bool)
        tie = np.asarray(u == h, dtype=bool)
        out[pending[less]] = True
        num[pending[tie]] = shifted[tie] - h[tie] * den[pending[tie]]
        pending = pending[tie]
    return out


def _bernoulli_exp_unit(rng: np.random.Generator, num: ObjArray, den: ObjArray) -> NDArray[np.bool_]:
    """Bernoulli(exp(-num / den)) for ``0 <= num <= den`` (CKS 2020 Algorithm 1, case gamma in [0, 1])."""
    size = num.size
    out = np.zeros(size, dtype=bool)
    k = np.ones(size, dtype=np.int64)
    pending = np.arange(size)
    while pending.size:
        a = _bernoulli(rng, num[pending], den[pending] * k[pending].astype(object))
        done = pending[~a]
        out[done] = k[done] % 2 == 1  # the first failure at K: accept when K is odd
        pending = pending[a]
        k[pending] += 1
    return out


def bernoulli_exp(rng: np.random.Generator, num: Any, den: Any, size: int) -> NDArray[np.bool_]:
    """Exact Bernoulli(exp(-num / den)) draws for integers ``num >= 0``, ``den > 0`` (CKS 2020 Algorithm 1).

    For gamma = num / den > 1: floor(gamma) independent Bernoulli(exp(-1)) draws must all succeed,
    then one Bernoulli(exp(-(gamma - floor(gamma)))); the rounds run over all coordinates
    still alive at once, so a large gamma costs few rounds (each kills about 63 %).
    """
    n, d = _ints(num, size), _ints(den, size)
    if size and (any(v < 0 for v in n) or any(v <= 0 for v in d)):
        raise ValueError("bernoulli_exp needs num >= 0 and den > 0")
    return _bernoulli_exp(rng, n, d)


def _bernoulli_exp(rng: np.random.Generator, n: ObjArray, d: ObjArray) -> NDArray[np.bool_]:
    """:func:`bernoulli_exp` on checked object arrays."""
    size = n.size
    whole = n // d
    alive = np.asarray(_exp1_run(rng, size, whole) >= whole, dtype=bool)  # floor(gamma) Bernoulli(exp(-1)) all succeed
    idx = np.flatnonzero(alive)
    if idx.size:
        alive[idx] = _bernoulli_exp_unit(rng, n[idx] - whole[idx] * d[idx], d[idx])
    return alive


def _exp1_run(rng: np.random.Generator, size: int, cap: ObjArray | None = None) -> ObjArray:
    """The number of successes of Bernoulli(exp(-1)) before the first failure (P(V >= m) = exp(-m)).

    With ``cap``, counting stops at ``cap`` (only ``V >= cap`` matters to the caller).  The draws
    come ``_RUN`` per coordinate at a time, so few coordinates (exp(-_RUN)) need another round.
    """
    v = np.zeros(size, dtype=object)
    idx = np.flatnonzero(np.ones(size, dtype=bool) if cap is None else np.asarray(cap > 0, dtype=bool))
    while idx.size:
        one = np.ones(idx.size * _RUN, dtype=object)
        ok = _bernoulli_exp_unit(rng, one, one.copy()).reshape(idx.size, _RUN)
        run = np.where(ok.all(axis=1), _RUN, np.argmin(ok, axis=1))  # successes before the first failure
        v[idx] += run.astype(object)
        more = run == _RUN
        if cap is not None:
            more &= np.asarray(v[idx] < cap[idx], dtype=bool)
        idx = idx[more]
    return v


def discrete_laplace(rng: np.random.Generator, t: int, size: int) -> ObjArray:
    """``size`` draws of the discrete Laplace of integer scale ``t``: P(z) proportional to exp(-|z| / t).

    CKS 2020 Algorithm 2 (s = 1): U uniform on {0, ..., t-1} kept with probability
    exp(-U / t), V geometric, X = U + t V, a random sign, and (sign -, X = 0) rejected.
    Returns Python ints in an object array.
    """
    t = int(t)
    if not 1 <= t < 1 << 63:
        raise ValueError(f"discrete_laplace needs an integer scale 1 <= t < 2^63, got {t}")
    out = np.zeros(size, dtype=object)
    done = 0
    while done < size:
        m = 2 * (size - done) + 64  # proposals: more than half are accepted, so one round is almost always enough
        u = rng.integers(0, t, size=m, dtype=np.int64).astype(object)
        keep = _bernoulli_exp(rng, u, np.full(m, t, dtype=object))
        x = u + t * _exp1_run(rng, m)
        negative = rng.integers(0, 2, size=m, dtype=np.int64) == 1
        keep &= ~(negative & np.asarray(x == 0, dtype=bool))
        z = np.where(negative, -x, x)[keep][: size - done]  # the first accepted proposals, in order: i.i.d.
        out[done:done + z.size] = z
        done += z.size
    return out


def discrete_gaussian(rng: np.random.Generator, sigma: int, size: int) -> ObjArray:
    """``size`` draws of the discrete Gaussian of integer ``sigma``: P(z) proportional to exp(-z^2 / (2 sigma^2)).

    CKS 2020 Algorithm 3 with t = floor(sigma) + 1: Y ~ discrete Laplace(t), accepted with
    Bernoulli(exp(-(|Y| t - sigma^2)^2 / (2 sigma^2 t^2))), all in integers.  Returns Python
    ints in an object array.
    """
    sigma = int(sigma)
    if sigma < 1:
        raise ValueError(f"discrete_gaussian needs an integer sigma >= 1, got {sigma}")
    s2, t = sigma * sigma, sigma + 1
    out = np.zeros(size, dtype=object)
    done = 0
    while done < size:
        m = 2 * (size - done) + 64  # proposals (oversampled: one round is usually enough)
        y = discrete_laplace(rng, t, m)
        gap = np.abs(y) * t - s2
        keep = _bernoulli_exp(rng, gap * gap, np.full(m, 2 * s2 * t * t, dtype=object))
        z = y[keep][: size - done]  # the first accepted proposals, in order: i.i.d.
        out[done:done + z.size] = z
        done += z.size
    return out


def grid(scale: float) -> tuple[float, int]:
    """The public grid of a noise ``scale`` and the scale in grid units (rounded up).

    The grid ``gamma`` is the power of two at most ``scale * 2**-GRID_BITS`` and at most 1 (so
    integers are on it); the units are ``ceil(scale / gamma)`` (exact: gamma is a power of two).
    """
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"a noise scale must be positive and finite, got {scale!r}")
    gamma = min(1.0, math.ldexp(1.0, math.frexp(scale)[1] - 1 - GRID_BITS))
    return gamma, math.ceil(scale / gamma)


def snapped_release(rng: np.random.Generator, values: NDArray[np.float64], scale: float, mechanism: str, *,
                    sensitivity: float | None = None) -> NDArray[np.float64]:
    """``values`` released with discrete noise on the grid of ``scale``: ``gamma (round(values / gamma) + Z)``.

    Z is :func:`discrete_gaussian` (``mechanism = "gaussian"``, sigma = scale) or
    :func:`discrete_laplace` (``"laplace"``, b = scale) in grid units (:func:`grid`); the output
    is an exact function of the integer ``round(values / gamma) + Z`` (below 2^53 in magnitude,
    so its product with the power of two gamma is exact).  A zero scale releases the values
    unchanged.

    Parameters
    ----------
    sensitivity : float or None
        None: the values must already be on the grid (integer counts are: gamma <= 1 is a power of
        two), else ValueError.  A number: the release's sensitivity (L1 for Laplace, L2 for
        Gaussian) for which ``scale`` was calibrated; values off the grid are rounded to it, which
        can move D coordinates by D (L1) or sqrt(D) (L2) more grid units, and the scale in grid
        units is raised by ``scale * D / sensitivity`` (or ``sqrt(D)``) to pay for it, so the
        calibrated epsilon or rho still holds.
    """
    x = np.asarray(values, dtype=np.float64)
    if scale == 0:
        return x.copy()
    if mechanism not in ("gaussian", "laplace"):
        raise ValueError(f"unknown mechanism {mechanism!r}")
    gamma, units = grid(float(scale))
    flat = x.ravel()
    cells = flat / gamma
    on_grid = bool(np.all(cells == np.rint(cells)))
    if sensitivity is None and not on_grid:
        raise ValueError("snapped_release without a sensitivity needs values on the grid (integer counts)")
    if sensitivity is not None and not on_grid:
        if not sensitivity > 0:
            raise ValueError(f"a sensitivity must be positive, got {sensitivity!r}")
        extra = flat.size if mechanism == "laplace" else math.sqrt(flat.size)
        units = math.ceil(scale / gamma + extra * scale / sensitivity) + 1  # + 1: the floating-point sum may round down
    if np.any(np.abs(cells) >= 2.0 ** 52):
        raise ValueError("values too large for the noise grid (more than 2^52 grid units)")
    z = discrete_gaussian(rng, units, flat.size) if mechanism == "gaussian" else discrete_laplace(rng, units, flat.size)
    snapped = np.rint(cells).astype(np.int64).astype(object) + z
    return (np.array([float(v) for v in snapped], dtype=np.float64) * gamma).reshape(x.shape)
