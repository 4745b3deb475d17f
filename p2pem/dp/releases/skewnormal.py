"""The skew-normal family's private release: uncentred sums, three of them scaled by the public model.

A private skew-normal run releases, per EM iteration and component k, the uncentred sums of
:mod:`p2pem.snmix`'s statistics over the clipped rows x in [-B, B]^d::

    block             per-row contribution   L1 sensitivity        L2 sensitivity        kind
    ----------------  ---------------------  --------------------  --------------------  -----------
    "weights"         r0_k                   1                     1                     weights
    "latent-first"    r0_k r1_k              R1                    R1                    means
    "latent-second"   r0_k r2_k              R2                    R2                    covariances
    "means"           r0_k x                 d B                   sqrt(d) B             means
    "latent-means"    r0_k r1_k x            R1 d B                R1 sqrt(d) B          means
    "covariances"     r0_k upper(x x^T)      B^2 d (d + 1) / 2     B^2 sqrt(d(d+1)/2)    covariances

with R1 = max_k sup_x r1_k(x) and R2 = max_k sup_x r2_k(x) over the box.  Derivation: adding
or removing row x changes a block by r0(x) phi_k(x), r0 in the probability simplex, so its
L1 norm is at most max_k ||phi_k(x)||_1 and its L2 norm at most that (||r0||_2 <= 1); r1 and
r2 are the first two moments of tau | x ~ N(mu_tau, M^2) truncated to [0, inf), positive and
increasing in mu_tau (:func:`p2pem.snmix.latent_moments`), and mu_tau = M^2 c^T (x - xi) with
c = Gamma^-1 Delta is affine in x, so its maximum over the box is at a corner:
mu_max = M^2 (B ||c||_1 - c^T xi).  R1 and R2 therefore follow from the *public* current model
and the box; they change every iteration.  Those three blocks are released divided by their
sensitivity at the model every node holds (``Block.unit``): the calibrated scale is a noise
multiplier, the noise in the statistics' own units is multiplier x sensitivity, and the
accountant composes the multipliers.  The sensitivities are rounded up to 6 significant
digits, so nodes whose models differ by consensus error normalise by the same number (an
upper bound stays an upper bound).  With one component r0 = 1 and the bounds are attained
at the maximising corner; the tests search neighbouring data sets by brute force.

The private initialisation releases the Gaussian family's count, sum x and upper(sum x x^T),
plus sum x^3 per column (L1 d B^3, L2 sqrt(d) B^3; the signs of the global skewness) unless
the family's ``init_shapes`` are public.

Post-processing (free): ``decode`` keeps every count at least one row and each component's
s1 and s2 within [s0 r_min, s0 r_max] of the model's own range over the box; ``repair``
clips the weights, the locations to [-3B, 3B] and each Delta entry to [-2B, 2B], repairs
Gamma (``covariance_repair``) with its eigenvalues at most d (2B)^2, and caps |delta| at
0.995 (:data:`PRIVATE_MAX_DELTA`, or the family's ``max_delta`` if smaller).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from p2pem.dp import postprocess
from p2pem.dp.mechanisms import Block, moment_sensitivities
from p2pem.dp.mechanisms import init_blocks as gaussian_init_blocks
from p2pem.dp.releases.base import ReleaseLayout, RepairOptions
from p2pem.dp.releases.gaussian import PrivateEM
from p2pem.families.skewnormal import SkewNormalBatch, SkewNormalFamily
from p2pem.gmm import FloatArray, init_stats_size
from p2pem.snmix import gamma_inv_delta, latent_moments, stats_size, unpack_statistics

__all__ = ["PrivateSkewNormalEM", "release"]

#: The three blocks whose sensitivity follows from the model, in ``sensitivities`` order.
UNIT_BLOCKS = ("latent-first", "latent-second", "latent-means")
#: |delta| cap of a private run's repair (the family's ``max_delta`` when smaller): noise can
#: push a shape to the boundary, where one noisy iteration turns a component into a sliver.
PRIVATE_MAX_DELTA = 0.995


def em_blocks(n_components: int, n_features: int, bound: float) -> list[Block]:
    """The six released blocks of one EM iteration, in the layout of :mod:`p2pem.snmix` (module docstring)."""
    k, d = n_components, n_features
    (c1, c2), (m1, m2), (s1, s2) = moment_sensitivities(d, bound)
    tri = d * (d + 1) // 2
    return [
        Block("weights", 0, k, c1, c2, kind="weights"),
        Block("latent-first", k, 2 * k, 1.0, 1.0, kind="means", unit=True),
        Block("latent-second", 2 * k, 3 * k, 1.0, 1.0, kind="covariances", unit=True),
        Block("means", 3 * k, 3 * k + k * d, m1, m2, kind="means"),
        Block("latent-means", 3 * k + k * d, 3 * k + 2 * k * d, 1.0, 1.0, kind="means", unit=True),
        Block("covariances", 3 * k + 2 * k * d, 3 * k + 2 * k * d + k * tri, s1, s2, kind="covariances"),
    ]


def init_blocks(n_features: int, bound: float, *, cubes: bool) -> list[Block]:
    """The released blocks of the private initialisation (:func:`p2pem.snmix.init_statistics`)."""
    blocks = gaussian_init_blocks(n_features, bound)
    if cubes:
        d, b = n_features, float(bound)
        at = init_stats_size(d)
        blocks.append(Block("init-cubes", at, at + d, d * b**3, math.sqrt(d) * b**3, kind="init"))
    return blocks


def _round_up(values: FloatArray, digits: int = 6) -> FloatArray:
    """Each value (> 0) rounded up to ``digits`` significant decimal digits."""
    scale = np.power(10.0, np.floor(np.log10(values)) - (digits - 1))
    return np.ceil(values / scale) * scale


@dataclass(frozen=True, eq=False)
class PrivateSkewNormalEM:
    """What a private run changes in the skew-normal EM loop (a :class:`p2pem.em.PrivacyHook`; module docstring)."""

    n_components: int
    n_features: int
    n_nodes: int
    bound: float
    mechanism: str
    options: RepairOptions
    family: SkewNormalFamily
    max_delta: float = PRIVATE_MAX_DELTA

    # -- the model's sensitivities -------------------------------------------------------------

    def latent_ranges(self, params: SkewNormalBatch) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """(r1_min, r1_max, r2_min, r2_max), each (N, K): the ranges of r1 and r2 over the box."""
        c, q = gamma_inv_delta(params.deltas, params.prec_chol)
        m2 = 1.0 / (1.0 + q)
        m = np.sqrt(m2)
        reach = self.bound * np.abs(c).sum(axis=-1)
        centre = (c * params.locations).sum(axis=-1)
        lo1, lo2 = latent_moments(m * (-reach - centre), m, m2)  # z = mu_tau / M = M (c^T x - c^T xi)
        hi1, hi2 = latent_moments(m * (reach - centre), m, m2)
        return lo1, hi1, lo2, hi2

    def sensitivities(self, params: SkewNormalBatch) -> FloatArray:
        """(N, 3): each node's sensitivity of "latent-first", "latent-second", "latent-means" in the
        mechanism's norm (L2 for Gaussian noise, L1 for Laplace), rounded up (module docstring)."""
        _, hi1, _, hi2 = self.latent_ranges(params)
        r1, r2 = hi1.max(axis=-1), hi2.max(axis=-1)
        d, b = self.n_features, self.bound
        per_x = math.sqrt(d) * b if self.mechanism == "gaussian" else d * b
        return _round_up(np.stack([r1, r2, r1 * per_x], axis=1))

    # -- the hook --------------------------------------------------------------------------------

    def encode(self, stats: FloatArray, params: SkewNormalBatch) -> FloatArray:
        """(N, P) statistics centred at the locations -> released uncentred sums (unit blocks scaled), ll = 0."""
        s0, s1, s2, m0, m1, S, _ = unpack_statistics(stats, self.n_components, self.n_features)
        xi = params.locations
        first, latent_first = m0 + s0[..., None] * xi, m1 + s1[..., None] * xi
        mx = xi[..., :, None] * m0[..., None, :]
        second = S + mx + np.swapaxes(mx, -1, -2) + s0[..., None, None] * (xi[..., :, None] * xi[..., None, :])
        sens = self.sensitivities(params)
        return self._pack(s0, s1 / sens[:, :1], s2 / sens[:, 1:2], first, latent_first / sens[:, 2:, None], second, np.zeros(stats.shape[0]))

    def decode(self, stats: FloatArray, params: SkewNormalBatch) -> FloatArray:
        """Noisy released averages (N, P) -> statistics centred at the locations, within their ranges."""
        s0, s1, s2, first, latent_first, second, ll = unpack_statistics(stats, self.n_components, self.n_features)
        sens = self.sensitivities(params)
        s1, s2, latent_first = s1 * sens[:, :1], s2 * sens[:, 1:2], latent_first * sens[:, 2:, None]
        s0 = np.maximum(s0, 1.0 / self.n_nodes)  # averages: one row is 1/n
        lo1, hi1, lo2, hi2 = self.latent_ranges(params)
        s1 = np.clip(s1, s0 * lo1, s0 * hi1)
        s2 = np.clip(s2, np.maximum(s0 * lo2, 1e-12 * s0), s0 * hi2)
        xi = params.locations
        m0, m1 = first - s0[..., None] * xi, latent_first - s1[..., None] * xi
        fx = xi[..., :, None] * first[..., None, :]
        S = second - fx - np.swapaxes(fx, -1, -2) + s0[..., None, None] * (xi[..., :, None] * xi[..., None, :])
        return self._pack(s0, s1, s2, m0, m1, S, ll)

    def repair(self, params: SkewNormalBatch) -> SkewNormalBatch:
        o, b, d = self.options, self.bound, self.n_features
        weights = postprocess.clip_weights(params.weights, o.weight_floor, o.smoothing)
        locations = np.clip(params.locations, -3 * b, 3 * b)
        deltas = np.clip(params.deltas, -2 * b, 2 * b)
        gammas = postprocess.repair_covariances(params.gammas, o.covariance_repair, o.eig_floor)
        ceiling = d * (2 * b) ** 2
        lam, vec = np.linalg.eigh(gammas)
        if np.any(lam > ceiling):
            gammas = (vec * np.minimum(lam, ceiling)[..., None, :]) @ np.swapaxes(vec, -1, -2)
            gammas = (gammas + np.swapaxes(gammas, -1, -2)) / 2
        deltas, gammas = self.family.cap(deltas, gammas, self.max_delta)
        return SkewNormalBatch(weights, locations, deltas, gammas)

    def decode_init(self, rows: FloatArray) -> FloatArray:
        """Noisy [n, sum x, upper sum x x^T (, sum x^3)] averages -> consistent ones (the Gaussian part repaired)."""
        o = self.options
        gaussian = PrivateEM(self.n_components, self.n_features, self.n_nodes, self.bound, o.weight_floor, o.smoothing,
                             o.covariance_repair, o.eig_floor)
        rows = np.array(rows, dtype=float)
        size = init_stats_size(self.n_features)
        rows[:, :size] = gaussian.decode_init(rows[:, :size])
        return rows

    def _pack(self, s0, s1, s2, m0, m1, S, ll) -> FloatArray:
        n = s0.shape[0]
        iu = np.triu_indices(self.n_features)
        return np.concatenate(
            [s0, s1, s2, m0.reshape(n, -1), m1.reshape(n, -1), S[..., iu[0], iu[1]].reshape(n, -1), ll[:, None]], axis=1
        )


def release(family: SkewNormalFamily, n_components: int, n_features: int, n_nodes: int, bound: float, *, mechanism: str,
            private_init: bool, options: RepairOptions) -> ReleaseLayout:
    """The skew-normal layout (module docstring) and its :class:`PrivateSkewNormalEM`."""
    cubes = family.init_shapes is None
    return ReleaseLayout(
        em=tuple(em_blocks(n_components, n_features, bound)),
        init=tuple(init_blocks(n_features, bound, cubes=cubes)) if private_init else (),
        em_size=stats_size(n_components, n_features) + 1,
        init_size=family.init_stats_size(n_features),
        hook=PrivateSkewNormalEM(n_components, n_features, n_nodes, bound, mechanism, options, family,
                                 min(PRIVATE_MAX_DELTA, family.max_delta or 1.0)),
    )
