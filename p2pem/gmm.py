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

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from p2pem.errors import InitError, ModelError, ProtocolError

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
    """Cholesky factors of the precision matrices, as in scikit-learn, for any batch shape.

    ``covariances`` has shape (..., d, d); the result P satisfies P P^T = Sigma^-1 with P upper
    triangular.  Every matrix goes through the same LAPACK calls whatever the batch size, so a
    node computing its own factors gets the same bits as the batch engine computing all nodes.

    Raises
    ------
    ModelError
        When a covariance is not positive definite (a collapsed component).
    """
    try:
        cov_chol = np.linalg.cholesky(covariances)
    except np.linalg.LinAlgError:
        bad = [
            idx
            for idx in np.ndindex(covariances.shape[:-2])
            if not np.all(np.linalg.eigvalsh(covariances[idx]) > 0)
        ]
        j = bad[0][-1] if bad and bad[0] else 0
        raise ModelError(
            f"covariance of component {j} is not positive definite (the component collapsed "
            "onto too few points): decrease n_components or increase reg_covar"
        ) from None
    return np.swapaxes(np.linalg.inv(cov_chol), -1, -2)


def sum_in_order(values: list[FloatArray]) -> FloatArray:
    """Sum a short list of equally shaped arrays left to right (fixed rounding order)."""
    acc = values[0]
    for v in values[1:]:
        acc = acc + v
    return acc


def logsumexp_in_order(values: list[FloatArray]) -> FloatArray:
    """log sum_k exp(values[k]) elementwise, stable, with the sum in list order (batch invariant)."""
    top = values[0]
    for v in values[1:]:
        top = np.maximum(top, v)
    return top + np.log(sum_in_order([np.exp(v - top) for v in values]))


def log_det_precision(prec_chol: FloatArray) -> FloatArray:
    """log det of the precision Cholesky factors, shape (...)."""
    d = prec_chol.shape[-1]
    return sum_in_order([np.log(np.ascontiguousarray(prec_chol[..., j, j])) for j in range(d)])


def batch_statistics(
    X: FloatArray,
    offsets: npt.NDArray[np.intp],
    weights: FloatArray,
    means: FloatArray,
    prec_chol: FloatArray,
) -> FloatArray:
    """E-step statistics of many nodes at once, each with its own parameters.

    Parameters
    ----------
    X : (R, d) array
        All nodes' rows, node after node.
    offsets : (N,) int array
        Index of each node's first row (strictly increasing, starting at 0).
    weights : (N, K), means : (N, K, d), prec_chol : (N, K, d, d)
        Every node's current parameters.

    Returns
    -------
    (N, P) array
        Row i is node i's statistics vector (module docstring).

    Notes
    -----
    Only elementwise operations, left-to-right sums over K and d, and ``np.add.reduceat``
    over each node's rows: no BLAS call, whose rounding could depend on the batch size.  A
    node calling this with its own rows (N = 1) therefore gets exactly the bits the
    vectorised simulator computes for it in a batch; the tests check that.  Many rows are
    processed in blocks of whole nodes of about :data:`ROWS_PER_BLOCK` rows, so the
    temporaries stay in cache (the same operations on the same rows: the same bits).
    """
    return in_node_blocks(_batch_statistics_block, X, offsets, weights, means, prec_chol)


#: Rows per block of :func:`in_node_blocks` (whole nodes; a block's temporaries fit in cache).
ROWS_PER_BLOCK = 1 << 15


def in_node_blocks(block: Callable[..., FloatArray], X: FloatArray, offsets: npt.NDArray[np.intp], *per_node: FloatArray) -> FloatArray:
    """``block(X, offsets, *per_node)`` over blocks of whole nodes of about :data:`ROWS_PER_BLOCK` rows.

    ``per_node`` arrays have a leading node axis.  The same operations on the same rows give
    the same bits, so the result is the one call on everything would give, with the
    temporaries of one block in cache.
    """
    n_rows = X.shape[0]
    if n_rows <= ROWS_PER_BLOCK:
        return block(X, offsets, *per_node)
    # block boundaries at node starts, every ROWS_PER_BLOCK rows or so
    starts = np.unique(np.searchsorted(offsets, np.arange(0, n_rows, ROWS_PER_BLOCK), side="right") - 1)
    bounds = [*starts.tolist(), len(offsets)]
    out = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        lo, hi = int(offsets[a]), (int(offsets[b]) if b < len(offsets) else n_rows)
        out.append(block(X[lo:hi], offsets[a:b] - lo, *(arr[a:b] for arr in per_node)))
    return np.concatenate(out, axis=0)


