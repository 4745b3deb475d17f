"""The Gaussian family's private release: uncentred moment sums (:mod:`p2pem.dp.mechanisms`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from p2pem.dp import mechanisms, postprocess
from p2pem.dp.releases.base import ReleaseLayout, RepairOptions
from p2pem.families.gaussian import GaussianBatch
from p2pem.gmm import FloatArray, init_stats_size, unpack_statistics

__all__ = ["PrivateEM", "release"]


@dataclass(frozen=True, eq=False)
class PrivateEM:
    """What a private run changes in the Gaussian EM loop (a :class:`p2pem.em.PrivacyHook`).

    ``encode`` turns a node's centred statistics into the uncentred sums that are released
    (and blanks the log-likelihood); ``decode`` turns a noisy network average back into
    centred statistics, with every count at least one row; ``repair`` post-processes the
    M-step (weights clipped, means clipped to the public box, covariances repaired);
    ``decode_init`` repairs the noisy global moments of the private initialisation.  All of
    it is post-processing of released values or a node's own data, so it costs no budget.
    """

    n_components: int
    n_features: int
    n_nodes: int
    bound: float
    weight_floor: float = 1e-3
    smoothing: float = 0.0
    repair_method: str = "eigclamp"
    eig_floor: float = 1e-3

    def encode(self, stats: FloatArray, params: GaussianBatch) -> FloatArray:
        """(N, P) statistics centred at ``params.means`` (N, K, d) -> released uncentred sums, ll = 0."""
        k, d = self.n_components, self.n_features
        a, b, c, _ = unpack_statistics(stats, k, d)
        mu = params.means
        first = b + a[..., None] * mu
        mb = mu[..., :, None] * b[..., None, :]
        second = c + mb + np.swapaxes(mb, -1, -2) + a[..., None, None] * (mu[..., :, None] * mu[..., None, :])
        return self._pack(a, first, second, np.zeros(stats.shape[0]))

    def decode(self, stats: FloatArray, params: GaussianBatch) -> FloatArray:
        """Noisy released averages (N, P) -> statistics centred at ``params.means``, counts >= 1 row."""
        k, d = self.n_components, self.n_features
        a, first, second, ll = unpack_statistics(stats, k, d)
        a = np.maximum(a, 1.0 / self.n_nodes)  # averages: one row is 1/n
        mu = params.means
        b = first - a[..., None] * mu
        mf = mu[..., :, None] * first[..., None, :]
        c = second - mf - np.swapaxes(mf, -1, -2) + a[..., None, None] * (mu[..., :, None] * mu[..., None, :])
        return self._pack(a, b, c, ll)

    def repair(self, params: GaussianBatch) -> GaussianBatch:
        w = postprocess.clip_weights(params.weights, self.weight_floor, self.smoothing)
        m = np.clip(params.means, -self.bound, self.bound)
        if np.array_equal(m, params.means):
            m = params.means
        c = postprocess.repair_covariances(params.covariances, self.repair_method, self.eig_floor)
        return GaussianBatch(w, m, c)

    def decode_init(self, rows: FloatArray) -> FloatArray:
        """Noisy [n, sum x, upper sum x x^T] averages (N, P0) -> consistent ones (PD covariance).

        The covariance is repaired, and its eigenvalues are kept in [floor, d B^2]: no data
        in the box [-B, B]^d has a larger variance, and the floor is at least 1e-4 of the
        largest eigenvalue, so that the initialisation's rounding to 6 significant digits
        (:func:`p2pem.gmm.init_from_global`) leaves it positive definite.  A covariance
        already inside those limits is left as it is.
        """
        d = self.n_features
        rows = np.array(rows, dtype=float)
        iu = np.triu_indices(d)
        ceiling = d * self.bound**2
        for row in rows:
            count = max(row[0], 1.0 / self.n_nodes)
            mean = np.clip(row[1 : 1 + d] / count, -self.bound, self.bound)
            second = np.empty((d, d))
            second[iu] = row[1 + d :] / count
            second.T[iu] = row[1 + d :] / count
            cov = postprocess.repair_covariances(second - np.outer(mean, mean), self.repair_method, self.eig_floor)
            lam, vec = np.linalg.eigh(cov)
            floor = max(self.eig_floor, 1e-4 * min(float(lam[-1]), ceiling))
            if lam[0] < floor or lam[-1] > ceiling:
                lam = np.clip(lam, floor, ceiling)
                cov = (vec * lam) @ vec.T
                cov = (cov + cov.T) / 2
            row[0] = count
            row[1 : 1 + d] = count * mean
            row[1 + d :] = (count * (cov + np.outer(mean, mean)))[iu]
        return rows

    def _pack(self, a, first, second, ll) -> FloatArray:
        n = a.shape[0]
        iu = np.triu_indices(self.n_features)
        return np.concatenate([a, first.reshape(n, -1), second[..., iu[0], iu[1]].reshape(n, -1), ll[:, None]], axis=1)


def release(family, n_components: int, n_features: int, n_nodes: int, bound: float, *, mechanism: str, private_init: bool,
            options: RepairOptions) -> ReleaseLayout:
    """The Gaussian family's layout (the table of :mod:`p2pem.dp.mechanisms`) and its :class:`PrivateEM`."""
    k, d = n_components, n_features
    o = options
    return ReleaseLayout(
        em=tuple(mechanisms.em_blocks(k, d, bound)),
        init=tuple(mechanisms.init_blocks(d, bound)) if private_init else (),
        em_size=mechanisms.em_release_size(k, d),
        init_size=init_stats_size(d),
        hook=PrivateEM(k, d, n_nodes, bound, o.weight_floor, o.smoothing, o.covariance_repair, o.eig_floor),
    )
