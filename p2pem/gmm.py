"""Gaussian-mixture EM split into what a node computes locally and what needs the network.

Everything here is pure: arrays in, arrays out, no I/O, no transport.  The E-step runs on a
node's own rows and produces one flat vector of sufficient statistics; the network averages
those vectors (any protocol); the M-step turns the average back into parameters.

Statistics layout (one flat float64 vector, see :func:`stats_size`), for K components in d
dimensions, centred at the *current* means ``mu`` so that the update stays accurate:

==========  ===============  ====================================================
slice       shape            meaning (sum over the node's rows n)
==========  ===============  ====================================================
``a``       (K,)             r_nk                       (soft counts)
``b``       (K, d)           r_nk (x_n - mu_k)          (centred first moment)
``C``       (K, d(d+1)/2)    r_nk (x_n - mu_k)(x_n - mu_k)^T, upper triangle
``ll``      (1,)             log p(x_n)                 (log-likelihood at mu, Sigma, pi)
==========  ===============  ====================================================

The M-step of Li et al. (ICASSP 2022, eq. 5-7) needs only ratios of network *averages*, so
the same function serves sums (exact protocols) and averages (consensus):
``pi_k = a_k / sum a``, ``mu_new = mu + delta`` with ``delta = b_k / a_k`` and
``Sigma_new = C_k / a_k - delta delta^T + reg_covar I``.  The last identity is the usual
"variance = second moment - squared mean" written around ``mu``; it gives the standard EM
update (covariance around the *new* mean) with one consensus round per EM iteration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.special import logsumexp

from p2pem.errors import ProtocolError

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class GMMParams:
    """Parameters of a Gaussian mixture with full covariances."""

    weights: FloatArray  # (K,)
    means: FloatArray  # (K, d)
    covariances: FloatArray  # (K, d, d)

    @property
    def n_components(self) -> int:
        return int(self.weights.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.means.shape[1])

    def as_dict(self) -> dict[str, list]:
        return {
            "weights": self.weights.tolist(),
            "means": self.means.tolist(),
            "covariances": self.covariances.tolist(),
        }


def stats_size(n_components: int, n_features: int) -> int:
    """Length of the statistics vector of :func:`local_statistics`."""
    k, d = n_components, n_features
    return k + k * d + k * d * (d + 1) // 2 + 1


def precision_cholesky(covariances: FloatArray) -> FloatArray:
    """Cholesky factors of the precision matrices, as in scikit-learn.

    Raises
    ------
    ProtocolError
        When a covariance is not positive definite (a collapsed component).
    """
    k, d, _ = covariances.shape
    prec_chol = np.empty_like(covariances)
    for j in range(k):
        try:
            cov_chol = np.linalg.cholesky(covariances[j])
        except np.linalg.LinAlgError:
            raise ProtocolError(
                f"covariance of component {j} is not positive definite (the component collapsed "
                "onto too few points): decrease n_components or increase reg_covar"
            ) from None
        prec_chol[j] = _solve_lower_identity(cov_chol)
    return prec_chol


def _solve_lower_identity(lower: FloatArray) -> FloatArray:
    from scipy.linalg import solve_triangular

    return solve_triangular(lower, np.eye(lower.shape[0]), lower=True).T


def estimate_log_prob(X: FloatArray, means: FloatArray, prec_chol: FloatArray) -> FloatArray:
    """log N(x_n | mu_k, Sigma_k) for every row and component, shape (n, K)."""
    n, d = X.shape
    k = means.shape[0]
    log_det = np.sum(np.log(np.diagonal(prec_chol, axis1=1, axis2=2)), axis=1)
    log_prob = np.empty((n, k))
    for j in range(k):
        y = (X - means[j]) @ prec_chol[j]
        log_prob[:, j] = np.sum(np.square(y), axis=1)
    return -0.5 * (d * np.log(2 * np.pi) + log_prob) + log_det


def e_step(X: FloatArray, params: GMMParams, prec_chol: FloatArray | None = None) -> tuple[FloatArray, FloatArray]:
    """Responsibilities in log space.

    Returns
    -------
    log_resp : (n, K) array
        log r_nk, normalised with a log-sum-exp.
    log_prob_norm : (n,) array
        log p(x_n) under the mixture.
    """
    if prec_chol is None:
        prec_chol = precision_cholesky(params.covariances)
    weighted = estimate_log_prob(X, params.means, prec_chol) + np.log(params.weights)
    log_prob_norm = logsumexp(weighted, axis=1)
    return weighted - log_prob_norm[:, None], log_prob_norm


def local_statistics(X: FloatArray, params: GMMParams, prec_chol: FloatArray | None = None) -> FloatArray:
    """E-step on one node's rows: the flat statistics vector described in the module docstring."""
    log_resp, log_prob_norm = e_step(X, params, prec_chol)
    resp = np.exp(log_resp)
    k, d = params.means.shape
    iu = np.triu_indices(d)
    a = resp.sum(axis=0)
    b = np.empty((k, d))
    c = np.empty((k, iu[0].size))
    for j in range(k):
        diff = X - params.means[j]
        weighted = resp[:, j, None] * diff
        b[j] = weighted.sum(axis=0)
        c[j] = (weighted.T @ diff)[iu]
    return np.concatenate([a, b.ravel(), c.ravel(), [log_prob_norm.sum()]])


