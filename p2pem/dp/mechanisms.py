"""What a differentially private EM run releases, how sensitive it is, and the noise it adds.

The sensitivities below are stated for adding or removing one row, the relation of Park et al.
(AISTATS 2017) and of dp-accounting's ``ADD_OR_REMOVE_ONE``.  p2pem's neighbouring relation is
replace-one with n public (:mod:`p2pem.dp.publication`: row counts are published), under which
a release moves by at most twice as much; the calibration doubles them
(:func:`p2pem.dp.protocols.replace_one`).  The data domain is
public: every feature lies in ``[-bound, bound]`` (the user states ``bound``; rows are clipped
to it before anything is computed).

Released statistics
-------------------
A private run releases *uncentred* sums, whose sensitivity does not depend on the current
means (for the centred sums that :mod:`p2pem.gmm` aggregates, |x - mu| <= 2B would double
the means' and quadruple the covariances' sensitivity)::

    block          per-row contribution      L1 sensitivity        L2 sensitivity
    -------------  ------------------------  --------------------  -----------------------
    "weights"      r_k                       1                     1
    "means"        r_k x                     d B                   sqrt(d) B
    "covariances"  r_k upper(x x^T)          B^2 d (d + 1) / 2     B^2 sqrt(d (d + 1) / 2)

and, for the private initialisation, the same three blocks with one component (r = 1): the
count, sum x and upper(sum x x^T).  Derivation: adding or removing row x changes a block by
``r (x) phi(x)`` with r in the probability simplex (responsibilities sum to one).  Its L1 norm
is ``sum_k r_k ||phi(x)||_1 = ||phi(x)||_1``; its L2 norm is ``||r||_2 ||phi(x)||_2 <=
||phi(x)||_2`` since ``||r||_2 <= ||r||_1 = 1``.  With |x_j| <= B: ``||x||_1 <= d B``,
``||x||_2 <= sqrt(d) B``; upper(x x^T) has d(d+1)/2 entries of size at most B^2.  All bounds
are attained at a corner of the box with a one-hot r, so they are tight (the tests search
neighbouring data sets by brute force).  These are the usual bounds for bounded sums (Dwork &
Roth 2014, Sec. 3.3); Park et al. (2017, Sec. 4) instead bound the sensitivity of the
M-step outputs, which needs a lower bound on the counts.

The log-likelihood entry is not released (it carries 0; a private run reports NaN) and the continue
flag is data independent, because a private run has ``tol = 0``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np

from p2pem.dp.discrete import DISCRETE_SAMPLER
from p2pem.gmm import FloatArray, stats_size

MECHANISMS = ("gaussian", "laplace")


@dataclass(frozen=True)
class Block:
    """One group of released coordinates with its sensitivities.

    Parameters
    ----------
    name : str
        The Gaussian family: "weights", "means" or "covariances" (per EM iteration), or
        "init-count", "init-sum", "init-second" (once, for the private initialisation);
        other families name their own (:mod:`p2pem.dp.releases`).
    start, stop : int
        Where the block sits in the released vector.
    l1, l2 : float
        L1 and L2 sensitivity under adding or removing one row (module docstring).
    kind : str
        Which fraction of the budget split pays for it: "weights", "means", "covariances"
        (per EM iteration) or "init" (:data:`p2pem.dp.accounting.SPLIT_BLOCKS`); blocks of
        one kind share its fraction equally.  Default: the name ("init" for "init-...").
    unit : bool
        The block's sensitivity depends on the *public* current model (skew-normal: the
        sums weighted by r1 and r2, :mod:`p2pem.dp.releases.skewnormal`).  The family's hook
        then releases the block divided by its sensitivity at that model, so ``l1 = l2 = 1``
        here and the calibrated scale is a noise multiplier: the noise on the block in its
        own units is multiplier x sensitivity, iteration by iteration, and each release
        costs what its multiplier costs (what the accountants compose).
    """

    name: str
    start: int
    stop: int
    l1: float
    l2: float
    kind: str = ""
    unit: bool = False

    @property
    def split_kind(self) -> str:
        """The split fraction that pays for this block (``kind``, or one read off the name)."""
        return self.kind or ("init" if self.name.startswith("init") else self.name)

    @property
    def index(self) -> slice:
        return slice(self.start, self.stop)


def moment_sensitivities(n_features: int, bound: float) -> tuple[tuple[float, float], tuple[float, float], tuple[float, float]]:
    """(L1, L2) sensitivities of r_k, r_k x and r_k upper(x x^T) (module docstring).

    Parameters
    ----------
    n_features : int
        d.
    bound : float
        B: every feature lies in [-B, B].
    """
    d, b = n_features, float(bound)
    tri = d * (d + 1) / 2
    return (1.0, 1.0), (d * b, math.sqrt(d) * b), (b * b * tri, b * b * math.sqrt(tri))


def em_blocks(n_components: int, n_features: int, bound: float) -> list[Block]:
    """The three released blocks of one EM iteration, in the layout of :mod:`p2pem.gmm`."""
    k, d = n_components, n_features
    (c1, c2), (m1, m2), (s1, s2) = moment_sensitivities(d, bound)
    tri = d * (d + 1) // 2
    return [
        Block("weights", 0, k, c1, c2),
        Block("means", k, k + k * d, m1, m2),
        Block("covariances", k + k * d, k + k * d + k * tri, s1, s2),
    ]


def init_blocks(n_features: int, bound: float) -> list[Block]:
    """The three released blocks of the private initialisation (:func:`p2pem.gmm.init_statistics`)."""
    d = n_features
    (c1, c2), (m1, m2), (s1, s2) = moment_sensitivities(d, bound)
    return [
        Block("init-count", 0, 1, c1, c2),
        Block("init-sum", 1, 1 + d, m1, m2),
        Block("init-second", 1 + d, 1 + d + d * (d + 1) // 2, s1, s2),
    ]


def em_release_size(n_components: int, n_features: int) -> int:
    """Length of the vector an EM iteration of the Gaussian family aggregates: statistics plus the continue flag."""
    return stats_size(n_components, n_features) + 1


def block_norms(stats: FloatArray, blocks: list[Block]) -> dict[str, tuple[FloatArray, FloatArray]]:
    """Per block, the (L1, L2) norms of the rows of ``stats`` (N, P) restricted to it (for sensitivity checks)."""
    return {b.name: (np.abs(stats[:, b.index]).sum(axis=1), np.sqrt((stats[:, b.index] ** 2).sum(axis=1))) for b in blocks}


def scale_vector(blocks: list[Block], scales: list[float], size: int) -> FloatArray:
    """Per-coordinate noise scale: block j's coordinates get ``scales[j]``, the rest 0."""
    out = np.zeros(size)
    for block, s in zip(blocks, scales, strict=True):
        out[block.index] = s
    return out


