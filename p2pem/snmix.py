"""Skew-normal mixture EM split into what a node computes locally and what needs the network.

The model (Azzalini & Dalla Valle 1996; Azzalini & Capitanio 1999) is

    f(x) = sum_k pi_k SN_p(x; xi_k, Sigma_k, alpha_k),
    SN_p(x; xi, Sigma, alpha) = 2 phi_p(x; xi, Sigma) Phi(alpha^T omega^-1 (x - xi)),

with omega = diag(Sigma)^(1/2).  Two parametrisations of one component:

*direct* (what users read and write; the R package ``sn``'s ``dp = (xi, Omega, alpha)``)
    ``locations`` xi, ``scales`` Sigma = Omega (positive definite), ``shapes`` alpha.
*working* (what the EM updates; Lin 2009, Cabral, Lachos & Prates 2012)
    xi, Delta, Gamma with Sigma = Gamma + Delta Delta^T, Delta = omega delta and
    delta = Omega_bar alpha / sqrt(1 + alpha^T Omega_bar alpha), Omega_bar = omega^-1 Sigma omega^-1.
    Any Gamma positive definite and any Delta give a valid model; conversely
    alpha = omega Gamma^-1 Delta / sqrt(1 + Delta^T Gamma^-1 Delta).

A component's mean is E X = xi + sqrt(2/pi) Delta and its covariance
Cov X = Sigma - (2/pi) Delta Delta^T: xi is not the mean.  With Delta = 0 the component is the
Gaussian N(xi, Sigma); |delta|^2 = Delta^T Sigma^-1 Delta < 1 approaches 1 as |alpha| grows.

The E-step (Cabral et al. 2012, Sec. 3), per row x and component k, with
M^2 = 1 / (1 + Delta^T Gamma^-1 Delta), mu_tau = M^2 Delta^T Gamma^-1 (x - xi), z = mu_tau / M and
lambda(z) = phi(z) / Phi(z) (computed in log space, finite where both factors underflow)::

    r0 = responsibility,  r1 = mu_tau + M lambda(z),  r2 = mu_tau^2 + M^2 + M mu_tau lambda(z).

Statistics layout (one flat float64 vector; :func:`stats_size` entries), centred at the node's
*current* locations (y = x - xi_k), as :mod:`p2pem.gmm` centres at the current means, so that
consensus errors are not amplified by large coordinates:

==========  ===============  =======================================
slice       shape            meaning (sum over the node's rows)
==========  ===============  =======================================
``s0``      (K,)             r0
``s1``      (K,)             r0 r1
``s2``      (K,)             r0 r2
``m0``      (K, d)           r0 y
``m1``      (K, d)           r0 r1 y
``S``       (K, d(d+1)/2)    r0 y y^T, upper triangle
``ll``      (1,)             log f(x)
==========  ===============  =======================================

3 + 2d + d(d+1)/2 numbers per component (10 for d = 2, the Gaussian needs 6).  The M-step is
the one of Lin (2009) and the R package ``mixsmsn`` (standard EM: every component's E-step
at the previous parameters), written in the centred coordinates (it is translation
equivariant, so ``xi_new = xi_old + e``)::

    pi    = s0 / n
    e     = (m0 - Delta_old s1) / s0
    Delta = (m1 - s1 e) / s2
    Gamma = [S - e m0^T - m0 e^T + s0 e e^T - Delta (m1 - s1 e)^T - (m1 - s1 e) Delta^T
             + s2 Delta Delta^T] / s0  (+ reg_covar on the diagonal)

Every update is a ratio of sums, so averages (consensus) and sums (exact protocols) give the
same model.  Gamma is a weighted sum of positive semi-definite terms
(r0 [(y - e - r1 Delta)(...)^T + (r2 - r1^2) Delta Delta^T]), so it stays positive definite.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pem.errors import ModelError, ProtocolError
from p2pem.gmm import in_node_blocks, log_det_precision, logsumexp_in_order, precision_cholesky, quantise_columns, read_model_arrays, sum_in_order
from p2pem.gmm import init_from_global_batch as gaussian_init_from_global
from p2pem.gmm import init_statistics as gaussian_init_statistics

FloatArray = npt.NDArray[np.float64]

#: Keys of a model in the direct parametrisation, in the order of ``result.json``.
PARAM_KEYS = ("weights", "locations", "scales", "shapes")
#: |delta| from which a component counts as at the boundary (|alpha| about 70 in one dimension;
#: 1 - |delta| is about 1 / (2 alpha^2)).  A finite maximum can have a large shape too (AIS,
#: G = 2: |delta| = 0.9989, alpha = 21.7), so the mark is well beyond the shapes fits reach.
BOUNDARY_DELTA = 0.9999
_LOG2 = math.log(2.0)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
#: -z from which the inverse Mills ratio is taken from its asymptotic series (:func:`latent_moments`)
_MILLS_SERIES_FROM = 1e3


class BoundaryWarning(UserWarning):
    """A skew-normal component approaches the boundary |delta| = 1 (its shape grows without bound)."""


def log_ndtr(z: FloatArray) -> FloatArray:
    """log Phi(z), accurate for strongly negative z (SciPy's ``log_ndtr``).

    SciPy is imported here, not at module level: a node process must start without it (the
    deployment starts one per party); it loads when a skew-normal E-step first runs.
    """
    from scipy.special import log_ndtr as _log_ndtr  # start-up time: see the docstring

    return np.asarray(_log_ndtr(z), dtype=np.float64)


# --------------------------------------------------------------------------- parametrisations


def working_from_direct(scales: FloatArray, shapes: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(Delta, Gamma) from Sigma (..., d, d) and alpha (..., d).

    With a = omega^-1 alpha: Delta = Sigma a / sqrt(1 + a^T Sigma a) and Gamma = Sigma - Delta Delta^T.
    """
    d = shapes.shape[-1]
    omega = np.sqrt(np.diagonal(scales, axis1=-2, axis2=-1))
    a = shapes / omega
    sa = np.stack([sum_in_order([scales[..., r, c] * a[..., c] for c in range(d)]) for r in range(d)], axis=-1)
    deltas = sa / np.sqrt(1.0 + sum_in_order([a[..., c] * sa[..., c] for c in range(d)]))[..., None]
    gammas = scales - deltas[..., :, None] * deltas[..., None, :]
    return deltas, gammas


def direct_from_working(deltas: FloatArray, gammas: FloatArray, prec_chol: FloatArray | None = None) -> tuple[FloatArray, FloatArray]:
    """(Sigma, alpha) from Delta (..., d) and Gamma (..., d, d) (module docstring).

    ``prec_chol`` (P P^T = Gamma^-1, as :func:`p2pem.gmm.precision_cholesky` gives it) is
    computed when not given.  Elementwise sums only, so a node and a batch get the same bits.
    """
    if prec_chol is None:
        prec_chol = precision_cholesky(gammas)
    scales = gammas + deltas[..., :, None] * deltas[..., None, :]
    ginv_delta, q = gamma_inv_delta(deltas, prec_chol)
    omega = np.sqrt(np.diagonal(scales, axis1=-2, axis2=-1))
    shapes = omega * ginv_delta / np.sqrt(1.0 + q)[..., None]
    return scales, shapes


def gamma_inv_delta(deltas: FloatArray, prec_chol: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(Gamma^-1 Delta (..., d), q = Delta^T Gamma^-1 Delta (...)) from Gamma's precision Cholesky factors P.

    With v = P^T Delta: Gamma^-1 Delta = P v and q = |v|^2; elementwise sums only.
    """
    d = deltas.shape[-1]
    v = _project(deltas, prec_chol)
    q = sum_in_order([v[..., c] * v[..., c] for c in range(d)])
    return np.stack([sum_in_order([prec_chol[..., r, c] * v[..., c] for c in range(d)]) for r in range(d)], axis=-1), q


def latent_moments(z: FloatArray, m: FloatArray, m2: FloatArray | None = None, log_cdf: FloatArray | None = None) -> tuple[FloatArray, FloatArray]:
    """(r1, r2): E[tau | x] and E[tau^2 | x] for tau | x ~ N(mu_tau, M^2) truncated to [0, inf).

    With z = mu_tau / M and lambda(z) = phi(z) / Phi(z) (in log space): r1 = mu_tau + M lambda,
    r2 = mu_tau^2 + M^2 + M mu_tau lambda = mu_tau r1 + M^2.  Both increase with mu_tau (the
    truncated normal is stochastically increasing in its location, and tau >= 0).
    ``m2`` (M^2, default M M) and ``log_cdf`` (log Phi(z)) when the caller has them.
    """
    if log_cdf is None:
        log_cdf = log_ndtr(z)
    with np.errstate(over="ignore", invalid="ignore"):  # replaced below where it cancels badly
        lam = np.exp(-0.5 * z * z - _HALF_LOG_2PI - log_cdf)
    far = z < -_MILLS_SERIES_FROM
    if np.any(far):
        # lambda(-x) = x + 1/x - 2/x^3 + 10/x^5 - ... for large x (the Mills ratio's asymptotic
        # series); beyond 1e3 the log-space difference above loses more digits than this drops
        x = np.where(far, -z, 1.0)
        lam = np.where(far, x + 1.0 / x - 2.0 / x**3 + 10.0 / x**5, lam)
    mu_tau = m * z
    r1 = mu_tau + m * lam
    return r1, mu_tau * r1 + (m * m if m2 is None else m2)


def delta_norm(deltas: FloatArray, prec_chol: FloatArray) -> FloatArray:
    """|delta| = sqrt(Delta^T Sigma^-1 Delta) = sqrt(q / (1 + q)), q = Delta^T Gamma^-1 Delta; in [0, 1)."""
    v = _project(deltas, prec_chol)
    q = sum_in_order([v[..., c] * v[..., c] for c in range(v.shape[-1])])
    return np.sqrt(q / (1.0 + q))


def moments(locations: FloatArray, scales: FloatArray, deltas: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Each component's mean xi + sqrt(2/pi) Delta and covariance Sigma - (2/pi) Delta Delta^T."""
    means = locations + _SQRT_2_OVER_PI * deltas
    covariances = scales - (2.0 / math.pi) * deltas[..., :, None] * deltas[..., None, :]
    return means, covariances


def _project(vectors: FloatArray, prec_chol: FloatArray) -> FloatArray:
    """P^T v for (..., d) vectors and (..., d, d) factors, by elementwise sums (batch invariant)."""
    d = vectors.shape[-1]
    return np.stack([sum_in_order([vectors[..., r] * prec_chol[..., r, c] for r in range(d)]) for c in range(d)], axis=-1)


@dataclass(frozen=True, eq=False)
class SkewNormalParams:
    """One skew-normal mixture in both parametrisations (module docstring).

    Build it with :meth:`from_direct` (what users give) or :meth:`from_working` (what the EM
    computes); both fill every field, so a model read back from its working form keeps the
    EM's bits.

    Attributes
    ----------
    weights : (K,)
    locations : (K, d)
        xi.
    scales : (K, d, d)
        Sigma = Omega, positive definite.
    shapes : (K, d)
        alpha.
    deltas : (K, d)
        Delta = omega delta.
    gammas : (K, d, d)
        Gamma = Sigma - Delta Delta^T.
    """

    weights: FloatArray
    locations: FloatArray
    scales: FloatArray
    shapes: FloatArray
    deltas: FloatArray = field(repr=False)
    gammas: FloatArray = field(repr=False)

    @classmethod
    def from_direct(cls, weights, locations, scales, shapes) -> SkewNormalParams:
        deltas, gammas = working_from_direct(np.asarray(scales, float), np.asarray(shapes, float))
        return cls(np.asarray(weights, float), np.asarray(locations, float), np.asarray(scales, float), np.asarray(shapes, float), deltas, gammas)

    @classmethod
    def from_working(cls, weights, locations, deltas, gammas) -> SkewNormalParams:
        scales, shapes = direct_from_working(np.asarray(deltas, float), np.asarray(gammas, float))
        return cls(np.asarray(weights, float), np.asarray(locations, float), scales, shapes, np.asarray(deltas, float), np.asarray(gammas, float))

    @property
    def n_components(self) -> int:
        return int(self.weights.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.locations.shape[1])

    @cached_property
    def means(self) -> FloatArray:
        """(K, d) component means E X = xi + sqrt(2/pi) Delta."""
        return moments(self.locations, self.scales, self.deltas)[0]

    @cached_property
    def covariances(self) -> FloatArray:
        """(K, d, d) component covariances Cov X = Sigma - (2/pi) Delta Delta^T."""
        return moments(self.locations, self.scales, self.deltas)[1]


def stats_size(n_components: int, n_features: int) -> int:
    """Length of the statistics vector (module docstring), log-likelihood included."""
    k, d = n_components, n_features
    return k * (3 + 2 * d + d * (d + 1) // 2) + 1


# --------------------------------------------------------------------------- the E-step


def batch_statistics(
    X: FloatArray,
    offsets: npt.NDArray[np.intp],
    weights: FloatArray,
    locations: FloatArray,
    deltas: FloatArray,
    prec_chol: FloatArray,
) -> FloatArray:
    """E-step statistics of many nodes at once, each at its own model.

    Parameters
    ----------
    X : (R, d) array
        All nodes' rows, node after node.
    offsets : (N,) int array
        Index of each node's first row.
    weights : (N, K), locations : (N, K, d), deltas : (N, K, d)
    prec_chol : (N, K, d, d)
        Cholesky factors of Gamma^-1 (:func:`p2pem.gmm.precision_cholesky` of Gamma).

    Returns
    -------
    (N, P) array
        Row i is node i's statistics vector (module docstring).

    Notes
    -----
    As :func:`p2pem.gmm.batch_statistics`: elementwise operations, left-to-right sums and
    ``np.add.reduceat`` over whole nodes, so one node alone gets the bits the batch gives it;
    many rows go in blocks of whole nodes.
    """
    return in_node_blocks(_statistics_block, X, offsets, weights, locations, deltas, prec_chol)


def _component_terms(X, node_of_row, locations, v, m, prec_chol, log_w, j):
    """Per-row terms of component j: (y, log weight + log density, z) with z = M t."""
    d = X.shape[1]
    y = X - locations[node_of_row, j]
    chol = prec_chol[node_of_row, j]
    w = [sum_in_order([y[:, r] * chol[:, r, c] for r in range(d)]) for c in range(d)]
    vj = v[node_of_row, j]
    t = sum_in_order([w[c] * vj[:, c] for c in range(d)])
    z = m[node_of_row, j] * t
    log_phi_z = log_ndtr(z)
    maha = sum_in_order([wc * wc for wc in w]) - z * z
    log_prob = log_w[node_of_row, j] - 0.5 * maha + log_phi_z
    return y, log_prob, z, log_phi_z


def _statistics_block(X, offsets, weights, locations, deltas, prec_chol) -> FloatArray:
    n_rows, d = X.shape
    n_nodes, k = weights.shape
    sizes = np.diff(np.append(offsets, n_rows))
    node_of_row = np.repeat(np.arange(n_nodes), sizes)
    v = _project(deltas, prec_chol)  # (N, K, d): P^T Delta
    q = sum_in_order([v[..., c] * v[..., c] for c in range(d)])
    m2 = 1.0 / (1.0 + q)
    m = np.sqrt(m2)
    # log 2 - d/2 log 2 pi + log det P + log M, per node and component
    log_w = np.log(weights) + (_LOG2 - d * _HALF_LOG_2PI) + log_det_precision(prec_chol) + np.log(m)
    ys, log_probs, zs, log_cdfs = [], [], [], []
    for j in range(k):
        y, lp, z, lc = _component_terms(X, node_of_row, locations, v, m, prec_chol, log_w, j)
        ys.append(y)
        log_probs.append(lp)
        zs.append(z)
        log_cdfs.append(lc)
    norm = logsumexp_in_order(log_probs)
    r0s, r1s, r2s = [], [], []
    for j in range(k):
        r0 = np.exp(log_probs[j] - norm)
        r1, r2 = latent_moments(zs[j], m[node_of_row, j], m2[node_of_row, j], log_cdfs[j])
        r0s.append(r0)
        r1s.append(r0 * r1)
        r2s.append(r0 * r2)
    iu = np.triu_indices(d)
    columns = [*r0s, *r1s, *r2s]
    for j in range(k):
        columns.extend(r0s[j] * ys[j][:, a] for a in range(d))
    for j in range(k):
        columns.extend(r1s[j] * ys[j][:, a] for a in range(d))
    for j in range(k):
        columns.extend((r0s[j] * ys[j][:, a]) * ys[j][:, b] for a, b in zip(*iu, strict=True))
    columns.append(norm)
    per_row = np.ascontiguousarray(np.stack(columns, axis=1))
    return np.add.reduceat(per_row, offsets, axis=0)


def unpack_statistics(stats: FloatArray, n_components: int, n_features: int):
    """Split (..., P) statistics into s0, s1, s2 (..., K), m0, m1 (..., K, d), S (..., K, d, d), ll (...)."""
    k, d = n_components, n_features
    if stats.shape[-1] != stats_size(k, d):
        raise ProtocolError(f"statistics vector has length {stats.shape[-1]}, expected {stats_size(k, d)}")
    lead = stats.shape[:-1]
    s0, s1, s2 = stats[..., :k], stats[..., k : 2 * k], stats[..., 2 * k : 3 * k]
    at = 3 * k
    m0 = stats[..., at : at + k * d].reshape(*lead, k, d)
    m1 = stats[..., at + k * d : at + 2 * k * d].reshape(*lead, k, d)
    tri = stats[..., at + 2 * k * d : -1].reshape(*lead, k, -1)
    S = np.empty((*lead, k, d, d))
    iu = np.triu_indices(d)
    S[..., iu[0], iu[1]] = tri
    S[..., iu[1], iu[0]] = tri
    return s0, s1, s2, m0, m1, S, stats[..., -1]


def total_count(stats: FloatArray, n_components: int) -> FloatArray:
    """(N,) sum of the soft counts s0 of (N, P) statistics, left to right."""
    return sum_in_order([stats[:, j] for j in range(n_components)])


# --------------------------------------------------------------------------- the M-step


def batch_m_step(stats: FloatArray, locations: FloatArray, deltas: FloatArray, reg_covar: float, *, iteration: int | None = None):
    """M-step of many nodes at once (module docstring; Lin 2009, Cabral et al. 2012).

    Parameters
    ----------
    stats : (N, P) array
        Every node's network average (or sum) of the statistics, computed at ``locations``
        and ``deltas`` (and the Gamma they came with).
    locations, deltas : (N, K, d) arrays
        The model the statistics were computed at (xi_old, Delta_old).
    reg_covar : float
        Added to the diagonal of every Gamma.

    Returns
    -------
    weights (N, K), locations (N, K, d), deltas (N, K, d), gammas (N, K, d, d), mean_loglik (N,)

    Raises
    ------
    ModelError
        Non-finite statistics, or a component whose weight collapsed (naming it).
    """
    n, k, d = locations.shape
    s0, s1, s2, m0, m1, S, ll = unpack_statistics(stats, k, d)
    where = f" in EM iteration {iteration}" if iteration is not None else ""
    if not np.all(np.isfinite(stats)):
        raise ModelError(f"non-finite sufficient statistics{where}")
    total = sum_in_order([s0[:, j] for j in range(k)])
    small = (s0 <= (10 * np.finfo(float).eps) * total[:, None]) | (s2 <= 0)
    if np.any(small):
        node, j = (int(v[0]) for v in np.nonzero(small))
        raise ModelError(
            f"skew-normal component {j} collapsed (weight {s0[node, j] / total[node]:.3g}){where}: "
            "decrease n_components, change the init or increase reg_covar"
        )
    e = (m0 - deltas * s1[..., None]) / s0[..., None]
    c = m1 - s1[..., None] * e
    new_deltas = c / s2[..., None]
    outer = _outer
    gammas = (
        S
        - outer(e, m0)
        - outer(m0, e)
        + s0[..., None, None] * outer(e, e)
        - outer(new_deltas, c)
        - outer(c, new_deltas)
        + s2[..., None, None] * outer(new_deltas, new_deltas)
    ) / s0[..., None, None]
    gammas = (gammas + np.swapaxes(gammas, -1, -2)) / 2 + reg_covar * np.eye(d)
    return s0 / total[:, None], locations + e, new_deltas, gammas, ll / total


def _outer(a: FloatArray, b: FloatArray) -> FloatArray:
    return a[..., :, None] * b[..., None, :]


def cap_deltas(deltas: FloatArray, gammas: FloatArray, prec_chol: FloatArray, max_delta: float) -> tuple[FloatArray, FloatArray]:
    """(Delta, Gamma) with |delta| at most ``max_delta`` (< 1) and the scale Sigma kept.

    |delta|^2 = Delta^T Sigma^-1 Delta = q / (1 + q) with q = Delta^T Gamma^-1 Delta.  Where
    |delta| > m, Delta becomes f Delta with f = m / |delta| and Gamma becomes
    Gamma + (1 - f^2) Delta Delta^T, so Sigma = Gamma + Delta Delta^T stays and only the
    shape shrinks (keeping Gamma instead would take the skewed direction's variance away).
    """
    v = _project(deltas, prec_chol)
    q = sum_in_order([v[..., c] * v[..., c] for c in range(v.shape[-1])])
    norm = np.sqrt(q / (1.0 + q))
    factor = np.where(norm > max_delta, max_delta / np.where(norm > 0, norm, 1.0), 1.0)
    if np.all(factor == 1.0):
        return deltas, gammas
    grow = (1.0 - factor * factor)[..., None, None] * (deltas[..., :, None] * deltas[..., None, :])
    return deltas * factor[..., None], gammas + grow


def warn_boundary(norms: FloatArray, *, stacklevel: int = 2) -> None:
    """A :class:`BoundaryWarning` naming the first component with |delta| >= :data:`BOUNDARY_DELTA`.

    ``norms`` is (..., K): |delta| of every component (of every node).
    """
    at = np.argwhere(norms >= BOUNDARY_DELTA)
    if at.size == 0:
        return
    j = int(at[0][-1])
    warnings.warn(
        f"skew-normal component {j} reached the boundary of the parameter space (|delta| >= {BOUNDARY_DELTA}: the likelihood "
        "keeps growing as its shape grows without bound); the model is valid but its shape is not estimable: cap |delta| with "
        "the family's max_delta, or use more components or the gaussian family",
        BoundaryWarning,
        stacklevel=stacklevel,
    )


# --------------------------------------------------------------------------- initialisation


def init_statistics(X: FloatArray, offsets: npt.NDArray[np.intp], *, cubes: bool = True) -> FloatArray:
    """What nodes contribute to the private initialisation: [n, sum x, upper sum x x^T, sum x^3].

    The column sums of x^3 (``cubes``) give the sign of each column's global skewness; they
    are left out when the initial shapes are public.
    """
    base = gaussian_init_statistics(X, offsets)
    if not cubes:
        return base
    per_row = np.ascontiguousarray(np.stack([X[:, a] * X[:, a] * X[:, a] for a in range(X.shape[1])], axis=1))
    return np.concatenate([base, np.add.reduceat(per_row, offsets, axis=0)], axis=1)


def init_stats_size(n_features: int, *, cubes: bool = True) -> int:
    d = n_features
    return 1 + d + d * (d + 1) // 2 + (d if cubes else 0)


def init_from_global_batch(
    stats: FloatArray, n_components: int, seed: int, shapes: FloatArray | None = None
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Initial models from the privately averaged global moments, for every row of ``stats``.

    As :func:`p2pem.gmm.init_from_global_batch` (its weights, component means and
    covariances, from the same public ``seed``), with a skew: every component's shape is
    ``shapes`` (public, d values) or, by default, the sign (+1 or -1) of each column's global
    third central moment, rounded like the other moments so every node gets the same bits.
    A component with Sigma = the global covariance and that shape gets the location that
    puts its mean where the Gaussian init puts it (xi = mean - sqrt(2/pi) Delta).

    With all shapes 0 the model is Gaussian, and Delta = 0 is a fixed point of the EM: the
    fit stays Gaussian.

    Returns
    -------
    weights (N, K), locations (N, K, d), deltas (N, K, d), gammas (N, K, d, d)
    """
    n = stats.shape[0]
    width = stats.shape[1]
    cubes = shapes is None
    d = _init_width(width, cubes)
    weights, means, covariances = gaussian_init_from_global(np.ascontiguousarray(stats[:, : init_stats_size(d, cubes=False)]), n_components, seed)
    if cubes:
        count = stats[:, :1]
        mean = stats[:, 1 : 1 + d] / count
        diag = np.stack([stats[:, 1 + d + _upper_index(d, a, a)] for a in range(d)], axis=1) / count
        third = stats[:, -d:] / count - 3.0 * mean * diag + 2.0 * mean * mean * mean
        signs = np.where(quantise_columns(third) < 0, -1.0, 1.0)
        alpha = np.broadcast_to(signs[:, None, :], (n, n_components, d))
    else:
        assert shapes is not None
        alpha = np.broadcast_to(np.asarray(shapes, dtype=float), (n, n_components, d))
    deltas, gammas = working_from_direct(covariances, alpha)
    locations = means - _SQRT_2_OVER_PI * deltas
    return weights, locations, deltas, gammas


def _init_width(width: int, cubes: bool) -> int:
    for d in range(1, 10_000):
        size = init_stats_size(d, cubes=cubes)
        if size == width:
            return d
        if size > width:
            break
    raise ProtocolError(f"init statistics vector has length {width}, not that of the skew-normal initialisation")


def _upper_index(d: int, a: int, b: int) -> int:
    """Position of (a, b), a <= b, in the row-major upper triangle (``np.triu_indices``)."""
    return a * d - a * (a - 1) // 2 + (b - a)


# --------------------------------------------------------------------------- single models


def params_from_dict(init: Mapping[str, Any], n_components: int, n_features: int | None = None) -> SkewNormalParams:
    """Validate a user-given model ``{"weights", "locations", "scales", "shapes"}``.

    The one validator of an explicit skew-normal model (``[em.init]``, rosters, the
    estimator's ``init``); every error names the entry at fault
    (:class:`~p2pem.errors.InitError`).

    Parameters
    ----------
    init : mapping
        ``weights`` (K,), ``locations`` (K, d), ``scales`` (K, d, d) symmetric positive
        definite, ``shapes`` (K, d): finite numbers.
    n_components : int
    n_features : int, optional
        Required d (the data's width).

    Raises
    ------
    p2pem.errors.InitError
        A key unknown or missing, a wrong shape, a non-finite value, weights not positive or
        not summing to 1, a scale not symmetric positive definite.
    """
    arrays = read_model_arrays(init, tuple(zip(PARAM_KEYS, (1, 2, 3, 2), strict=True)), n_components, n_features, family="skew-normal")
    weights, locations, scales, shapes = (arrays[key] for key in PARAM_KEYS)
    params = SkewNormalParams.from_direct(weights, locations, scales, shapes)
    for array in (params.weights, params.locations, params.scales, params.shapes, params.deltas, params.gammas):
        array.flags.writeable = False
    return params


def log_responsibilities(X: FloatArray, params: SkewNormalParams) -> tuple[FloatArray, FloatArray]:
    """``(log_resp (n, K), log f(x) (n,))`` of rows ``X`` under one model (reference, for scoring)."""
    from scipy.special import logsumexp  # start-up time: a node process never scores rows

    n, d = X.shape
    prec_chol = precision_cholesky(params.gammas)
    v = _project(params.deltas, prec_chol)
    q = np.sum(v * v, axis=-1)
    m = 1.0 / np.sqrt(1.0 + q)
    weighted = np.empty((n, params.n_components))
    for j in range(params.n_components):
        w = (X - params.locations[j]) @ prec_chol[j]
        z = m[j] * (w @ v[j])
        maha = np.sum(w * w, axis=1) - z * z
        weighted[:, j] = (
            np.log(params.weights[j]) + _LOG2 - d * _HALF_LOG_2PI + float(np.sum(np.log(np.diagonal(prec_chol[j])))) + np.log(m[j])
            - 0.5 * maha + log_ndtr(z)
        )
    norm = logsumexp(weighted, axis=1)
    return weighted - norm[:, None], norm


def sample(params: SkewNormalParams, n_samples: int, rng: np.random.Generator | np.random.RandomState) -> tuple[FloatArray, npt.NDArray[np.intp]]:
    """Rows from one model by the stochastic representation x = xi + Delta |z0| + Gamma^(1/2) z1.

    Component counts are multinomial with the weights; each component's rows then use
    z0 ~ N(0, 1) and z1 ~ N(0, I) (Gamma^(1/2) its Cholesky factor).  Rows come grouped by
    component, with their labels.
    """
    counts = rng.multinomial(int(n_samples), params.weights)
    d = params.n_features
    blocks = []
    for j, size in enumerate(counts):
        size = int(size)
        z0 = np.abs(rng.standard_normal(size))
        z1 = rng.standard_normal((size, d))
        chol = np.linalg.cholesky(params.gammas[j])
        blocks.append(params.locations[j] + z0[:, None] * params.deltas[j] + z1 @ chol.T)
    return np.vstack(blocks), np.repeat(np.arange(params.n_components), counts)


def n_parameters(n_components: int, n_features: int) -> int:
    """G (2p + p(p+1)/2) + G - 1: locations, shapes, scales and the free weights."""
    k, d = n_components, n_features
    return int(k * (2 * d + d * (d + 1) // 2) + k - 1)
