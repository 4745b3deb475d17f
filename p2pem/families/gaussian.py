"""The Gaussian family: full-covariance Gaussian mixtures, wrapping the pure functions of :mod:`p2pem.gmm`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

import p2pem.gmm as gmm
from p2pem.families.base import FloatArray, IntpArray, MixtureFamily
from p2pem.gmm import GMMParams


@dataclass(frozen=True, eq=False)
class GaussianBatch:
    """N nodes' Gaussian mixtures: ``weights`` (N, K), ``means`` (N, K, d), ``covariances`` (N, K, d, d)."""

    weights: FloatArray
    means: FloatArray
    covariances: FloatArray

    @property
    def n_nodes(self) -> int:
        return int(self.weights.shape[0])

    def node(self, i: int) -> GMMParams:
        return GMMParams(self.weights[i], self.means[i], self.covariances[i])

    @cached_property
    def prec_chol(self) -> FloatArray:
        """Cholesky factors of the precisions, (N, K, d, d) (:func:`p2pem.gmm.precision_cholesky`).

        Raises ModelError when a covariance is not positive definite.
        """
        return gmm.precision_cholesky(self.covariances)


@dataclass(frozen=True)
class GaussianFamily(MixtureFamily[GMMParams, GaussianBatch]):
    """``gaussian``: mixtures of full-covariance Gaussians (statistics layout in :mod:`p2pem.gmm`)."""

    name: str = field(init=False, default="gaussian")
    param_keys: tuple[tuple[str, int], ...] = field(init=False, default=tuple(zip(gmm.INIT_KEYS, (1, 2, 3), strict=True)))

    def stats_size(self, n_components: int, n_features: int) -> int:
        return gmm.stats_size(n_components, n_features)

    def init_stats_size(self, n_features: int) -> int:
        return gmm.init_stats_size(n_features)

    def flat_size(self, n_components: int, n_features: int) -> int:
        k, d = n_components, n_features
        return k + k * d + k * d * d

    def init_statistics(self, X: FloatArray, offsets: IntpArray) -> FloatArray:
        return gmm.init_statistics(X, offsets)

    def init_from_global(self, averages: FloatArray, n_components: int, seed: int) -> GaussianBatch:
        return GaussianBatch(*gmm.init_from_global_batch(averages, n_components, seed))

    def statistics(self, X: FloatArray, offsets: IntpArray, params: GaussianBatch) -> FloatArray:
        return gmm.batch_statistics(X, offsets, params.weights, params.means, params.prec_chol)

    def m_step(
        self, stats: FloatArray, params: GaussianBatch, reg_covar: float, *, iteration: int | None = None
    ) -> tuple[GaussianBatch, FloatArray]:
        w, m, c, ll = gmm.batch_m_step(stats, params.means, reg_covar, iteration=iteration)
        return GaussianBatch(w, m, c), ll

    def total_count(self, stats: FloatArray, params: GaussianBatch) -> FloatArray:
        return gmm.total_count(stats, params.weights.shape[1])

    def check(self, params: GaussianBatch) -> None:
        params.prec_chol  # noqa: B018  (computed and cached now: a collapsed covariance fails here)

    def broadcast(self, params: GMMParams, n_nodes: int) -> GaussianBatch:
        return GaussianBatch(
            np.repeat(params.weights[None], n_nodes, axis=0),
            np.repeat(params.means[None], n_nodes, axis=0),
            np.repeat(params.covariances[None], n_nodes, axis=0),
        )

    def params_from_dict(self, init: Mapping[str, Any], n_components: int, n_features: int | None = None) -> GMMParams:
        return gmm.params_from_dict(init, n_components, n_features)

    def log_responsibilities(self, X: FloatArray, params: GMMParams) -> tuple[FloatArray, FloatArray]:
        return gmm.e_step(X, params)

    def sample(
        self, params: GMMParams, n_samples: int, rng: np.random.Generator | np.random.RandomState
    ) -> tuple[FloatArray, npt.NDArray[np.intp]]:
        """Component counts multinomial with the weights, then each component's rows from its
        Gaussian, grouped by component: the draws of scikit-learn's ``GaussianMixture.sample``
        in the same order, so a ``RandomState`` gives its rows exactly."""
        counts = rng.multinomial(int(n_samples), params.weights)
        X = np.vstack([rng.multivariate_normal(m, c, size=int(k)) for m, c, k in zip(params.means, params.covariances, counts, strict=True)])
        return X, np.repeat(np.arange(params.n_components), counts)

    def n_parameters(self, n_components: int, n_features: int) -> int:
        """k d (d + 1) / 2 + k d + k - 1, as scikit-learn counts a full-covariance mixture."""
        k, d = n_components, n_features
        return int(k * d * (d + 1) / 2 + k * d + k - 1)


#: The Gaussian family (it has no configuration, so one instance serves everyone).
GAUSSIAN = GaussianFamily()