#: Set by :func:`hardened_noise`: :func:`noise` draws from OpenDP's exact samplers instead of ``rng``.
_HARDENED: ContextVar[bool] = ContextVar("p2pem_hardened_noise", default=False)

#: What a privacy block says about the noise sampler of a publication.
HARDENED_SAMPLER = ("opendp: OpenDP's exact samplers (discrete Gaussian/Laplace scaled to a floating-point grid), which "
                    "resist attacks on the low bits of floating-point noise (Mironov 2012)")
FLOAT_SAMPLER = ("numpy floating-point sampling: NOT hardened against attacks on the low bits of floating-point noise "
                 "(Mironov 2012)")


def count_sampler(noise_mode: str) -> str:
    """What a Bayesian-network or marginal release's privacy block says about its count noise.

    ``noise = "central"``: every node repeats the draw of :mod:`p2pem.dp.discrete` (exact discrete
    Laplace/Gaussian) from the shared seed.  ``"shares"``: the noise is the sum of the nodes'
    floating-point shares (:func:`noise_share`), not hardened.
    """
    if noise_mode == "shares":
        return FLOAT_SAMPLER + " (the nodes' noise shares; the similarity matrix and any central draw use the discrete sampler)"
    return DISCRETE_SAMPLER


@contextmanager
def hardened_noise() -> Iterator[None]:
    """Inside the block, :func:`noise` draws from OpenDP's samplers (:func:`exact_noise`), from OS entropy.

    Used where one party draws the noise of a publication (``dp-central``'s aggregator); draws
    that several parties must repeat from a shared seed, and noise shares, stay on ``rng``.
    Reproducibility is lost inside the block: OpenDP cannot be seeded.
    """
    token = _HARDENED.set(True)
    try:
        yield
    finally:
        _HARDENED.reset(token)


def exact_noise(scale: FloatArray, mechanism: str) -> FloatArray:
    """Noise of per-coordinate ``scale`` from OpenDP's samplers (``make_gaussian``/``make_laplace``).

    OpenDP samples the discrete Gaussian or Laplace exactly (Canonne, Kamath & Steinke 2020) on a
    grid and releases floats on that grid, so the output's low bits carry nothing about the
    input (the floating-point attack of Mironov, CCS 2012).  One measurement per distinct scale;
    a zero scale adds exactly 0.  OpenDP marks these constructors "contrib" (implemented and
    tested, proofs under review); the module enables that feature when it samples.
    """
    import opendp.prelude as dp  # here: loaded only when a publication samples (start-up time)

    dp.enable_features("contrib")
    out = np.zeros(scale.shape)
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False))
    for s in np.unique(scale[scale > 0]):
        mask = scale == s
        if mechanism == "gaussian":
            meas = dp.m.make_gaussian(domain, dp.l2_distance(T=float), scale=float(s))
        else:
            meas = dp.m.make_laplace(domain, dp.l1_distance(T=float), scale=float(s))
        out[mask] = np.asarray(meas([0.0] * int(mask.sum())), dtype=np.float64)
    return out