def unpack_statistics(stats: FloatArray, n_components: int, n_features: int) -> tuple[FloatArray, FloatArray, FloatArray, float]:
    """Split a statistics vector into ``a`` (K,), ``b`` (K, d), ``C`` (K, d, d) and ``ll``."""
    k, d = n_components, n_features
    if stats.shape != (stats_size(k, d),):
        raise ProtocolError(f"statistics vector has shape {stats.shape}, expected ({stats_size(k, d)},)")
    a = stats[:k]
    b = stats[k : k + k * d].reshape(k, d)
    tri = stats[k + k * d : -1].reshape(k, -1)
    c = np.empty((k, d, d))
    iu = np.triu_indices(d)
    for j in range(k):
        c[j][iu] = tri[j]
        c[j].T[iu] = tri[j]
    return a, b, c, float(stats[-1])


def m_step(stats: FloatArray, means: FloatArray, reg_covar: float, *, iteration: int | None = None) -> tuple[GMMParams, float]:
    """New parameters from network-averaged (or summed) statistics, eq. (5)-(7) of Li et al. 2022.

    Parameters
    ----------
    stats : (P,) array
        Average (or sum) over nodes of :func:`local_statistics`, computed at ``means``.
    means : (K, d) array
        The means the statistics were centred at (the current ones).
    reg_covar : float
        Added to every covariance diagonal, as in scikit-learn.

    Returns
    -------
    params : GMMParams
    mean_loglik : float
        Average log-likelihood per row of the parameters the statistics were computed with.
    """
    k, d = means.shape
    a, b, c, ll = unpack_statistics(stats, k, d)
    where = f" in EM iteration {iteration}" if iteration is not None else ""
    if not np.all(np.isfinite(stats)):
        raise ProtocolError(f"non-finite sufficient statistics{where}")
    total = a.sum()
    small = a <= 10 * np.finfo(float).eps * total
    if np.any(small):
        j = int(np.flatnonzero(small)[0])
        raise ProtocolError(
            f"component {j} collapsed (weight {a[j] / total:.3g}){where}: "
            "decrease n_components, change the init or increase reg_covar"
        )
    delta = b / a[:, None]
    covariances = c / a[:, None, None] - delta[:, :, None] * delta[:, None, :]
    covariances += reg_covar * np.eye(d)
    params = GMMParams(weights=a / total, means=means + delta, covariances=covariances)
    return params, float(ll / total)


# --- initialisation -----------------------------------------------------------------------------