def _batch_statistics_block(
    X: FloatArray,
    offsets: npt.NDArray[np.intp],
    weights: FloatArray,
    means: FloatArray,
    prec_chol: FloatArray,
) -> FloatArray:
    n_rows, d = X.shape
    n_nodes, k = weights.shape
    sizes = np.diff(np.append(offsets, n_rows))
    node_of_row = np.repeat(np.arange(n_nodes), sizes)
    log_w = np.log(weights) + log_det_precision(prec_chol)  # (N, K)
    const = d * np.log(2 * np.pi)
    diffs, log_probs = [], []
    for j in range(k):
        diff = X - means[node_of_row, j]
        chol = prec_chol[node_of_row, j]
        maha = []
        for col in range(d):
            y = sum_in_order([diff[:, row] * chol[:, row, col] for row in range(d)])
            maha.append(y * y)
        log_probs.append(-0.5 * (const + sum_in_order(maha)) + log_w[node_of_row, j])
        diffs.append(diff)
    norm = logsumexp_in_order(log_probs)
    iu = np.triu_indices(d)
    columns = []
    resps = [np.exp(lp - norm) for lp in log_probs]
    columns.extend(resps)
    for j in range(k):
        columns.extend(resps[j] * diffs[j][:, a] for a in range(d))
    for j in range(k):
        columns.extend((resps[j] * diffs[j][:, a]) * diffs[j][:, b] for a, b in zip(*iu, strict=True))
    columns.append(norm)
    per_row = np.ascontiguousarray(np.stack(columns, axis=1))
    return np.add.reduceat(per_row, offsets, axis=0)


def local_statistics(X: FloatArray, params: GMMParams, prec_chol: FloatArray | None = None) -> FloatArray:
    """E-step on one node's rows: its statistics vector (a batch of one)."""
    if prec_chol is None:
        prec_chol = precision_cholesky(params.covariances)
    return batch_statistics(X, np.zeros(1, dtype=np.intp), params.weights[None], params.means[None], prec_chol[None])[0]


def e_step(X: FloatArray, params: GMMParams) -> tuple[FloatArray, FloatArray]:
    """Responsibilities in log space (reference implementation, used for scoring).

    Returns
    -------
    log_resp : (n, K) array
    log_prob_norm : (n,) array
        log p(x_n) under the mixture.
    """
    from scipy.special import logsumexp  # here: start-up time (a node process never scores rows, and never loads SciPy)

    prec_chol = precision_cholesky(params.covariances)
    k = params.n_components
    log_prob = np.empty((X.shape[0], k))
    for j in range(k):
        y = (X - params.means[j]) @ prec_chol[j]
        log_prob[:, j] = -0.5 * (X.shape[1] * np.log(2 * np.pi) + np.sum(y * y, axis=1))
    weighted = log_prob + np.log(params.weights) + log_det_precision(prec_chol)
    log_prob_norm = logsumexp(weighted, axis=1)
    return weighted - log_prob_norm[:, None], log_prob_norm


