"""Exact mutual information for Gaussian inputs: the values the estimates are checked against.

* :func:`gaussian_mi` -- I(X; V) for jointly Gaussian X and V, singular covariances included
  (canonical correlations, Gelfand & Yaglom 1957);
* :func:`gaussian_mi_linear` -- I(X_target; A X + N) for Gaussian X and noise N;
* :func:`sum_leakage_bits` -- what the sum of n_h i.i.d. Gaussian inputs reveals about one of
  them, the floor of every exact secure-sum protocol, and :func:`group_sum_leakage_bits`, the
  same for inputs of unequal variances;
* :func:`mask_leakage_bits` -- what X + Z reveals about X for a Gaussian mask Z.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from p2pem.errors import ConfigError, DataError
from p2pem.leakage.checks import as_real, check_int

__all__ = [
    "gaussian_mi",
    "gaussian_mi_linear",
    "group_sum_leakage_bits",
    "mask_leakage_bits",
    "sum_leakage_bits",
]

FloatArray = npt.NDArray[np.float64]



def _as_index(idx: int | Sequence[int], dim: int, name: str) -> npt.NDArray[np.intp]:
    arr = np.atleast_1d(np.asarray(idx))
    if arr.size == 0:
        return np.zeros(0, dtype=np.intp)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise DataError(f"{name} must be an integer or a 1-D sequence of integers, got {idx!r}")
    if arr.min() < 0 or arr.max() >= dim:
        raise DataError(f"{name} has indices outside 0..{dim - 1}: {arr.tolist()}")
    if len(np.unique(arr)) != len(arr):
        raise DataError(f"{name} repeats an index: {arr.tolist()}")
    return arr.astype(np.intp)


def _check_covariance(cov: npt.ArrayLike, name: str = "cov") -> FloatArray:
    arr = as_real(cov, name)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.shape[0] == 0:
        raise DataError(f"{name} must be a non-empty square matrix, got shape {arr.shape}")
    scale = max(float(np.abs(arr).max()), np.finfo(float).tiny)
    if not np.allclose(arr, arr.T, rtol=0.0, atol=1e-10 * scale):
        raise DataError(f"{name} is not symmetric")
    arr = (arr + arr.T) / 2.0
    if np.linalg.eigvalsh(arr)[0] < -1e-10 * scale:
        raise DataError(f"{name} is not positive semi-definite")
    return arr


def _support(cov: FloatArray, rtol: float) -> tuple[FloatArray, FloatArray]:
    """Eigenvalues above ``rtol * largest`` and their eigenvectors (columns)."""
    vals, vecs = np.linalg.eigh(cov)
    if vals.size == 0 or vals[-1] <= 0.0:
        return vals[:0], vecs[:, :0]
    keep = vals > rtol * vals[-1]
    return vals[keep], vecs[:, keep]


def gaussian_mi(
    cov: npt.ArrayLike,
    idx_x: int | Sequence[int],
    idx_v: int | Sequence[int],
    *,
    rtol: float = 1e-10,
) -> float:
    """Exact I(X; V) in bits for jointly Gaussian X and V.

    Parameters
    ----------
    cov : array_like, shape (d, d)
        Covariance of a Gaussian vector that contains X and V among its components.
        Must be symmetric positive semi-definite; it may be singular.
    idx_x, idx_v : int or sequence of int
        Components of the vector that form X and V.  They may overlap (the
        information is then infinite).
    rtol : float, default 1e-10
        Eigenvalues below ``rtol`` times the largest count as zero, and canonical
        correlations within ``rtol`` of 1 count as exact disclosure.

    Returns
    -------
    float
        ``1/2 log2(det S_xx det S_vv / det S)`` with ``S`` the joint covariance of
        (X, V), generalised to singular covariances; ``math.inf`` if some linear
        function of X is a linear function of V; 0 if either side is empty or
        constant.

    Raises
    ------
    DataError
        If ``cov`` is not a finite symmetric positive semi-definite matrix or an
        index is out of range or repeated.
    ConfigError
        If ``rtol`` is not in (0, 1).

    Notes
    -----
    A Gaussian vector lives on the range of its covariance; the other directions are
    constants that neither carry nor receive information.  X and V are therefore
    first restricted to their supports (eigenvectors of S_xx and S_vv above the
    tolerance), which handles views with redundant or duplicated components.  On
    the supports both are whitened and the singular values of the whitened
    cross-covariance are the canonical correlations rho_i; then

        I(X; V) = -1/2 sum_i log2(1 - rho_i^2),

    which equals the determinant formula whenever S is non-singular, because the
    canonical pairs are independent Gaussian pairs (Gelfand & Yaglom 1957).
    ``1 - rho^2`` is computed as ``(1 - rho)(1 + rho)`` to keep precision near full
    disclosure.

    References
    ----------
    .. [1] I. M. Gelfand, A. M. Yaglom, "Calculation of the amount of information
       about a random function contained in another such function", Uspekhi
       Mat. Nauk 12 (1957); AMS Transl. Ser. 2, 12 (1959).

    Examples
    --------
    >>> import numpy as np
    >>> cov = np.array([[1.0, 1.0], [1.0, 3.0]])  # X1 and X1 + X2 + X3
    >>> round(gaussian_mi(cov, 0, 1), 4)
    0.2925
    """
    if not (isinstance(rtol, (int, float, np.floating)) and 0.0 < rtol < 1.0):
        raise ConfigError(f"rtol must be in (0, 1), got {rtol!r}")
    c = _check_covariance(cov)
    ix = _as_index(idx_x, c.shape[0], "idx_x")
    iv = _as_index(idx_v, c.shape[0], "idx_v")
    if ix.size == 0 or iv.size == 0:
        return 0.0
    lam_x, u_x = _support(c[np.ix_(ix, ix)], rtol)
    lam_v, u_v = _support(c[np.ix_(iv, iv)], rtol)
    if lam_x.size == 0 or lam_v.size == 0:
        return 0.0
    cross = (u_x / np.sqrt(lam_x)).T @ c[np.ix_(ix, iv)] @ (u_v / np.sqrt(lam_v))
    rho = np.clip(np.linalg.svd(cross, compute_uv=False), 0.0, 1.0)
    if np.any(1.0 - rho <= rtol):
        return math.inf
    return float(-0.5 * np.sum(np.log2((1.0 - rho) * (1.0 + rho))))


def gaussian_mi_linear(
    cov_xx: npt.ArrayLike,
    A: npt.ArrayLike,
    noise_cov: npt.ArrayLike,
    *,
    target: int | Sequence[int] | None = None,
    rtol: float = 1e-10,
) -> float:
    """Exact I(X_target; A X + N) in bits for X ~ N(0, cov_xx), N ~ N(0, noise_cov).

    Parameters
    ----------
    cov_xx : array_like, shape (d, d)
        Covariance of the inputs X (e.g. the identity for i.i.d. unit inputs).
    A : array_like, shape (m, d)
        Linear map from the inputs to the view.
    noise_cov : float or array_like, shape (m,) or (m, m)
        Covariance of the noise N, independent of X: a scalar means
        ``noise_cov * I``, a vector a diagonal.  Zero (no noise) is allowed.
    target : int or sequence of int, optional
        Components of X whose leakage is wanted (default: all of X).
    rtol : float, default 1e-10
        As in :func:`gaussian_mi`.

    Returns
    -------
    float
        The mutual information in bits (``math.inf`` for exact disclosure).

    Raises
    ------
    DataError
        If the shapes do not fit or a covariance is not symmetric PSD.

    Notes
    -----
    Builds the joint covariance of (X, V) with V = A X + N,
    ``[[S, S A^T], [A S, A S A^T + S_N]]``, and calls :func:`gaussian_mi`.

    Examples
    --------
    >>> import numpy as np
    >>> round(gaussian_mi_linear(np.eye(3), [[1.0, 1.0, 1.0]], 0.0, target=0), 4)
    0.2925
    """
    s = _check_covariance(cov_xx, "cov_xx")
    d = s.shape[0]
    a = as_real(A, "A")
    if a.ndim == 1:
        a = a.reshape(1, -1)
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] != d:
        raise DataError(f"A must have shape (m, {d}) to act on X, got shape {a.shape}")
    m = a.shape[0]
    nc = as_real(noise_cov, "noise_cov")
    if nc.ndim == 0:
        nc = float(nc) * np.eye(m)
    elif nc.ndim == 1:
        if nc.shape[0] != m:
            raise DataError(f"noise_cov must have {m} diagonal entries, got {nc.shape[0]}")
        nc = np.diag(nc)
    if nc.shape != (m, m):
        raise DataError(f"noise_cov must be a scalar, ({m},) or ({m}, {m}), got shape {nc.shape}")
    nc = _check_covariance(nc, "noise_cov")
    joint = np.block([[s, s @ a.T], [a @ s, a @ s @ a.T + nc]])
    joint = (joint + joint.T) / 2.0
    ix = np.arange(d) if target is None else _as_index(target, d, "target")
    return gaussian_mi(joint, [int(i) for i in ix], list(range(d, d + m)), rtol=rtol)


def sum_leakage_bits(n_h: int) -> float:
    """Bits that the sum of ``n_h`` i.i.d. Gaussian inputs reveals about one of them.

    Parameters
    ----------
    n_h : int
        Number of honest inputs in the sum, at least 1.

    Returns
    -------
    float
        ``I(X_1; X_1 + ... + X_nh) = 1/2 log2(n_h / (n_h - 1))`` bits, and
        ``math.inf`` for ``n_h = 1`` (the sum is the input).

    Raises
    ------
    ConfigError
        If ``n_h`` is not an integer >= 1.

    Notes
    -----
    The correlation between X_1 and the sum is 1/sqrt(n_h), and for a Gaussian pair
    I = -1/2 log2(1 - rho^2).  The value is the same for any common variance.
    It is the unavoidable leakage of any exact secure-sum protocol whose output an
    adversary sees, once it has subtracted the inputs of corrupted nodes.

    Examples
    --------
    >>> round(sum_leakage_bits(2), 3)
    0.5
    """
    n_h = check_int(n_h, "n_h", 1)
    if n_h == 1:
        return math.inf
    return 0.5 * math.log2(n_h / (n_h - 1))


def mask_leakage_bits(sigma_z: float) -> float:
    """Bits that X + Z reveals about X ~ N(0, 1) when Z ~ N(0, sigma_z^2).

    Parameters
    ----------
    sigma_z : float
        Standard deviation of the additive Gaussian mask, >= 0 (``math.inf``
        allowed).

    Returns
    -------
    float
        ``1/2 log2(1 + 1/sigma_z^2)`` bits (the Gaussian channel capacity at SNR
        ``1/sigma_z^2``); ``math.inf`` for ``sigma_z = 0`` and 0 for an infinite mask.

    Raises
    ------
    ConfigError
        If ``sigma_z`` is negative, NaN or not a number.

    Notes
    -----
    For an input of variance ``s^2`` use ``sigma_z / s``: only the ratio matters.

    Examples
    --------
    >>> mask_leakage_bits(1.0)
    0.5
    """
    if isinstance(sigma_z, bool) or not isinstance(sigma_z, (int, float, np.integer, np.floating)):
        raise ConfigError(f"sigma_z must be a number, got {sigma_z!r}")
    sigma = float(sigma_z)
    if math.isnan(sigma) or sigma < 0.0:
        raise ConfigError(f"sigma_z must be >= 0, got {sigma_z!r}")
    if sigma == 0.0:
        return math.inf
    # log1p keeps precision for wide masks, where 1/sigma^2 is tiny.
    return 0.5 * math.log1p(1.0 / (sigma * sigma)) / math.log(2.0)


def group_sum_leakage_bits(variances: Sequence[float], member: int) -> float:
    """Bits that the sum of independent Gaussian inputs of unequal variances reveals about one.

    Parameters
    ----------
    variances : sequence of float
        The variances v_j >= 0 of the inputs in the sum.
    member : int
        Position in ``variances`` of the input whose leakage is wanted.

    Returns
    -------
    float
        ``I(X_m; sum_j X_j) = 1/2 log2(V / (V - v_m))`` bits with ``V = sum_j v_j``;
        ``math.inf`` when the other inputs have no variance (the sum is the input) and 0
        when ``v_m = 0``.

    Raises
    ------
    ConfigError
        If a variance is negative or not finite, or ``member`` is out of range.

    Notes
    -----
    The correlation between X_m and the sum is sqrt(v_m / V), and for a Gaussian pair
    I = -1/2 log2(1 - rho^2).  With equal variances it is :func:`sum_leakage_bits`.  It is
    the floor of an exact secure-sum protocol when the nodes aggregate statistics of
    different numbers of rows.

    Examples
    --------
    >>> round(group_sum_leakage_bits([1.0, 1.0], 0), 3)
    0.5
    >>> round(group_sum_leakage_bits([1.0, 3.0], 0), 3)
    0.208
    """
    v = [float(x) for x in variances]
    if any(not math.isfinite(x) or x < 0.0 for x in v):
        raise ConfigError(f"variances must be finite and >= 0, got {v}")
    if isinstance(member, bool) or not isinstance(member, (int, np.integer)) or not 0 <= member < len(v):
        raise ConfigError(f"member must be an index into the {len(v)} variances, got {member!r}")
    own = v[member]
    rest = sum(x for j, x in enumerate(v) if j != member)
    if own == 0.0:
        return 0.0
    if rest == 0.0:
        return math.inf
    return 0.5 * math.log2((own + rest) / rest)
