"""What a differentially private run of the mixed-type family releases, its sensitivities, its repair.

The mixed family (:mod:`p2pem.families.mixed`) aggregates, per component k, the soft count,
centred first and second moments of its p Gaussian columns and the soft counts of every
counted category cell.  A private run releases them *uncentred* (as the Gaussian family's
private runs do, :mod:`p2pem.dp.mechanisms`), so their sensitivity does not depend on the
current model.  Neighbouring data sets differ by one added or removed row; the Gaussian
columns lie in the public box [-B, B] (the encoding maps them to [-1, 1], so B = 1) and the
codes are public categories; the responsibilities r of a row lie in the probability
simplex::

    block          per-row contribution            L1 sensitivity     L2 sensitivity
    -------------  ------------------------------  -----------------  ------------------
    "weights"      r_k                             1                  1
    "means"        r_k x                           p B                sqrt(p) B
    "covariances"  r_k x_j^2 (diag)                p B^2              sqrt(p) B^2
                   r_k upper(x x^T) (full)         B^2 q              B^2 sqrt(q)
    "categories"   r_k [code_j = c], m' columns    m'                 sqrt(m')

with q = p (p + 1) / 2 and m' the counted categorical columns (all but a stratifying one).
Derivation: the row changes block k's entries by r_k phi(x), phi(x) the row's features.
L1: sum_k r_k ||phi(x)||_1 = ||phi(x)||_1; L2: ||r||_2 ||phi(x)||_2 <= ||phi(x)||_2.  A
row's category indicators are one 1 per counted column, so ||phi||_1 = m' and ||phi||_2 =
sqrt(m') whatever the categories; the moments are bounded as the Gaussian family's.  Every
bound is attained (a one-hot r, a corner of the box), so they are tight; the tests search
neighbouring data sets by brute force.  The private initialisation releases the same four
blocks once, with one component (r = 1): the count, sum x, sum x^2 (or upper x x^T) and the
category counts.

Post-processing (free: it sees only released values and public settings) turns noisy sums
into a valid model: counts of at least one row, variances in [floor, B^2] (covariances
repaired as the Gaussian family's), means in the box, weights clipped; the noisy category
counts of each component and column are projected onto the probability simplex (Euclidean
projection, Duchi, Shalev-Shwartz, Singer & Chandra, ICML 2008: it clamps the small noisy
cells to 0 instead of keeping their positive noise) and floored at :data:`PROBABILITY_FLOOR`
so that no row has zero likelihood under every component.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from p2pem.dp import postprocess
from p2pem.dp.mechanisms import Block
from p2pem.dp.releases.base import ReleaseLayout, RepairOptions
from p2pem.families.mixed import MixedBatch, MixedFamily
from p2pem.gmm import FloatArray

__all__ = ["KINDS", "PROBABILITY_FLOOR", "PrivateMixedEM", "SPLITS", "bounded", "em_blocks", "init_blocks", "project_to_simplex", "release"]

#: The released block kinds of an EM iteration, in the order a split gives them fractions (then the init's).
KINDS = ("weights", "means", "covariances", "categories")

#: Budget splits over (weights, means, covariances, categories, init); the first is the default.
SPLITS: dict[str, tuple[float, ...]] = {
    # measured on Adult (docs/synthetic.md): most of the budget to the category counts, which carry most of the model
    "mixed": (0.05, 0.10, 0.10, 0.60, 0.15),
    "equal": (0.2, 0.2, 0.2, 0.2, 0.2),
}

#: Smallest category probability a private model keeps: far below anything a sample draws,
#: but with a finite log, so a row whose category every noisy component lost keeps a finite
#: likelihood (that column then weighs equally in every component's posterior).
PROBABILITY_FLOOR = 1e-100


def _sensitivities(family: MixedFamily, bound: float) -> list[tuple[int, float, float]]:
    """(block width per component, L1, L2) of every kind (module docstring's table)."""
    p, b = family.n_continuous, float(bound)
    q = p if family.covariance == "diag" else p * (p + 1) // 2
    second = (p * b * b, math.sqrt(p) * b * b) if family.covariance == "diag" else (b * b * q, b * b * math.sqrt(q))
    m = len(family.counted)
    return [(1, 1.0, 1.0), (p, p * b, math.sqrt(p) * b), (q, *second), (len(family.counted_cells), float(m), math.sqrt(m))]


def em_blocks(family: MixedFamily, n_components: int, bound: float) -> list[Block]:
    """The four released blocks of one EM iteration, in the statistics layout (some may be empty)."""
    out, start = [], 0
    for name, (width, l1, l2) in zip(KINDS, _sensitivities(family, bound), strict=True):
        out.append(Block(name, start, start + n_components * width, l1, l2))
        start += n_components * width
    return out


def init_blocks(family: MixedFamily, bound: float) -> list[Block]:
    """The four released blocks of the private initialisation (one component)."""
    return [Block(f"init-{b.name}", b.start, b.stop, b.l1, b.l2) for b in em_blocks(family, 1, bound)]


def bounded(family: MixedFamily, n_features: int) -> slice:
    """The columns the public box [-B, B] holds: the Gaussian ones (category codes have public sets of their own)."""
    return slice(0, family.n_continuous)


def release(family: MixedFamily, n_components: int, n_features: int, n_nodes: int, bound: float, *, mechanism: str,
            private_init: bool, options: RepairOptions) -> ReleaseLayout:
    """The mixed family's layout (module docstring) and its :class:`PrivateMixedEM`."""
    return ReleaseLayout(
        em=tuple(em_blocks(family, n_components, bound)),
        init=tuple(init_blocks(family, bound)) if private_init else (),
        em_size=family.stats_size(n_components, n_features) + 1,
        init_size=family.init_stats_size(n_features),
        hook=PrivateMixedEM(family, n_components, n_nodes, bound, options),
    )


def project_to_simplex(v: FloatArray) -> FloatArray:
    """Euclidean projection of every vector along the last axis onto the probability simplex.

    The sort-based algorithm of Duchi et al. (ICML 2008, Fig. 1): ``max(v - tau, 0)`` with
    the one tau that makes the result sum to 1.
    """
    shape = v.shape
    flat = v.reshape(-1, shape[-1])
    u = -np.sort(-flat, axis=1)
    css = np.cumsum(u, axis=1) - 1.0
    index = np.arange(1, shape[-1] + 1)
    positive = u - css / index > 0
    rho = shape[-1] - np.argmax(positive[:, ::-1], axis=1)
    tau = css[np.arange(len(flat)), rho - 1] / rho
    return np.maximum(flat - tau[:, None], 0.0).reshape(shape)


@dataclass(frozen=True, eq=False)
class PrivateMixedEM:
    """What a private run changes in the mixed family's EM loop (a :class:`p2pem.em.PrivacyHook`).

    ``encode`` turns a node's centred statistics into the uncentred sums that are released
    (log-likelihood blanked); ``decode`` turns noisy network averages back into centred
    statistics with every count at least one row and valid category counts; ``repair``
    post-processes the M-step; ``decode_init`` repairs the noisy global moments and counts
    of the private initialisation (module docstring).
    """

    family: MixedFamily
    n_components: int
    n_nodes: int
    bound: float
    options: RepairOptions = RepairOptions()

    def encode(self, stats: FloatArray, params: MixedBatch) -> FloatArray:
        a, b, c, counts, _ = self.family.unpack(stats, self.n_components)
        first, second = _uncentre(self.family, a, b, c, params.means)
        return self._pack(a, first, second, counts, np.zeros(stats.shape[0]))

    def decode(self, stats: FloatArray, params: MixedBatch) -> FloatArray:
        a, first, second, counts, ll = self.family.unpack(stats, self.n_components)
        a = np.maximum(a, 1.0 / self.n_nodes)  # averages: one row is 1/n
        b, c = _centre(self.family, a, first, second, params.means)
        return self._pack(a, b, c, self._counts(counts, a), ll)

    def repair(self, params: MixedBatch) -> MixedBatch:
        bound = self.bound
        weights = postprocess.clip_weights(params.weights, self.options.weight_floor, self.options.smoothing)
        means = np.clip(params.means, -bound, bound)
        if self.family.covariance == "diag":
            covariances = np.clip(params.covariances, self.options.eig_floor, bound * bound)
        else:
            covariances = postprocess.repair_covariances(params.covariances, self.options.covariance_repair, self.options.eig_floor)
        return MixedBatch(weights, means, covariances, self._floored(params.probabilities))

    def decode_init(self, rows: FloatArray) -> FloatArray:
        family, p = self.family, self.family.n_continuous
        rows = np.array(rows, dtype=float)
        count = np.maximum(rows[:, :1], 1.0 / self.n_nodes)
        mean = np.clip(rows[:, 1 : 1 + p] / count, -self.bound, self.bound)
        q = p if family.covariance == "diag" else p * (p + 1) // 2
        second = rows[:, 1 + p : 1 + p + q] / count
        if family.covariance == "diag":
            second = np.clip(second - mean * mean, self.options.eig_floor, self.bound**2) + mean * mean
        else:
            iu = np.triu_indices(p)
            for i in range(len(rows)):
                full = np.empty((p, p))
                full[iu] = second[i]
                full.T[iu] = second[i]
                cov = postprocess.repair_covariances(full - np.outer(mean[i], mean[i]), self.options.covariance_repair, self.options.eig_floor)
                second[i] = (cov + np.outer(mean[i], mean[i]))[iu]
        counts = self._counts(rows[:, None, 1 + p + q :], count, floor=True)[:, 0]
        return np.concatenate([count, count * mean, count * second, counts], axis=1)

    def _counts(self, counts: FloatArray, a: FloatArray, *, floor: bool = False) -> FloatArray:
        """Noisy category counts (N, K, S') -> counts of each column on the simplex, scaled to a_k.

        With ``floor`` every category keeps at least :data:`PROBABILITY_FLOOR` (the
        initialisation's frequencies: a category at 0 there would be 0 in every component).
        """
        out = np.empty_like(counts)
        start = 0
        for j in self.family.counted:
            size = self.family.n_categories[j]
            block = counts[..., start : start + size]
            total = block.sum(axis=-1, keepdims=True)
            shares = np.where(total > 0, block / np.where(total > 0, total, 1.0), 1.0 / size)
            shares = project_to_simplex(shares)
            if floor:
                shares = np.maximum(shares, PROBABILITY_FLOOR)
                shares = shares / shares.sum(axis=-1, keepdims=True)
            out[..., start : start + size] = shares * a[..., None]
            start += size
        return out

    def _floored(self, probabilities: FloatArray) -> FloatArray:
        out = np.maximum(probabilities, PROBABILITY_FLOOR)
        for start, size in zip(self.family.offsets, self.family.n_categories, strict=True):
            block = out[..., start : start + size]
            out[..., start : start + size] = block / block.sum(axis=-1, keepdims=True)
        if self.family.stratify is not None:
            self.family.fix_strata(out, self.n_components)
        return out

    def _pack(self, a: FloatArray, first: FloatArray, second: FloatArray, counts: FloatArray, ll: FloatArray) -> FloatArray:
        n = a.shape[0]
        return np.concatenate([a, first.reshape(n, -1), second.reshape(n, -1), counts.reshape(n, -1), ll[:, None]], axis=1)


def _uncentre(family: MixedFamily, a: FloatArray, b: FloatArray, c: FloatArray, mu: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Centred sums around ``mu`` -> sum r x and sum r x^2 (or upper sum r x x^T)."""
    first = b + a[..., None] * mu
    if family.covariance == "diag":
        return first, c + 2 * mu * b + a[..., None] * mu * mu
    iu = np.triu_indices(family.n_continuous)
    mb = mu[..., :, None] * b[..., None, :]
    full_mu = a[..., None, None] * (mu[..., :, None] * mu[..., None, :])
    extra = (mb + np.swapaxes(mb, -1, -2) + full_mu)[..., iu[0], iu[1]]
    return first, c + extra


def _centre(family: MixedFamily, a: FloatArray, first: FloatArray, second: FloatArray, mu: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The inverse of :func:`_uncentre`."""
    b = first - a[..., None] * mu
    if family.covariance == "diag":
        return b, second - 2 * mu * first + a[..., None] * mu * mu
    iu = np.triu_indices(family.n_continuous)
    mf = mu[..., :, None] * first[..., None, :]
    full_mu = a[..., None, None] * (mu[..., :, None] * mu[..., None, :])
    return b, second - (mf + np.swapaxes(mf, -1, -2) - full_mu)[..., iu[0], iu[1]]