def unpack_statistics(stats: FloatArray, n_components: int, n_features: int) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Split (..., P) statistics into ``a`` (..., K), ``b`` (..., K, d), ``C`` (..., K, d, d), ``ll`` (...)."""
    k, d = n_components, n_features
    if stats.shape[-1] != stats_size(k, d):
        raise ProtocolError(f"statistics vector has length {stats.shape[-1]}, expected {stats_size(k, d)}")
    lead = stats.shape[:-1]
    a = stats[..., :k]
    b = stats[..., k : k + k * d].reshape(*lead, k, d)
    tri = stats[..., k + k * d : -1].reshape(*lead, k, -1)
    c = np.empty((*lead, k, d, d))
    iu = np.triu_indices(d)
    c[..., iu[0], iu[1]] = tri
    c[..., iu[1], iu[0]] = tri
    return a, b, c, stats[..., -1]


def total_count(stats: FloatArray, n_components: int) -> FloatArray:
    """(N,) sum of the soft counts ``a_k`` of (N, P) statistics, left to right (the rounding
    order of :func:`batch_m_step`)."""
    return sum_in_order([stats[:, j] for j in range(n_components)])


def batch_m_step(stats: FloatArray, means: FloatArray, reg_covar: float, *, iteration: int | None = None):
    """M-step of many nodes at once, eq. (5)-(7) of Li et al. 2022.

    Parameters
    ----------
    stats : (N, P) array
        Every node's network average (or sum) of the statistics, computed at ``means``.
    means : (N, K, d) array
        The means the statistics were centred at (each node's current ones).
    reg_covar : float

    Returns
    -------
    weights (N, K), means (N, K, d), covariances (N, K, d, d), mean_loglik (N,)
        ``mean_loglik`` is the average log-likelihood per row of the parameters the
        statistics were computed with.
    """
    n, k, d = means.shape
    a, b, c, ll = unpack_statistics(stats, k, d)
    where = f" in EM iteration {iteration}" if iteration is not None else ""
    if not np.all(np.isfinite(stats)):
        raise ModelError(f"non-finite sufficient statistics{where}")
    total = sum_in_order([a[:, j] for j in range(k)])
    small = a <= (10 * np.finfo(float).eps) * total[:, None]
    if np.any(small):
        node, j = (int(v[0]) for v in np.nonzero(small))
        raise ModelError(
            f"component {j} collapsed (weight {a[node, j] / total[node]:.3g}){where}: "
            "decrease n_components, change the init or increase reg_covar"
        )
    delta = b / a[..., None]
    covariances = c / a[..., None, None] - delta[..., :, None] * delta[..., None, :]
    covariances = covariances + reg_covar * np.eye(d)
    return a / total[:, None], means + delta, covariances, ll / total


def m_step(stats: FloatArray, means: FloatArray, reg_covar: float, *, iteration: int | None = None) -> tuple[GMMParams, float]:
    """Single-node form of :func:`batch_m_step`."""
    w, m, c, ll = batch_m_step(stats[None], means[None], reg_covar, iteration=iteration)
    return GMMParams(weights=w[0], means=m[0], covariances=c[0]), float(ll[0])


# --- initialisation -----------------------------------------------------------------------------


def init_statistics(X: FloatArray, offsets: npt.NDArray[np.intp] | None = None) -> FloatArray:
    """What nodes contribute to the private initialisation: [n, sum x, sum x x^T (upper)].

    With ``offsets`` (first row of each node) it returns one row per node, else one vector.
    """
    n_rows, d = X.shape
    iu = np.triu_indices(d)
    columns = [np.ones(n_rows)] + [X[:, a] for a in range(d)] + [X[:, a] * X[:, b] for a, b in zip(*iu, strict=True)]
    per_row = np.ascontiguousarray(np.stack(columns, axis=1))
    out = np.add.reduceat(per_row, np.zeros(1, dtype=np.intp) if offsets is None else offsets, axis=0)
    return out[0] if offsets is None else out


def init_stats_size(n_features: int) -> int:
    return 1 + n_features + n_features * (n_features + 1) // 2


def round_significant(value: float, digits: int = 6) -> float:
    """``value`` rounded to ``digits`` significant (decimal) digits.

    Public numbers every node derives itself are rounded so, so that last-bit differences
    (consensus errors, another host's eigensolver) do not make them differ: the private
    initialisation here, the step parameters of :mod:`p2pem.protocols.pdmm`.
    """
    return float(f"{value:.{digits - 1}e}")


def quantise_columns(values: FloatArray, digits: int = 6) -> FloatArray:
    """Each entry of the (n, k) array rounded to ``digits`` significant digits (decimal).

    Rounding is monotonic, so a column whose smallest and largest entries round to the same
    nonzero value rounds to it everywhere: two conversions instead of n.  That is the
    common case here, where the rows are one average as n nodes hold it (equal to 1e-12).
    Other columns are converted entry by entry.
    """
    out = np.empty_like(values)
    for j in range(values.shape[1]):
        col = values[:, j]
        lo, hi = round_significant(float(col.min()), digits), round_significant(float(col.max()), digits)
        if lo == hi and lo != 0.0:  # (a zero may carry either sign: entry by entry)
            out[:, j] = lo
        else:
            out[:, j] = [round_significant(float(v), digits) for v in col]
    return out


def init_from_global(stats: FloatArray, n_components: int, seed: int) -> GMMParams:
    """Initial parameters from privately averaged global moments and a public seed.

    The global mean and covariance come out of the private protocol (see
    :func:`init_statistics`); they are rounded to 6 significant digits, so that every
    protocol, exact or iterative, starts from bit-identical parameters (consensus errors are
    far below that precision).  Means are drawn as ``mean + L u_k`` with ``L L^T`` the global
    covariance and ``u_k ~ N(0, I)`` from ``seed``; weights are uniform and every component
    starts with the global covariance.  One row of :func:`init_from_global_batch`.
    """
    w, m, c = init_from_global_batch(np.asarray(stats, dtype=float)[None], n_components, seed)
    return GMMParams(weights=w[0], means=m[0], covariances=c[0])


def init_from_global_batch(stats: FloatArray, n_components: int, seed: int) -> tuple[FloatArray, FloatArray, FloatArray]:
    """:func:`init_from_global` for every row of the (n, P) array ``stats`` at once.

    Returns (weights (n, K), means (n, K, d), covariances (n, K, d, d)).  The moments are
    computed elementwise for all rows; the Cholesky factor and the drawn means only once per
    distinct rounded (mean, covariance), which after the rounding is nearly always one: at
    10^6 nodes this takes seconds where a loop over the rows took a minute.  Each row's
    result is bit for bit what the row alone gives.
    """
    n, size = stats.shape
    d = int(round((-3 + np.sqrt(9 - 8 * (1 - size))) / 2))
    if init_stats_size(d) != size:
        raise ProtocolError(f"init statistics vector has length {size}, not 1 + d + d(d+1)/2")
    count = stats[:, :1]
    mean = stats[:, 1 : 1 + d] / count
    upper = stats[:, 1 + d :] / count
    second = np.empty((n, d, d))
    iu = np.triu_indices(d)
    second[:, iu[0], iu[1]] = upper
    second[:, iu[1], iu[0]] = upper
    cov = quantise_columns((second - mean[:, :, None] * mean[:, None, :]).reshape(n, d * d)).reshape(n, d, d)
    mean = quantise_columns(mean)
    cov = (cov + cov.transpose(0, 2, 1)) / 2
    u = np.random.default_rng(seed).standard_normal((n_components, d))
    # distinct rows by their bits (a -0.0 is not merged with 0.0)
    bits, inverse = np.unique(np.concatenate([mean, cov.reshape(n, d * d)], axis=1).view(np.int64), axis=0, return_inverse=True)
    keys = bits.view(np.float64)
    drawn = np.empty((len(keys), n_components, d))
    for k, key in enumerate(keys):
        try:
            chol = np.linalg.cholesky(key[d:].reshape(d, d))
        except np.linalg.LinAlgError:
            raise ModelError("the global covariance of the data is singular: drop constant or duplicate columns") from None
        drawn[k] = key[:d] + u @ chol.T
    weights = np.full((n, n_components), 1.0 / n_components)
    covariances = np.broadcast_to(cov[:, None], (n, n_components, d, d)).copy()
    return weights, drawn[np.ravel(inverse)], covariances


def read_model_arrays(
    init: Mapping[str, Any], layout: tuple[tuple[str, int], ...], n_components: int, n_features: int | None = None, *, family: str = ""
) -> dict[str, FloatArray]:
    """The checks every family's validator of a user-given model shares.

    ``layout`` lists the model's arrays as ``(key, ndim)`` (a family's ``param_keys``): the
    first is the weights (K,), positive and summing to 1 (within 1e-8); the first 2-D array
    (``means``, ``locations``) gives d; every other 2-D array must be (K, d); every 3-D
    array (K, d, d), each matrix symmetric positive definite.

    Returns
    -------
    dict of read-only float64 copies by key.

    Raises
    ------
    p2pem.errors.InitError
        Naming the entry at fault: unknown or missing key, not an array of finite numbers of
        its dimension, wrong shape, weights, a matrix not symmetric positive definite.
    """
    keys = [key for key, _ in layout]
    unknown = [key for key in init if key not in keys]
    if unknown:
        noun = f"a {family} init key" if family else "an init key"
        raise InitError(str(unknown[0]), f"is not {noun} (known: {', '.join(keys)})")
    arrays: dict[str, FloatArray] = {}
    for key, ndim in layout:
        if key not in init:
            raise InitError(key, "is missing")
        try:
            array = np.array(init[key], dtype=np.float64)
        except (TypeError, ValueError):
            raise InitError(key, f"must be a {ndim}-D array of numbers") from None
        if array.ndim != ndim or array.size == 0:
            raise InitError(key, f"must be a non-empty {ndim}-D array of numbers, got shape {array.shape}")
        if not np.all(np.isfinite(array)):
            raise InitError(key, "holds a non-finite value")
        array.flags.writeable = False
        arrays[key] = array
    k = n_components
    weights = arrays[keys[0]]
    if weights.shape != (k,):
        raise InitError(keys[0], f"must hold {k} weights (n_components), got {weights.shape[0]}")
    if np.any(weights <= 0) or abs(weights.sum() - 1.0) > 1e-8:
        raise InitError(keys[0], f"must be positive and sum to 1, got {weights.tolist()}")
    first = next(key for key, ndim in layout if ndim == 2)
    if arrays[first].shape[0] != k:
        raise InitError(first, f"must hold {k} {first} (n_components), got {arrays[first].shape[0]}")
    d = arrays[first].shape[1]
    if n_features is not None and d != n_features:
        raise InitError(first, f"has {d} columns but the data will have {n_features} features")
    for key, ndim in layout:
        shape = (k, d) if ndim == 2 else (k, d, d) if ndim == 3 else arrays[key].shape
        if arrays[key].shape != shape:
            raise InitError(key, f"must have shape {shape}, got {arrays[key].shape}")
        if ndim == 3:
            for j, matrix in enumerate(arrays[key]):
                if not np.allclose(matrix, matrix.T, rtol=1e-10, atol=1e-12):
                    raise InitError(f"{key}[{j}]", "is not symmetric")
                try:
                    np.linalg.cholesky(matrix)
                except np.linalg.LinAlgError:
                    raise InitError(f"{key}[{j}]", "is not positive definite") from None
    return arrays


#: Keys of an explicit init, in the order of :class:`GMMParams`.
INIT_KEYS = ("weights", "means", "covariances")


def params_from_dict(init: Mapping[str, Any], n_components: int, n_features: int | None = None) -> GMMParams:
    """Validate user-given initial parameters ``{"weights", "means", "covariances"}``.

    The one validator of an explicit init: scenario files (``[em.init]``), rosters and
    ``DistributedGMM(init=...)`` all call it.  Each error names the entry at fault
    (:attr:`InitError.key <p2pem.errors.InitError>`), so a file reader can report the file and
    the dotted key.

    Parameters
    ----------
    init : mapping
        ``weights`` (k,), ``means`` (k, d), ``covariances`` (k, d, d): nested sequences or
        arrays of finite numbers.
    n_components : int
        k.
    n_features : int, optional
        Required d (the data's width); by default the means' own width.

    Returns
    -------
    GMMParams
        Read-only float64 copies (the caller's arrays are not touched).

    Raises
    ------
    p2pem.errors.InitError
        A key is unknown or missing, an array has the wrong shape or a non-finite value,
        the weights are not positive or do not sum to 1 (within 1e-8), or a covariance is not
        symmetric positive definite.
    """
    arrays = read_model_arrays(init, tuple(zip(INIT_KEYS, (1, 2, 3), strict=True)), n_components, n_features)
    weights, means, covariances = (arrays[key] for key in INIT_KEYS)
    return GMMParams(weights=weights, means=means, covariances=covariances)


# --- the reference ------------------------------------------------------------------------------


def mean_loglik(X: FloatArray, params: GMMParams) -> float:
    """Average log-likelihood per row."""
    return float(e_step(X, params)[1].mean())


def relative_error(a, b) -> float:
    """max|a - b| / max|b|: the one relative-difference formula p2pem reports everywhere.

    ``b`` is the reference; when it is all zeros the absolute difference max|a - b| is
    returned instead of a division by zero.  (Also importable from :mod:`p2pem.simulate`.)
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.max(np.abs(a - b)) / (float(np.max(np.abs(b))) or 1.0))
