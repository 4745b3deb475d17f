"""Post-processing of noisy M-step outputs, chosen by name (free under DP: it sees no data).

Noise can leave weights negative, counts below one row and covariances indefinite; the seed
papers repair them after the M-step:

========================  ======================================================================
``clip_weights``          weights clipped at a floor, optionally smoothed, renormalised
                          (DP-MSNM; Wu et al.)
``"eigclamp"``            eigenvalues clamped from below at ``floor`` (Park et al., AISTATS 2017,
                          who use 1e-3)
``"diagshift"``           ``Sigma + (floor - lambda_min) I`` (Wu et al.'s diagonal shift)
``"xi"``                  the heuristic of Xi, Kantarcioglu & Inan (CODASPY 2011, Section 5,
                          step 3): eigenvalues below ``floor`` replaced by the smallest one
                          above it (the paper: negative ones by the smallest positive one),
                          repeated until the matrix is positive definite
``"shrink"``              variances clamped at ``floor``, then the off-diagonal part shrunk
                          towards 0 until the matrix is positive definite: keeps the noisy
                          variances and gives up correlation first (this project's; it was
                          called ``"xi"`` before the paper was at hand)
========================  ======================================================================

Every repair leaves a matrix whose smallest eigenvalue is already >= ``floor`` untouched (bit
for bit), so with no noise the private runs equal plain EM.
"""

from __future__ import annotations

import numpy as np

from p2pem.errors import ConfigError
from p2pem.gmm import FloatArray

REPAIRS = ("eigclamp", "diagshift", "xi", "shrink")


def clip_weights(weights: FloatArray, floor: float = 1e-3, smoothing: float = 0.0) -> FloatArray:
    """Weights (..., K) clipped at ``floor``, plus ``smoothing`` each, renormalised to sum to 1.

    Rows that need neither (all weights >= floor, no smoothing) are returned unchanged.
    """
    w = np.asarray(weights, dtype=float)
    if smoothing == 0 and np.all(w >= floor):
        return w
    fixed = np.maximum(w, floor) + smoothing
    fixed = fixed / fixed.sum(axis=-1, keepdims=True)
    keep = np.all(w >= floor, axis=-1, keepdims=True) & (smoothing == 0)
    return np.where(keep, w, fixed)


def repair_covariances(covariances: FloatArray, method: str = "eigclamp", floor: float = 1e-3) -> FloatArray:
    """Make every (..., d, d) matrix symmetric positive definite with eigenvalues >= ~floor.

    Parameters
    ----------
    covariances : (..., d, d) array
        Noisy covariance estimates (symmetrised first; noise on the upper triangle only is
        mirrored already, so this only removes rounding asymmetry).
    method : {"eigclamp", "diagshift", "xi", "shrink"}
        See the module docstring.
    floor : float
        Smallest eigenvalue kept, > 0.

    Returns
    -------
    array like ``covariances``
        Matrices whose smallest eigenvalue was >= ``floor`` are returned as they were.
    """
    if method not in REPAIRS:
        raise ConfigError(f"covariance repair must be one of {list(REPAIRS)}, got {method!r}")
    if not floor > 0:
        raise ConfigError(f"covariance floor must be > 0, got {floor!r}")
    c = np.array(covariances, dtype=float)
    if not np.all(np.isfinite(c)):
        raise ConfigError("cannot repair a covariance with non-finite entries")
    flat = c.reshape(-1, *c.shape[-2:])
    sym = np.all(flat == np.swapaxes(flat, -1, -2), axis=(-2, -1))
    bad = np.flatnonzero((np.linalg.eigvalsh(flat)[:, 0] < floor) | ~sym)
    if bad.size:
        a = flat[bad]
        a = (a + np.swapaxes(a, -1, -2)) / 2
        flat[bad] = _REPAIR[method](a, floor)
    return flat.reshape(c.shape)


_EPS = 64 * np.finfo(float).eps


def _eigclamp(a: FloatArray, floor: float) -> FloatArray:
    lam, vec = np.linalg.eigh(a)
    # clamp a little above the floor: rebuilding V diag V^T rounds at ~eps * max|lambda|
    lam = np.maximum(lam, floor + _EPS * np.max(np.abs(lam), axis=-1, keepdims=True))
    out = (vec * lam[..., None, :]) @ np.swapaxes(vec, -1, -2)
    return (out + np.swapaxes(out, -1, -2)) / 2


def _diagshift(a: FloatArray, floor: float) -> FloatArray:
    lam_min = np.linalg.eigvalsh(a)[..., 0]
    diag = np.diagonal(a, axis1=-2, axis2=-1)
    shift = floor - lam_min + _EPS * np.max(np.abs(diag), axis=-1)
    return a + shift[..., None, None] * np.eye(a.shape[-1])


def _xi(a: FloatArray, floor: float) -> FloatArray:
    """Xi, Kantarcioglu & Inan (2011): V D V^T with every eigenvalue below ``floor`` replaced by the
    smallest eigenvalue at or above it (``floor`` if there is none), repeated while rounding
    leaves one below."""
    out = a
    for _ in range(10):
        lam, vec = np.linalg.eigh(out)
        if np.all(lam[..., 0] >= floor):
            break
        ok = lam >= floor
        smallest = np.min(np.where(ok, lam, np.inf), axis=-1, keepdims=True)
        smallest = np.where(np.isfinite(smallest), smallest, floor) + _EPS * np.max(np.abs(lam), axis=-1, keepdims=True)
        lam = np.where(ok, lam, smallest)
        out = (vec * lam[..., None, :]) @ np.swapaxes(vec, -1, -2)
        out = (out + np.swapaxes(out, -1, -2)) / 2
    return out


def _shrink(a: FloatArray, floor: float) -> FloatArray:
    return np.stack([_shrink_one(m, floor) for m in a])


def _shrink_one(a: FloatArray, floor: float) -> FloatArray:
    diag = np.maximum(np.diag(a), floor * 2)
    off = a - np.diag(np.diag(a))
    lo, hi = 0.0, 1.0  # shrink factor: lo always works (a diagonal matrix >= 2 floor)

    def ok(s: float) -> bool:
        return np.linalg.eigvalsh(np.diag(diag) + s * off)[0] >= floor

    if ok(hi):
        lo = hi
    else:
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return np.diag(diag) + lo * off


_REPAIR = {"eigclamp": _eigclamp, "diagshift": _diagshift, "xi": _xi, "shrink": _shrink}