def init_statistics(X: FloatArray) -> FloatArray:
    """What a node contributes to the private initialisation: [n, sum x, sum x x^T (upper)]."""
    d = X.shape[1]
    iu = np.triu_indices(d)
    return np.concatenate([[float(X.shape[0])], X.sum(axis=0), (X.T @ X)[iu]])


def init_stats_size(n_features: int) -> int:
    return 1 + n_features + n_features * (n_features + 1) // 2


def _quantise(values: FloatArray, digits: int = 6) -> FloatArray:
    return np.array([float(f"{v:.{digits - 1}e}") for v in np.ravel(values)]).reshape(np.shape(values))


def init_from_global(stats: FloatArray, n_components: int, seed: int) -> GMMParams:
    """Initial parameters from privately averaged global moments and a public seed.

    The global mean and covariance come out of the private protocol (see
    :func:`init_statistics`); they are rounded to 6 significant digits, so that every
    protocol, exact or iterative, starts from bit-identical parameters (consensus errors are
    far below that precision).  Means are drawn as ``mean + L u_k`` with ``L L^T`` the global
    covariance and ``u_k ~ N(0, I)`` from ``seed``; weights are uniform and every component
    starts with the global covariance.
    """
    d = int(round((-3 + np.sqrt(9 - 8 * (1 - stats.shape[0]))) / 2))
    if init_stats_size(d) != stats.shape[0]:
        raise ProtocolError(f"init statistics vector has length {stats.shape[0]}, not 1 + d + d(d+1)/2")
    count = stats[0]
    mean = stats[1 : 1 + d] / count
    second = np.empty((d, d))
    iu = np.triu_indices(d)
    second[iu] = stats[1 + d :] / count
    second.T[iu] = stats[1 + d :] / count
    cov = _quantise(second - np.outer(mean, mean))
    mean = _quantise(mean)
    cov = (cov + cov.T) / 2
    try:
        chol = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        raise ProtocolError("the global covariance of the data is singular: drop constant or duplicate columns") from None
    u = np.random.default_rng(seed).standard_normal((n_components, d))
    means = mean + u @ chol.T
    return GMMParams(
        weights=np.full(n_components, 1.0 / n_components),
        means=means,
        covariances=np.repeat(cov[None], n_components, axis=0),
    )


def params_from_dict(init: dict, n_components: int, n_features: int) -> GMMParams:
    """Validate a user-given ``{"weights", "means", "covariances"}`` init."""
    from p2pem.errors import ConfigError

    unknown = set(init) - {"weights", "means", "covariances"}
    if unknown:
        raise ConfigError(f"unknown init key(s) {sorted(unknown)}: expected weights, means, covariances")
    missing = {"weights", "means", "covariances"} - set(init)
    if missing:
        raise ConfigError(f"init is missing {sorted(missing)}")
    try:
        w = np.asarray(init["weights"], dtype=float)
        m = np.asarray(init["means"], dtype=float)
        c = np.asarray(init["covariances"], dtype=float)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"init values must be numeric arrays: {exc}") from None
    k, d = n_components, n_features
    for name, arr, shape in (("weights", w, (k,)), ("means", m, (k, d)), ("covariances", c, (k, d, d))):
        if arr.shape != shape:
            raise ConfigError(f"init {name} has shape {arr.shape}, expected {shape}")
        if not np.all(np.isfinite(arr)):
            raise ConfigError(f"init {name} has non-finite values")
    if np.any(w <= 0) or abs(w.sum() - 1) > 1e-8:
        raise ConfigError("init weights must be positive and sum to 1")
    params = GMMParams(weights=w, means=m, covariances=c)
    try:
        precision_cholesky(c)
    except ProtocolError:
        raise ConfigError("init covariances must be symmetric positive definite") from None
    return params


# --- the reference ------------------------------------------------------------------------------


def mean_loglik(X: FloatArray, params: GMMParams) -> float:
    """Average log-likelihood per row."""
    return float(e_step(X, params)[1].mean())
