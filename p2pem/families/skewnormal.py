"""The skew-normal family: mixtures of multivariate skew-normals, wrapping :mod:`p2pem.snmix`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

import p2pem.snmix as sn
from p2pem.errors import ConfigError, ProtocolError
from p2pem.families.base import FloatArray, IntpArray, MixtureFamily
from p2pem.gmm import precision_cholesky
from p2pem.snmix import SkewNormalParams


@dataclass(frozen=True, eq=False)
class SkewNormalBatch:
    """N nodes' skew-normal mixtures in the working parametrisation, with the direct one derived.

    ``weights`` (N, K), ``locations`` (N, K, d), ``deltas`` (N, K, d), ``gammas`` (N, K, d, d);
    ``scales`` and ``shapes`` (the direct parametrisation, :mod:`p2pem.snmix`) are computed
    when first read.
    """

    weights: FloatArray
    locations: FloatArray
    deltas: FloatArray
    gammas: FloatArray

    @property
    def n_nodes(self) -> int:
        return int(self.weights.shape[0])

    def node(self, i: int) -> SkewNormalParams:
        return SkewNormalParams(self.weights[i], self.locations[i], self.scales[i], self.shapes[i], self.deltas[i], self.gammas[i])

    @cached_property
    def prec_chol(self) -> FloatArray:
        """Cholesky factors of Gamma^-1, (N, K, d, d); ModelError when a Gamma is not positive definite."""
        return precision_cholesky(self.gammas)

    @cached_property
    def _direct(self) -> tuple[FloatArray, FloatArray]:
        return sn.direct_from_working(self.deltas, self.gammas, self.prec_chol)

    @property
    def scales(self) -> FloatArray:
        """Sigma = Gamma + Delta Delta^T, (N, K, d, d)."""
        return self._direct[0]

    @property
    def shapes(self) -> FloatArray:
        """alpha, (N, K, d)."""
        return self._direct[1]

    @cached_property
    def delta_norms(self) -> FloatArray:
        """|delta| of every component, (N, K), in [0, 1)."""
        return sn.delta_norm(self.deltas, self.prec_chol)


@dataclass(frozen=True)
class SkewNormalFamily(MixtureFamily[SkewNormalParams, SkewNormalBatch]):
    """``skew-normal``: mixtures of multivariate skew-normals (Azzalini's direct parametrisation).

    Parameters
    ----------
    init_shapes : list of float, optional
        Public initial shapes alpha (one per feature) of every component of the private
        initialisation.  By default each is the sign of the column's global skewness, from
        third moments summed by the private protocol in the initial aggregation (d more
        numbers).  All zeros give a Gaussian fit: Delta = 0 is a fixed point of the EM.
    max_delta : float, optional
        Cap on |delta| in (0, 1): after each M-step a larger shape is shrunk, the scale Sigma
        kept (:func:`p2pem.snmix.cap_deltas`).
        The likelihood can grow without bound as a shape grows (e.g. one component on data
        whose skew it cannot otherwise follow); without a cap the EM warns
        (:class:`p2pem.snmix.BoundaryWarning`) when |delta| reaches 0.9999.
    """

    init_shapes: tuple[float, ...] | None = None
    max_delta: float | None = None
    name: str = field(init=False, default="skew-normal")
    param_keys: tuple[tuple[str, int], ...] = field(init=False, default=tuple(zip(sn.PARAM_KEYS, (1, 2, 3, 2), strict=True)))

    def __post_init__(self) -> None:
        values = self.init_shapes
        if values is not None and not (
            isinstance(values, tuple) and values and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)
        ):
            raise ConfigError(f"skew-normal: init_shapes must be a list of finite numbers (one per feature), got {values!r}")
        if self.max_delta is not None and not (isinstance(self.max_delta, (int, float)) and 0 < self.max_delta < 1):
            raise ConfigError(f"skew-normal: max_delta must be a number in (0, 1), got {self.max_delta!r}")

    # -- sizes ---------------------------------------------------------------------------

    def stats_size(self, n_components: int, n_features: int) -> int:
        return sn.stats_size(n_components, n_features)

    def init_stats_size(self, n_features: int) -> int:
        return sn.init_stats_size(n_features, cubes=self.init_shapes is None)

    def flat_size(self, n_components: int, n_features: int) -> int:
        k, d = n_components, n_features
        return k + k * d + k * d * d + k * d

    # -- the EM loop -----------------------------------------------------------------------

    def init_statistics(self, X: FloatArray, offsets: IntpArray) -> FloatArray:
        return sn.init_statistics(X, offsets, cubes=self.init_shapes is None)

    def init_from_global(self, averages: FloatArray, n_components: int, seed: int) -> SkewNormalBatch:
        shapes = None
        if self.init_shapes is not None:
            shapes = np.asarray(self.init_shapes)
            d = sn._init_width(averages.shape[1], cubes=False)
            if shapes.shape != (d,):
                raise ConfigError(f"skew-normal: init_shapes has {shapes.size} values but the data has {d} features")
        return SkewNormalBatch(*sn.init_from_global_batch(averages, n_components, seed, shapes))

    def statistics(self, X: FloatArray, offsets: IntpArray, params: SkewNormalBatch) -> FloatArray:
        return sn.batch_statistics(X, offsets, params.weights, params.locations, params.deltas, params.prec_chol)

    def m_step(
        self, stats: FloatArray, params: SkewNormalBatch, reg_covar: float, *, iteration: int | None = None
    ) -> tuple[SkewNormalBatch, FloatArray]:
        w, loc, deltas, gammas, ll = sn.batch_m_step(stats, params.locations, params.deltas, reg_covar, iteration=iteration)
        if self.max_delta is not None:
            deltas, gammas = self.cap(deltas, gammas)
        return SkewNormalBatch(w, loc, deltas, gammas), ll

    def cap(self, deltas: FloatArray, gammas: FloatArray, max_delta: float | None = None) -> tuple[FloatArray, FloatArray]:
        """(Delta, Gamma) with |delta| capped at ``max_delta`` (default the family's), the scale
        Sigma kept (:func:`p2pem.snmix.cap_deltas`).

        Models whose Gamma is not positive definite (a private run's noisy M-step, before its
        repair) are left as they are: the cap needs Gamma^-1.
        """
        limit = self.max_delta if max_delta is None else max_delta
        if limit is None:
            return deltas, gammas
        try:
            prec_chol = precision_cholesky(gammas)
        except ProtocolError:
            return deltas, gammas
        return sn.cap_deltas(deltas, gammas, prec_chol, limit)

    def total_count(self, stats: FloatArray, params: SkewNormalBatch) -> FloatArray:
        return sn.total_count(stats, params.weights.shape[1])

    def check(self, params: SkewNormalBatch) -> None:
        """Gamma's Cholesky factors now (a collapsed component fails here); a boundary warning."""
        sn.warn_boundary(params.delta_norms, stacklevel=4)

    def broadcast(self, params: SkewNormalParams, n_nodes: int) -> SkewNormalBatch:
        return SkewNormalBatch(*(np.repeat(np.asarray(a)[None], n_nodes, axis=0) for a in (params.weights, params.locations, params.deltas, params.gammas)))

    # -- single models -----------------------------------------------------------------------

    def params_from_dict(self, init: Mapping[str, Any], n_components: int, n_features: int | None = None) -> SkewNormalParams:
        return sn.params_from_dict(init, n_components, n_features)

    def derived(self, params: SkewNormalParams | SkewNormalBatch) -> dict[str, list]:
        """``deltas`` and each component's ``means`` (E X) and ``covariances`` (Cov X), for ``result.json``."""
        means, covariances = sn.moments(params.locations, params.scales, params.deltas)
        return {"deltas": np.asarray(params.deltas).tolist(), "means": means.tolist(), "covariances": covariances.tolist()}

    def log_responsibilities(self, X: FloatArray, params: SkewNormalParams) -> tuple[FloatArray, FloatArray]:
        return sn.log_responsibilities(X, params)

    def sample(
        self, params: SkewNormalParams, n_samples: int, rng: np.random.Generator | np.random.RandomState
    ) -> tuple[FloatArray, npt.NDArray[np.intp]]:
        return sn.sample(params, n_samples, rng)

    def n_parameters(self, n_components: int, n_features: int) -> int:
        return sn.n_parameters(n_components, n_features)


#: The skew-normal family with its default configuration.
SKEW_NORMAL = SkewNormalFamily()
