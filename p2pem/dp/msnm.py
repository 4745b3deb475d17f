"""``dp-msnm``: DP-MSNM of Wu (*Sci. Rep.* 11:11009, 2021), a replication with its flaws, as a baseline.

**A replication, not a recommendation.**  DP-MSNM fits a skew-normal mixture centrally (a
trusted curator holds every row) by EM in the working parametrisation of Lin (2009):
weights pi, locations xi, skew vectors eta (= Delta of :mod:`p2pem.snmix`) and Lambda
(= Gamma).  After every M-step it perturbs the *outputs* with Laplace noise (output
perturbation) and post-processes them:

* budget: epsilon over T iterations and G components, split 0.6 / 0.13 / 0.13 / 0.14 over
  pi, xi, eta, Lambda: each component's parameter gets ``share * epsilon / (T G)`` per
  iteration (sequential composition);
* sensitivities (Lemmas 1-4) with R = sqrt(d) B the radius of the data domain, R1 and R2
  bounds of the latent moments t1 = E[tau | x] and t2 = E[tau^2 | x] over the domain at the
  current parameters, R3 = R1 ||eta_k||, and n_k = n pi_k::

      Lemma 1  pi_k      1 / n
      Lemma 2  xi_k      |R - R3| / n_k
      Lemma 3  eta_k     R1 (R + ||xi_k||) / (n R2)
      Lemma 4  Lambda_k  ((R + ||xi_k||)^2 + 2 R1 ||eta_k|| (R + ||xi_k||) + R2 ||eta_k||^2) / n_k

* weights: min-max normalisation, pi' = (pi - min pi) / (max pi - min pi), then smoothing
  zeta, pi = (pi' + zeta) / sum (pi' + zeta);
* Lambda: symmetric noise, then a diagonal shift to positive (semi-)definiteness
  (:func:`p2pem.dp.postprocess.repair_covariances` with ``"diagshift"``).

**Its flaws, kept on purpose** (so the baseline is the published method):

1. Lemma 2 bounds ||x - eta t1|| by R - R3; the triangle inequality gives R + R3, so the
   location's sensitivity is understated (by any amount: R3 > R even flips its sign, taken
   in absolute value here).
2. Lemma 3 divides by R2, an *upper* bound of t2, where the denominator sum_i z_ik t2_ik
   needs a *lower* bound: the skew vector's sensitivity is understated.
3. Lemmas 2 and 4 divide by n_k = n pi_k, which depends on the private data (and, after the
   first iteration, on the noisy weights): a data-dependent sensitivity is no sensitivity.
4. The min-max normalisation maps every 2-component model to the same weights,
   (zeta, 1 + zeta) / (1 + 2 zeta), whatever the data: with G = 2 the released weights
   carry no information (and no noise is needed to hide them).
5. The initialisation is unbudgeted: it uses the exact data (here the exact private
   initialisation of p2pem, global moments and skewness signs, with no noise).

So the epsilon it reports is the one the paper claims, **not** a guarantee: its
``privacy`` block says so.  The lemma constants above are this project's reading of the
paper as issue 19 summarises it (the printed text was not at hand here); the flaws named
in issue 19 (1, 2, 4, 5) are the ones stated there.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Union

import numpy as np

from p2pem.dp import postprocess
from p2pem.errors import ConfigError
from p2pem.families.skewnormal import SkewNormalBatch, SkewNormalFamily
from p2pem.gmm import FloatArray
from p2pem.protocols.centralized import Centralized
from p2pem.protocols.base import parameter_fields
from p2pem.snmix import gamma_inv_delta, latent_moments
from p2pem.streams import protocol_streams

if TYPE_CHECKING:
    from p2pem.em import EMSettings

__all__ = ["DPMSNM", "MSNM_SPLIT", "MsnmHook", "msnm_sensitivities"]

#: DP-MSNM's budget split over (pi, xi, eta, Lambda).
MSNM_SPLIT = (0.6, 0.13, 0.13, 0.14)


def msnm_sensitivities(params: SkewNormalBatch, n_rows: int, bound: float) -> tuple[FloatArray, ...]:
    """Lemmas 1-4 as DP-MSNM uses them (module docstring), per node and component: (pi, xi, eta, Lambda)."""
    d = params.locations.shape[-1]
    radius = math.sqrt(d) * bound
    c, q = gamma_inv_delta(params.deltas, params.prec_chol)
    m2 = 1.0 / (1.0 + q)
    m = np.sqrt(m2)
    reach = bound * np.abs(c).sum(axis=-1)
    centre = (c * params.locations).sum(axis=-1)
    r1, r2 = latent_moments(m * (reach - centre), m, m2)  # t1, t2 at the domain's maximising corner
    eta = np.sqrt((params.deltas**2).sum(axis=-1))
    xi = np.sqrt((params.locations**2).sum(axis=-1))
    n_k = n_rows * params.weights
    r3 = r1 * eta
    s_pi = np.full_like(n_k, 1.0 / n_rows)
    s_xi = np.abs(radius - r3) / n_k  # flaw 1: R - R3 where R + R3 holds
    s_eta = r1 * (radius + xi) / (n_rows * r2)  # flaw 2: R2 (an upper bound) in the denominator
    s_lam = ((radius + xi) ** 2 + 2 * r1 * eta * (radius + xi) + r2 * eta**2) / n_k
    return s_pi, s_xi, s_eta, s_lam


@dataclass(frozen=True, eq=False)
class MsnmHook:
    """DP-MSNM's noise and post-processing after every M-step (a :class:`p2pem.em.PrivacyHook`).

    ``encode`` and ``decode`` pass the exact statistics through (the curator holds the
    rows); ``repair`` is where DP-MSNM adds its Laplace noise to the M-step's outputs and
    normalises them; ``decode_init`` leaves the initialisation exact (flaw 5).
    """

    n_rows: int
    n_iter: int
    bound: float
    epsilon: float
    zeta: float
    rng: np.random.Generator

    def encode(self, stats: FloatArray, params: SkewNormalBatch) -> FloatArray:
        return stats

    def decode(self, stats: FloatArray, params: SkewNormalBatch) -> FloatArray:
        return stats

    def decode_init(self, rows: FloatArray) -> FloatArray:
        return rows  # flaw 5: the initialisation spends no budget

    def repair(self, params: SkewNormalBatch) -> SkewNormalBatch:
        """Laplace noise on (pi, xi, eta, Lambda) at ``share * epsilon / (T G)`` each, then the post-processing."""
        k, d = params.weights.shape[-1], params.locations.shape[-1]
        per = [s * self.epsilon / (self.n_iter * k) for s in MSNM_SPLIT]
        s_pi, s_xi, s_eta, s_lam = msnm_sensitivities(params, self.n_rows, self.bound)
        n = params.n_nodes
        weights = params.weights + self.rng.laplace(0.0, 1.0, (n, k)) * (s_pi / per[0])
        locations = params.locations + self.rng.laplace(0.0, 1.0, (n, k, d)) * (s_xi / per[1])[..., None]
        deltas = params.deltas + self.rng.laplace(0.0, 1.0, (n, k, d)) * (s_eta / per[2])[..., None]
        iu = np.triu_indices(d)
        upper = self.rng.laplace(0.0, 1.0, (n, k, len(iu[0]))) * (s_lam / per[3])[..., None]
        noise = np.zeros((n, k, d, d))
        noise[..., iu[0], iu[1]] = upper
        noise[..., iu[1], iu[0]] = upper
        gammas = postprocess.repair_covariances(params.gammas + noise, "diagshift", 1e-3)
        return SkewNormalBatch(min_max_weights(weights, self.zeta), locations, deltas, gammas)


def min_max_weights(weights: FloatArray, zeta: float) -> FloatArray:
    """DP-MSNM's weight normalisation: (pi - min) / (max - min), plus ``zeta``, renormalised.

    Every row with two components becomes (zeta, 1 + zeta) / (1 + 2 zeta) in some order (flaw 4);
    a row whose weights are all equal (one component) becomes uniform.
    """
    lo = weights.min(axis=-1, keepdims=True)
    span = weights.max(axis=-1, keepdims=True) - lo
    scaled = np.where(span > 0, (weights - lo) / np.where(span > 0, span, 1.0), 1.0)
    smoothed = scaled + zeta
    return smoothed / smoothed.sum(axis=-1, keepdims=True)


@dataclass(frozen=True)
class DPMSNM(Centralized):
    """``dp-msnm``: DP-MSNM (Wu 2021) replicated with its flaws (module docstring); skew-normal only.

    Parameters
    ----------
    epsilon : float
        The budget the paper's accounting spends over the whole run (Laplace, sequential
        composition); ``inf`` adds no noise.  Not a guarantee (module docstring).
    bound : float or None
        Public data domain [-bound, bound] per feature (rows are clipped); None reads it off
        the data (as the paper's normalisation does).
    zeta : float
        Smoothing of the min-max weight normalisation (> 0).
    """

    epsilon: float = 1.0
    bound: Union[float, None] = None
    zeta: float = 0.1
    name: str = field(init=False, default="dp-msnm")

    def __post_init__(self) -> None:
        if not (isinstance(self.epsilon, (int, float)) and not isinstance(self.epsilon, bool) and self.epsilon > 0):
            raise ConfigError(f"dp-msnm: epsilon must be a number > 0 (inf: no noise), got {self.epsilon!r}")
        if self.bound is not None and not (math.isfinite(self.bound) and self.bound > 0):
            raise ConfigError(f"dp-msnm: bound must be a finite number > 0, got {self.bound!r}")
        if not (isinstance(self.zeta, (int, float)) and math.isfinite(self.zeta) and self.zeta > 0):
            raise ConfigError(f"dp-msnm: zeta must be a finite number > 0, got {self.zeta!r}")

    @property
    def label(self) -> str:
        return "dp-msnm"

    def bind(self, settings: EMSettings, parts: list[FloatArray], *, seed: int | np.random.SeedSequence = 0):
        """Clip the rows to the domain and hook DP-MSNM's output perturbation into the EM.

        Raises
        ------
        ConfigError
            The family is not skew-normal, ``tol`` is not 0 or ``max_iter`` is 0.
        """
        if not isinstance(settings.family, SkewNormalFamily):
            raise ConfigError(f"dp-msnm: DP-MSNM fits skew-normal mixtures: set [em] family = \"skew-normal\", not {settings.family.name!r}")
        if settings.tol != 0 or settings.max_iter < 1:
            raise ConfigError("dp-msnm: the budget is split over a fixed number of EM iterations: set tol = 0 and max_iter >= 1 (the estimator's tol and max_iter; [em] tol and max_iter in a scenario)")
        bound = self.bound if self.bound is not None else float(max(np.max(np.abs(p)) for p in parts))
        clipped = [np.clip(p, -bound, bound) for p in parts]
        n_rows = int(sum(len(p) for p in parts))
        rng = protocol_streams(seed, len(parts))[-1]  # the curator's stream
        hook = MsnmHook(n_rows, settings.max_iter, bound, float(self.epsilon), float(self.zeta), rng)
        return self, dataclasses.replace(settings, privacy=hook), clipped

    def privacy(self) -> dict:
        """The ``privacy`` block: the epsilon the paper's accounting claims, marked as no guarantee."""
        claimed = None if math.isinf(self.epsilon) else float(self.epsilon)
        return {
            "accountant": "basic",
            "delta": 0.0,
            "colluders": 0,
            "epsilon": {"outsider": None, "colluders": None, "claimed": claimed},
            "excluded": [
                "everything: DP-MSNM is replicated as published, and its sensitivities are not bounds (Lemma 2's R - R3, "
                "Lemma 3's upper bound R2 used as a lower bound, data-dependent n pi_k), so the claimed epsilon is no guarantee",
                "the initialisation: computed from the exact data, unbudgeted",
                "the trusted curator, which holds every row",
            ],
        }

    def params(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in parameter_fields(self)}
        if out["epsilon"] == math.inf:
            out["epsilon"] = None
        out["privacy"] = self.privacy()
        return out