def noise(rng: np.random.Generator, scale: FloatArray, mechanism: str) -> FloatArray:
    """One draw of the mechanism's noise: N(0, scale^2) or Laplace(0, scale) per coordinate.

    The draw has the full length even where ``scale`` is 0 (so the stream advances the same
    way whatever the budget); a zero scale adds exactly 0.  Inside :func:`hardened_noise` the
    draw comes from :func:`exact_noise` instead (``rng`` is left alone).
    """
    if _HARDENED.get():
        return exact_noise(scale, mechanism)
    if mechanism == "gaussian":
        return rng.standard_normal(scale.shape) * scale
    return rng.laplace(0.0, 1.0, scale.shape) * scale


def noise_share(rng: np.random.Generator, scale: FloatArray, mechanism: str, n_shares: int) -> FloatArray:
    """One node's share of distributed noise: any ``n_shares`` of them sum to :func:`noise`.

    Gaussian: N(0, scale^2 / n_shares) per node.  Laplace: G1 - G2 with G1, G2 ~
    Gamma(1/n_shares, scale) independent; Laplace is infinitely divisible and a sum of
    ``n_shares`` of them is Gamma(1, scale) - Gamma(1, scale) = Laplace(0, scale) (Kotz,
    Kozubowski & Podgorski, *The Laplace Distribution and Generalizations*, 2001; the
    construction of distributed Laplace noise in Acs & Castelluccia, "I have a DREAM!",
    Information Hiding 2011).

    With n nodes each drawing a share, ``n_shares = n - t`` makes the guarantee survive t
    colluding nodes: whatever t shares they know and subtract, the n - t they do not know
    sum to exactly the calibrated noise (:mod:`p2pem.dp.protocols` has the analysis per
    adversary).  ``n_shares = n`` is the all-honest case: all n shares together make the noise.
    """
    if mechanism == "gaussian":
        return rng.standard_normal(scale.shape) * (scale / math.sqrt(n_shares))
    shape = 1.0 / n_shares
    return (rng.standard_gamma(shape, scale.shape) - rng.standard_gamma(shape, scale.shape)) * scale


def noise_std(scale: FloatArray, mechanism: str) -> FloatArray:
    """Standard deviation of :func:`noise` (Laplace(b) has variance 2 b^2)."""
    return scale if mechanism == "gaussian" else math.sqrt(2.0) * scale


def exponential_probabilities(utilities: FloatArray, epsilon: float, sensitivity: float) -> FloatArray:
    """Selection probabilities of :func:`exponential_mechanism`: ``exp(eps u / (2 Delta u))``, normalised.

    ``epsilon = inf`` puts all mass on the first candidate of largest utility (no privacy).
    """
    u = np.asarray(utilities, dtype=np.float64)
    if u.ndim != 1 or u.size == 0 or not np.all(np.isfinite(u)):
        raise ValueError(f"the exponential mechanism needs a non-empty vector of finite utilities, got shape {u.shape}")
    if math.isinf(epsilon):
        out = np.zeros(u.size)
        out[int(np.argmax(u))] = 1.0
        return out
    if not (epsilon > 0 and sensitivity > 0):
        raise ValueError(f"the exponential mechanism needs epsilon > 0 and sensitivity > 0, got {epsilon!r}, {sensitivity!r}")
    logits = (epsilon / (2.0 * sensitivity)) * u
    weights = np.exp(logits - logits.max())
    return weights / weights.sum()


def exponential_mechanism(utilities: FloatArray, epsilon: float, sensitivity: float, rng: np.random.Generator) -> int:
    """Index of one candidate drawn with probability proportional to ``exp(eps u / (2 Delta u))``.

    The exponential mechanism of McSherry & Talwar (FOCS 2007): epsilon-DP (pure) when every
    utility changes by at most ``sensitivity`` between neighbouring data sets.  It is the
    report-noisy-max of the utilities with Gumbel noise of scale ``2 Delta u / epsilon``, the
    scale :mod:`p2pem.dp.accounting` records for it (mechanism ``"exponential"``).

    One uniform draw picks the index by inverse CDF, so nodes that hold the same utilities
    and the same shared generator pick the same candidate.

    Parameters
    ----------
    utilities : (m,) array
        The score of every candidate.
    epsilon : float
        The budget of this one selection; ``inf`` picks the first best candidate.
    sensitivity : float
        Delta u: the largest change of any candidate's utility between neighbours.
    rng : numpy.random.Generator
        The only source of randomness (always advanced by one draw).
    """
    p = exponential_probabilities(utilities, epsilon, sensitivity)
    draw = rng.random()
    index = int(np.searchsorted(np.cumsum(p), draw * p.sum(), side="right"))
    return min(index, p.size - 1)
