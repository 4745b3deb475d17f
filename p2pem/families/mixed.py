"""The mixed-type family: mixtures whose components hold columns of any type, independent given the component.

Component k has a weight pi_k and, per column, a Gaussian (a continuous column) or a
categorical distribution (a discrete column, binary included); given the component the
columns are independent: the latent class model of mixed data (Everitt 1988; McLachlan &
Peel, *Finite Mixture Models*, 2000, Sec. 8.5; Hunt & Jorgensen 2003), the model of
Jälkö, Lagerspetz, Haukka, Tarkoma, Honkela & Kaski ("Privacy-preserving data sharing via
probabilistic modelling", *Patterns* 2021, twinify).  With ``covariance = "full"`` the
continuous block of a component is one multivariate Gaussian instead of independent ones
(the categorical columns stay independent of it and of each other).

Rows are float vectors: the ``n_continuous`` continuous columns first, then one column per
categorical column holding its code ``0 .. C_j - 1`` as a float -- the continuous block and
the code block of a :class:`p2pem.tabular.Table` side by side.

Statistics layout (sums over a node's rows n, K components, p continuous columns, S
counted category cells), centred at the current means ``mu`` as in :mod:`p2pem.gmm`:

==========  ====================  ===============================================
slice       shape                 meaning
==========  ====================  ===============================================
``a``       (K,)                  r_nk                              (soft counts)
``b``       (K, p)                r_nk (x_n - mu_k)
``C``       (K, p) or (K, q)      r_nk (x_n - mu_k)^2, or upper (x - mu)(x - mu)^T
                                  (q = p (p + 1) / 2, ``covariance = "full"``)
``N``       (K, S)                r_nk [code_nj = c]                (category counts)
``ll``      (1,)                  log p(x_n)
==========  ====================  ===============================================

The category cells are the categorical columns' categories, column after column, less the
stratifying column's (below).  The M-step needs only ratios of these sums (so averages and
sums give the same model), which is the standard EM for this model:
``pi_k = a_k / sum a``; ``mu_k += b_k / a_k``; variances ``C_k / a_k - (b_k / a_k)^2 +
reg_covar`` (or the full covariance as :func:`p2pem.gmm.batch_m_step`); and the category
probabilities ``theta_kjc = N_kjc / sum_c N_kjc`` (negative sums, which only consensus
error or privacy noise can make, clipped at 0 first).

Stratification by a public attribute
------------------------------------
``stratify = j`` (an index among the categorical columns) fits one mixture per category of
that column (Jälkö et al.'s "prior knowledge"): the K components form ``C_j`` consecutive
groups of ``K / C_j``, and group g's components give that column probability 1 to category
g.  So a row belongs only to components of its own stratum, the column's counts are not
aggregated (they equal the group's soft counts, which the weights carry), and every
stratum's mixture is fitted in the same single EM run, with every protocol.  The strata's
sizes are then released through the weights; with ``strata_weights`` (public shares,
declared so) the weights of group g are renormalised to sum to its share instead.

Batch invariance: the E-step uses only elementwise operations, sums left to right
(:func:`p2pem.gmm.sum_in_order`), ``np.add.reduceat`` over a node's rows and
``np.bincount`` (which adds each bin's weights in row order), so a node alone computes the
bits the vectorised engine computes for it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

import p2pem.gmm as gmm
from p2pem.errors import ConfigError, DataError, InitError, ProtocolError
from p2pem.families.base import FloatArray, IntpArray, MixtureFamily

__all__ = ["COVARIANCES", "MixedBatch", "MixedFamily", "MixedParams"]

#: The forms of a component's continuous block.
COVARIANCES = ("diag", "full")
#: Spread of the initial category probabilities around the global frequencies: component k
#: starts at theta_kc proportional to freq_c exp(INIT_SPREAD z_kc), z ~ N(0, 1) from the public seed.
INIT_SPREAD = 1.0
_LOG_2PI = math.log(2 * math.pi)


@dataclass(frozen=True, eq=False)
class MixedParams:
    """One mixed-type mixture.

    ``weights`` (K,), ``means`` (K, p), ``covariances`` (K, p) variances (``diag``, as
    scikit-learn's ``covariance_type="diag"``) or (K, p, p) (``full``), ``probabilities``
    (K, S): each categorical column's category probabilities, column after column (every
    category of every categorical column, the stratifying column's included).
    """

    weights: FloatArray
    means: FloatArray
    covariances: FloatArray
    probabilities: FloatArray

    @property
    def n_components(self) -> int:
        return int(self.weights.shape[0])


@dataclass(frozen=True, eq=False)
class MixedBatch:
    """N nodes' mixed-type mixtures: every array of :class:`MixedParams` with a leading node axis."""

    weights: FloatArray
    means: FloatArray
    covariances: FloatArray
    probabilities: FloatArray

    @property
    def n_nodes(self) -> int:
        return int(self.weights.shape[0])

    def node(self, i: int) -> MixedParams:
        return MixedParams(self.weights[i], self.means[i], self.covariances[i], self.probabilities[i])

    @cached_property
    def log_probabilities(self) -> FloatArray:
        """log of ``probabilities`` (N, K, S); a probability 0 gives -inf."""
        with np.errstate(divide="ignore"):
            return np.log(self.probabilities)

    @cached_property
    def diag_precisions(self) -> FloatArray:
        """1 / variances (N, K, p) (``diag``)."""
        return 1.0 / self.covariances

    @cached_property
    def prec_chol(self) -> FloatArray:
        """Cholesky factors of the precisions (N, K, p, p) (``full``; :func:`p2pem.gmm.precision_cholesky`)."""
        return gmm.precision_cholesky(self.covariances)


@dataclass(frozen=True)
class MixedFamily(MixtureFamily[MixedParams, MixedBatch]):
    """``mixed``: mixtures of independent Gaussian and categorical columns (module docstring).

    All of its fields are public configuration every node shares: the column types and
    category counts of a public schema (:meth:`p2pem.families.encoding.TableEncoding.family`
    builds it from one), the covariance form and the stratification.

    Parameters
    ----------
    n_continuous : int
        p, the continuous columns (the first p entries of a row).
    n_categories : tuple of int
        C_j of every categorical column (the entries after them, codes 0 .. C_j - 1).
    covariance : {"diag", "full"}
        Independent Gaussians per continuous column, or one full covariance over them.
    stratify : int or None
        Index (among the categorical columns) of the public attribute to stratify by:
        one mixture of ``n_components / C_j`` components per category.
    strata_weights : tuple of float or None
        Public shares of the strata (declared public, summing to 1); None releases them
        through the weights.
    """

    n_continuous: int = 0
    n_categories: tuple[int, ...] = ()
    covariance: str = "diag"
    stratify: int | None = None
    strata_weights: tuple[float, ...] | None = None
    name: str = field(init=False, default="mixed")

    def __post_init__(self) -> None:
        p, cats = self.n_continuous, self.n_categories
        if isinstance(p, bool) or not isinstance(p, int) or p < 0:
            raise ConfigError(f"mixed family: n_continuous must be an integer >= 0, got {p!r}")
        if not isinstance(cats, tuple) or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in cats):
            raise ConfigError(f"mixed family: n_categories must be a tuple of integers >= 1, got {cats!r}")
        if p + len(cats) == 0:
            raise ConfigError("mixed family: no columns (n_continuous = 0 and no categorical column)")
        if self.covariance not in COVARIANCES:
            raise ConfigError(f"mixed family: covariance must be one of {list(COVARIANCES)}, got {self.covariance!r}")
        if self.stratify is not None:
            if isinstance(self.stratify, bool) or not isinstance(self.stratify, int) or not 0 <= self.stratify < len(cats):
                raise ConfigError(f"mixed family: stratify must index one of the {len(cats)} categorical columns, got {self.stratify!r}")
        if self.strata_weights is not None:
            w = self.strata_weights
            if self.stratify is None:
                raise ConfigError("mixed family: strata_weights need a stratifying column (stratify)")
            if not isinstance(w, tuple) or len(w) != cats[self.stratify]:
                raise ConfigError(f"mixed family: strata_weights must hold one share per stratum ({cats[self.stratify]}), got {w!r}")
            if any(not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0) for v in w) or abs(sum(w) - 1) > 1e-9:
                raise ConfigError(f"mixed family: strata_weights must be positive and sum to 1, got {list(w)}")

    # -- layout ------------------------------------------------------------------------------

    @property
    def param_keys(self) -> tuple[tuple[str, int], ...]:  # type: ignore[override]  # the covariances' ndim follows the configuration
        return (("weights", 1), ("means", 2), ("covariances", 2 if self.covariance == "diag" else 3), ("probabilities", 2))

    @property
    def n_features(self) -> int:
        """Columns of a row: the continuous ones, then one per categorical column."""
        return self.n_continuous + len(self.n_categories)

    @property
    def offsets(self) -> IntpArray:
        """Index of each categorical column's first category in ``probabilities`` (S cells in all)."""
        return np.concatenate([[0], np.cumsum(self.n_categories)[:-1]]).astype(np.intp) if self.n_categories else np.zeros(0, np.intp)

    @property
    def counted(self) -> tuple[int, ...]:
        """The categorical columns whose counts are aggregated (all but the stratifying one)."""
        return tuple(j for j in range(len(self.n_categories)) if j != self.stratify)

    @cached_property
    def counted_cells(self) -> IntpArray:
        """Indices (into the S probability cells) of the counted cells, in statistics order."""
        offsets = self.offsets
        return np.concatenate([np.arange(offsets[j], offsets[j] + self.n_categories[j]) for j in self.counted] or [np.zeros(0, np.intp)])

    @property
    def n_cells(self) -> int:
        """S: all category cells."""
        return int(sum(self.n_categories))

    def _q(self) -> int:
        p = self.n_continuous
        return p if self.covariance == "diag" else p * (p + 1) // 2

    def n_strata(self) -> int:
        """Number of strata (1 without stratification)."""
        return 1 if self.stratify is None else self.n_categories[self.stratify]

    def _check_width(self, n_features: int) -> None:
        if n_features != self.n_features:
            raise DataError(
                f"mixed family: rows have {n_features} columns but the family has {self.n_features} "
                f"({self.n_continuous} continuous + {len(self.n_categories)} categorical)"
            )

    def _check_shape(self, n_components: int, n_features: int | None) -> None:
        if n_features is not None:
            self._check_width(n_features)
        if n_components % self.n_strata():
            raise ConfigError(f"mixed family: {n_components} components do not split evenly over the {self.n_strata()} strata")

    def stats_size(self, n_components: int, n_features: int) -> int:
        self._check_shape(n_components, n_features)
        return n_components * (1 + self.n_continuous + self._q() + len(self.counted_cells)) + 1

    def init_stats_size(self, n_features: int) -> int:
        self._check_shape(self.n_strata(), n_features)
        return 1 + self.n_continuous + self._q() + len(self.counted_cells)

    def flat_size(self, n_components: int, n_features: int) -> int:
        p = self.n_continuous
        return n_components * (1 + p + (p if self.covariance == "diag" else p * p) + self.n_cells)

    def group(self, n_components: int) -> IntpArray:
        """The stratum of every component (all 0 without stratification)."""
        per = n_components // self.n_strata()
        return np.repeat(np.arange(self.n_strata()), per).astype(np.intp)

    def unpack(self, stats: FloatArray, n_components: int) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
        """Split (..., P) statistics into ``a`` (..., K), ``b`` (..., K, p), ``C`` (..., K, p or q), ``N`` (..., K, S'), ``ll``."""
        k, p, q, s = n_components, self.n_continuous, self._q(), len(self.counted_cells)
        if stats.shape[-1] != k * (1 + p + q + s) + 1:
            raise ProtocolError(f"statistics vector has length {stats.shape[-1]}, expected {k * (1 + p + q + s) + 1}")
        lead = stats.shape[:-1]
        cut = np.cumsum([k, k * p, k * q, k * s])
        a, b, c, n, ll = np.split(stats, cut, axis=-1)
        return a, b.reshape(*lead, k, p), c.reshape(*lead, k, q), n.reshape(*lead, k, s), ll[..., 0]

    # -- rows ----------------------------------------------------------------------------------

    def codes(self, X: FloatArray) -> IntpArray:
        """The categorical block of rows ``X`` as integer codes.

        Raises
        ------
        DataError
            The rows are not as wide as the family, or a code is not a whole number in
            0 .. C_j - 1 (naming the column and row).
        """
        self._check_width(X.shape[1])
        block = X[:, self.n_continuous :]
        codes = block.astype(np.intp)
        bad = (codes != block) | (codes < 0) | (codes >= np.asarray(self.n_categories, dtype=np.intp))
        if np.any(bad):
            row, j = (int(v) for v in np.argwhere(bad)[0])
            raise DataError(
                f"categorical column {j} (row entry {self.n_continuous + j}), row {row}: {float(block[row, j])!r} "
                f"is not a category code 0..{self.n_categories[j] - 1}"
            )
        return codes

    def _log_densities(self, X: FloatArray, codes: IntpArray, node_of_row: IntpArray, params: MixedBatch) -> tuple[list[FloatArray], FloatArray]:
        """Per component, log(pi_k p(x_n | k)) of every row, and the centred continuous block's diffs.

        Elementwise over rows and left-to-right sums over columns (batch invariant).
        """
        k = params.weights.shape[1]
        p = self.n_continuous
        with np.errstate(divide="ignore"):
            log_w = np.log(params.weights)
        if p and self.covariance == "diag":
            var_logdet = gmm.sum_in_order([np.log(params.covariances[..., j]) for j in range(p)])
            log_norm = log_w - 0.5 * (p * _LOG_2PI + var_logdet)
        elif p:
            log_norm = log_w + gmm.log_det_precision(params.prec_chol) - 0.5 * p * _LOG_2PI
        else:
            log_norm = log_w
        cells = codes + self.offsets
        log_probs = []
        diffs = np.empty((k, X.shape[0], p))
        for j in range(k):
            terms: list[FloatArray] = []
            if p:
                diff = X[:, :p] - params.means[node_of_row, j]
                diffs[j] = diff
                if self.covariance == "diag":
                    prec = params.diag_precisions[node_of_row, j]
                    terms.append(-0.5 * gmm.sum_in_order([diff[:, a] * diff[:, a] * prec[:, a] for a in range(p)]))
                else:
                    chol = params.prec_chol[node_of_row, j]
                    maha = []
                    for col in range(p):
                        y = gmm.sum_in_order([diff[:, row] * chol[:, row, col] for row in range(p)])
                        maha.append(y * y)
                    terms.append(-0.5 * gmm.sum_in_order(maha))
            terms.extend(params.log_probabilities[node_of_row, j, cells[:, c]] for c in range(cells.shape[1]))
            terms.append(log_norm[node_of_row, j])
            log_probs.append(gmm.sum_in_order(terms))
        return log_probs, diffs

    # -- the EM loop ---------------------------------------------------------------------------

    def init_statistics(self, X: FloatArray, offsets: IntpArray) -> FloatArray:
        """Per node: [n, sum x, sum x^2 (or upper sum x x^T), counts of the counted cells]."""
        codes = self.codes(X)
        p = self.n_continuous
        cont = X[:, :p]
        if self.covariance == "diag":
            second = [cont[:, a] * cont[:, a] for a in range(p)]
        else:
            second = [cont[:, a] * cont[:, b] for a, b in zip(*np.triu_indices(p), strict=True)]
        columns = [np.ones(X.shape[0]), *(cont[:, a] for a in range(p)), *second]
        moments = np.add.reduceat(np.ascontiguousarray(np.stack(columns, axis=1)), offsets, axis=0)
        counts = self._counts(self._count_keys(codes, offsets, X.shape[0]), np.ones(X.shape[0]), len(offsets))
        return np.concatenate([moments, counts], axis=1)

    def _count_keys(self, codes: IntpArray, offsets: IntpArray, n_rows: int) -> IntpArray:
        """Per row and counted column, the bin of (node, cell) in an (N, S') count table, raveled row by row."""
        s = len(self.counted_cells)
        node_of_row = np.repeat(np.arange(len(offsets)), np.diff(np.append(offsets, n_rows)))
        local = np.concatenate([[0], np.cumsum([self.n_categories[j] for j in self.counted])[:-1]]).astype(np.intp)
        return (node_of_row[:, None] * s + local + codes[:, list(self.counted)]).ravel()

    def _counts(self, keys: IntpArray, weights: FloatArray, n_nodes: int) -> FloatArray:
        """(N, S'): the sums of ``weights`` (one per row) per node and counted cell.

        ``np.bincount`` adds each bin's weights in row order, so a node's counts do not
        depend on the other nodes in the batch.
        """
        s = len(self.counted_cells)
        if s == 0:
            return np.zeros((n_nodes, 0))
        w = np.repeat(weights, len(self.counted))
        return np.bincount(keys, weights=w, minlength=n_nodes * s).reshape(n_nodes, s).astype(np.float64)

    def init_from_global(self, averages: FloatArray, n_components: int, seed: int) -> MixedBatch:
        """Initial models from the averaged global moments and the public ``seed``.

        The global means, variances (or covariance) and category frequencies are rounded to
        6 significant digits (:func:`p2pem.gmm.quantise_columns`), so every node starts from
        the same bits.  Component k gets the global variances (covariance), a mean drawn as
        ``mean + L u_k`` (``L L^T`` the global covariance, ``u_k ~ N(0, I)``) and category
        probabilities proportional to ``freq exp(INIT_SPREAD z_k)``; the weights are
        uniform within a stratum (times the public share when there is one).
        """
        self._check_shape(n_components, None)
        averages = np.asarray(averages, dtype=float)
        n, p = averages.shape[0], self.n_continuous
        q = self._q()
        if averages.shape[1] != 1 + p + q + len(self.counted_cells):
            raise ProtocolError(f"init statistics vector has length {averages.shape[1]}, expected {1 + p + q + len(self.counted_cells)}")
        count = averages[:, :1]
        mean = gmm.quantise_columns(averages[:, 1 : 1 + p] / count)
        second = averages[:, 1 + p : 1 + p + q] / count
        if self.covariance == "diag":
            spread = gmm.quantise_columns(second - mean * mean) if p else second
        else:
            iu = np.triu_indices(p)
            full = np.empty((n, p, p))
            full[:, iu[0], iu[1]] = second
            full[:, iu[1], iu[0]] = second
            full = full - mean[:, :, None] * mean[:, None, :]
            spread = gmm.quantise_columns(full.reshape(n, p * p)) if p else full.reshape(n, 0)
        freq = gmm.quantise_columns(averages[:, 1 + p + q :] / count) if len(self.counted_cells) else averages[:, :0]
        rng = np.random.default_rng(seed)
        u = rng.standard_normal((n_components, p))
        z = rng.standard_normal((n_components, self.n_cells))
        keys, inverse = np.unique(np.concatenate([mean, spread, freq], axis=1).view(np.int64), axis=0, return_inverse=True)
        models = [self._init_model(key.view(np.float64), n_components, u, z) for key in keys]
        pick = np.ravel(inverse)
        return MixedBatch(*(np.stack([models[i][field_] for i in pick]) for field_ in range(4)))

    def _init_model(self, key: FloatArray, n_components: int, u: FloatArray, z: FloatArray) -> tuple[FloatArray, ...]:
        p = self.n_continuous
        size = p if self.covariance == "diag" else p * p
        mean, spread, freq = key[:p], key[p : p + size], key[p + size :]
        if self.covariance == "diag":
            if np.any(~(spread > 0)):
                j = int(np.flatnonzero(~(spread > 0))[0])
                raise ProtocolError(f"continuous column {j} has no variance in the data: drop constant columns")
            means = mean + u * np.sqrt(spread)
            covariances = np.broadcast_to(spread, (n_components, p)).copy()
        else:
            cov = spread.reshape(p, p)
            cov = (cov + cov.T) / 2
            try:
                chol = np.linalg.cholesky(cov)
            except np.linalg.LinAlgError:
                raise ProtocolError("the global covariance of the continuous columns is singular: drop constant or duplicate columns") from None
            means = mean + u @ chol.T
            covariances = np.broadcast_to(cov, (n_components, p, p)).copy()
        probabilities = np.empty((n_components, self.n_cells))
        cells = self.counted_cells
        start = 0
        for j in self.counted:
            c = self.n_categories[j]
            f = np.maximum(freq[start : start + c], 0.0)
            if not f.sum() > 0:
                raise ProtocolError(f"categorical column {j} has no counts in the private initialisation")
            theta = f * np.exp(INIT_SPREAD * z[:, cells[start : start + c]])
            probabilities[:, cells[start : start + c]] = theta / gmm.sum_in_order([theta[:, i] for i in range(c)])[:, None]
            start += c
        self.fix_strata(probabilities, n_components)
        group = self.group(n_components)
        shares = np.full(self.n_strata(), 1.0 / self.n_strata()) if self.strata_weights is None else np.asarray(self.strata_weights)
        weights = shares[group] / (n_components // self.n_strata())
        return weights, means, covariances, probabilities

    def fix_strata(self, probabilities: FloatArray, n_components: int) -> None:
        """Set the stratifying column's probabilities (..., K, S) to each group's one-hot, in place."""
        if self.stratify is None:
            return
        start = int(self.offsets[self.stratify])
        block = np.zeros((n_components, self.n_categories[self.stratify]))
        block[np.arange(n_components), self.group(n_components)] = 1.0
        probabilities[..., start : start + block.shape[1]] = block

    def statistics(self, X: FloatArray, offsets: IntpArray, params: MixedBatch) -> FloatArray:
        codes = self.codes(X)
        n_rows = X.shape[0]
        k, p = params.weights.shape[1], self.n_continuous
        n_nodes = len(offsets)
        node_of_row = np.repeat(np.arange(n_nodes), np.diff(np.append(offsets, n_rows)))
        log_probs, diffs = self._log_densities(X, codes, node_of_row, params)
        norm = gmm.logsumexp_in_order(log_probs)
        iu = np.triu_indices(p)
        keys = self._count_keys(codes, offsets, n_rows)
        a, b, c, counts = [], [], [], []
        for j in range(k):
            resp = np.exp(log_probs[j] - norm)
            diff = diffs[j]
            columns = [resp, *(resp * diff[:, i] for i in range(p))]
            if self.covariance == "diag":
                columns.extend((resp * diff[:, i]) * diff[:, i] for i in range(p))
            else:
                columns.extend((resp * diff[:, i]) * diff[:, m] for i, m in zip(*iu, strict=True))
            sums = np.add.reduceat(np.ascontiguousarray(np.stack(columns, axis=1)), offsets, axis=0)
            a.append(sums[:, :1])
            b.append(sums[:, 1 : 1 + p])
            c.append(sums[:, 1 + p :])
            counts.append(self._counts(keys, resp, n_nodes))
        ll = np.add.reduceat(norm, offsets)[:, None]
        return np.concatenate([*a, *b, *c, *counts, ll], axis=1)

    def m_step(self, stats: FloatArray, params: MixedBatch, reg_covar: float, *, iteration: int | None = None) -> tuple[MixedBatch, FloatArray]:
        """The M-step of the module docstring, for every node at once."""
        n, k = params.weights.shape
        p = self.n_continuous
        a, b, c, counts, ll = self.unpack(stats, k)
        where = f" in EM iteration {iteration}" if iteration is not None else ""
        if not np.all(np.isfinite(stats)):
            raise ProtocolError(f"non-finite sufficient statistics{where}")
        total = gmm.sum_in_order([a[:, j] for j in range(k)])
        small = a <= (10 * np.finfo(float).eps) * total[:, None]
        if np.any(small):
            node, j = (int(v[0]) for v in np.nonzero(small))
            stratum = f" (stratum {self.group(k)[j]})" if self.stratify is not None else ""
            raise ProtocolError(
                f"component {j}{stratum} collapsed (weight {a[node, j] / total[node]:.3g}){where}: "
                "decrease n_components, change the init or increase reg_covar"
            )
        delta = b / a[..., None]
        means = params.means + delta
        if self.covariance == "diag":
            covariances = c / a[..., None] - delta * delta + reg_covar
        else:
            iu = np.triu_indices(p)
            full = np.empty((n, k, p, p))
            full[..., iu[0], iu[1]] = c
            full[..., iu[1], iu[0]] = c
            covariances = full / a[..., None, None] - delta[..., :, None] * delta[..., None, :] + reg_covar * np.eye(p)
        probabilities = np.zeros((n, k, self.n_cells))
        counts = np.maximum(counts, 0.0)
        start = 0
        cells = self.counted_cells
        for j in self.counted:
            size = self.n_categories[j]
            block = counts[..., start : start + size]
            sums = gmm.sum_in_order([block[..., i] for i in range(size)])
            if np.any(~(sums > 0)):
                node, comp = (int(v[0]) for v in np.nonzero(~(sums > 0)))
                raise ProtocolError(f"component {comp}: no counts for categorical column {j}{where}: decrease n_components")
            probabilities[..., cells[start : start + size]] = block / sums[..., None]
            start += size
        self.fix_strata(probabilities, k)
        return MixedBatch(self._weights(a, total, k), means, covariances, probabilities), ll / total

    def _weights(self, a: FloatArray, total: FloatArray, n_components: int) -> FloatArray:
        """a / total; with public strata shares, each group renormalised to its share."""
        if self.strata_weights is None:
            return a / total[:, None]
        group = self.group(n_components)
        per = n_components // self.n_strata()
        group_total = np.stack([gmm.sum_in_order([a[:, g * per + i] for i in range(per)]) for g in range(self.n_strata())], axis=1)
        return np.asarray(self.strata_weights)[group] * a / group_total[:, group]

    def total_count(self, stats: FloatArray, params: MixedBatch) -> FloatArray:
        k = params.weights.shape[1]
        return gmm.sum_in_order([stats[:, j] for j in range(k)])

    def check(self, params: MixedBatch) -> None:
        """Variances positive (or covariances positive definite), probabilities valid; caches the E-step's factors."""
        if not (np.all(np.isfinite(params.weights)) and np.all(np.isfinite(params.probabilities)) and np.all(params.probabilities >= 0)):
            raise ProtocolError("a mixed-type model holds a non-finite weight or an invalid category probability")
        if self.n_continuous == 0:
            return
        if self.covariance == "full":
            params.prec_chol  # noqa: B018  (computed and cached now: a collapsed covariance fails here)
            return
        if not np.all(params.covariances > 0):
            j = int(np.argwhere(~(params.covariances > 0))[0][1])
            raise ProtocolError(f"a variance of component {j} is not positive (the component collapsed): decrease n_components or increase reg_covar")
        params.diag_precisions  # noqa: B018  (cached for the E-step)

    def broadcast(self, params: MixedParams, n_nodes: int) -> MixedBatch:
        return MixedBatch(*(np.repeat(np.asarray(getattr(params, key))[None], n_nodes, axis=0) for key, _ in self.param_keys))

    # -- single models -------------------------------------------------------------------------

    def params_from_dict(self, init: Mapping[str, Any], n_components: int, n_features: int | None = None) -> MixedParams:
        """Validate a user-given model ``{weights, means, covariances, probabilities}``.

        Raises
        ------
        p2pem.errors.InitError
            A key is unknown or missing, a shape is wrong, a value non-finite, the weights
            not positive or not summing to 1, a variance not positive (a covariance not
            positive definite), or a column's category probabilities not a distribution.
        """
        keys = [key for key, _ in self.param_keys]
        unknown = [key for key in init if key not in keys]
        if unknown:
            raise InitError(str(unknown[0]), f"is not an init key of the mixed family (known: {', '.join(keys)})")
        if n_features is not None and n_features != self.n_features:
            raise InitError("means", f"the data has {n_features} columns but the family {self.n_features}")
        k, p = n_components, self.n_continuous
        shapes = {"weights": (k,), "means": (k, p), "covariances": (k, p) if self.covariance == "diag" else (k, p, p), "probabilities": (k, self.n_cells)}
        arrays = {}
        for key in keys:
            if key not in init:
                raise InitError(key, "is missing")
            try:
                array = np.array(init[key], dtype=np.float64)
            except (TypeError, ValueError):
                raise InitError(key, "must be an array of numbers") from None
            if array.size == 0 and 0 not in shapes[key]:
                raise InitError(key, f"must have shape {shapes[key]}, got {array.shape}")
            array = array.reshape(shapes[key]) if array.size == 0 else array
            if array.shape != shapes[key]:
                raise InitError(key, f"must have shape {shapes[key]}, got {array.shape}")
            if not np.all(np.isfinite(array)):
                raise InitError(key, "holds a non-finite value")
            array.flags.writeable = False
            arrays[key] = array
        weights = arrays["weights"]
        if np.any(weights <= 0) or abs(weights.sum() - 1.0) > 1e-8:
            raise InitError("weights", f"must be positive and sum to 1, got {weights.tolist()}")
        cov = arrays["covariances"]
        for j in range(k):
            if self.covariance == "diag" and np.any(cov[j] <= 0):
                raise InitError(f"covariances[{j}]", "must hold positive variances")
            if self.covariance == "full" and p:
                if not np.allclose(cov[j], cov[j].T, rtol=1e-10, atol=1e-12):
                    raise InitError(f"covariances[{j}]", "is not symmetric")
                try:
                    np.linalg.cholesky(cov[j])
                except np.linalg.LinAlgError:
                    raise InitError(f"covariances[{j}]", "is not positive definite") from None
        probs = arrays["probabilities"]
        for c, (start, size) in enumerate(zip(self.offsets, self.n_categories, strict=True)):
            block = probs[:, start : start + size]
            if np.any(block < 0) or np.any(np.abs(block.sum(axis=1) - 1.0) > 1e-8):
                raise InitError("probabilities", f"of categorical column {c} (cells {start}..{start + size - 1}) must be >= 0 and sum to 1 per component")
        if self.stratify is not None:
            expected = np.array(probs)
            self.fix_strata(expected, k)
            if not np.array_equal(expected, probs):
                raise InitError("probabilities", f"of the stratifying column {self.stratify} must be each component group's one-hot")
        return MixedParams(weights, arrays["means"], cov, probs)

    def log_responsibilities(self, X: FloatArray, params: MixedParams) -> tuple[FloatArray, FloatArray]:
        X = np.asarray(X, dtype=float)
        self._check_shape(params.n_components, X.shape[1])
        batch = self.broadcast(params, 1)
        self.check(batch)
        log_probs, _ = self._log_densities(X, self.codes(X), np.zeros(X.shape[0], dtype=np.intp), batch)
        norm = gmm.logsumexp_in_order(log_probs)
        return np.stack(log_probs, axis=1) - norm[:, None], norm

    def sample(
        self, params: MixedParams, n_samples: int, rng: np.random.Generator | np.random.RandomState
    ) -> tuple[FloatArray, npt.NDArray[np.intp]]:
        """Component counts multinomial with the weights, then each component's rows, grouped by component:
        the continuous block from its Gaussian(s), every categorical column from its probabilities."""
        counts = rng.multinomial(int(n_samples), params.weights)
        p = self.n_continuous
        blocks = []
        for j, size in enumerate(counts):
            size = int(size)
            if self.covariance == "diag":
                cont = params.means[j] + rng.standard_normal((size, p)) * np.sqrt(params.covariances[j])
            else:
                cont = rng.multivariate_normal(params.means[j], params.covariances[j], size=size) if p else np.empty((size, 0))
            cats = []
            for start, c in zip(self.offsets, self.n_categories, strict=True):
                cumulative = np.cumsum(params.probabilities[j, start : start + c])
                draw = np.searchsorted(cumulative / cumulative[-1], rng.random(size), side="right")
                cats.append(np.minimum(draw, c - 1).astype(float))
            blocks.append(np.column_stack([cont, *cats]) if cats else cont)
        X = np.vstack(blocks) if blocks else np.empty((0, self.n_features))
        return X, np.repeat(np.arange(params.n_components), counts)

    def n_parameters(self, n_components: int, n_features: int) -> int:
        """Free parameters: K - 1 weights (K - C_s when public shares fix each stratum's total), K p
        means, K p variances (K p (p + 1) / 2 covariances), K sum_j (C_j - 1) category probabilities
        (the stratifying column's are fixed)."""
        k, p = n_components, self.n_continuous
        free_weights = k - (self.n_strata() if self.strata_weights is not None else 1)
        spread = k * p if self.covariance == "diag" else k * p * (p + 1) // 2
        cats = k * sum(self.n_categories[j] - 1 for j in self.counted)
        return int(free_weights + k * p + spread + cats)

    @classmethod
    def from_config(
        cls,
        n_continuous: int = 0,
        n_categories: Any = (),
        covariance: str = "diag",
        stratify: int | None = None,
        strata_weights: Any = None,
    ) -> MixedFamily:
        """The family from :meth:`config`'s plain data (lists as tuples): ``make_family("mixed", ...)``."""
        def as_tuple(value: Any) -> Any:
            return tuple(value) if isinstance(value, (list, tuple)) else value

        return cls(n_continuous, as_tuple(n_categories), covariance, stratify, as_tuple(strata_weights))

    def config(self) -> dict[str, Any]:
        """The public configuration as plain data: ``make_family("mixed", **config)`` rebuilds the family."""
        return {
            "n_continuous": self.n_continuous,
            "n_categories": list(self.n_categories),
            "covariance": self.covariance,
            "stratify": self.stratify,
            "strata_weights": None if self.strata_weights is None else list(self.strata_weights),
        }
