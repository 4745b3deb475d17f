"""``dp-msnm``: DP-MSNM as printed in Wu (*Sci. Rep.* 11:11009, 2021), as a baseline.

Wu, W. (2021) "Differentially private density estimation with skew-normal mixtures model",
*Scientific Reports* 11:11009, doi:10.1038/s41598-021-90276-6.

**A reproduction, not a recommendation.**  DP-MSNM fits a skew-normal mixture centrally (a
trusted curator holds every row) by EM in the working parametrisation of its eqs. (8)-(10):
weights pi, locations xi, skew vectors eta (= Delta of :mod:`p2pem.snmix`) and Lambda
(= Gamma).  After every M-step it perturbs the *outputs* with Laplace noise (output
perturbation) and post-processes them.  Everything below is what the paper prints:

* budget (its Algorithm 2): epsilon over T iterations and G components;
  ``eps_Lambda = 0.6 eps / (T G)``, ``eps_xi = eps_eta = 0.13 eps / (T G)`` for every
  component and iteration, and the weights the rest, ``eps_pi = 0.14 eps / T`` per
  iteration, so that ``T (eps_pi + G (eps_xi + eps_eta + eps_Lambda)) = eps`` (sequential
  composition);
* sensitivities, Lemmas 1-4, under the paper's assumptions: every row has
  ``||x||_1 <= R`` (here R = d B for the public box [-B, B]^d), ``|r1| <= R1`` and
  ``|r2| <= R2`` (the latent moments E[tau | x] and E[tau^2 | x], bounded over the box at
  the current, public parameters), ``||eta_k||_1 <= R3`` (the current eta_k), and **every
  component's soft count N_k >= n / (2G)**: a public lower bound on component size (the
  paper's "well-separated" assumption), which the data must satisfy for the lemmas to
  hold::

      Lemma 1  pi        G / n
      Lemma 2  xi_k      4 G (R - R3) / n          (|R - R3| when R3 > R)
      Lemma 3  eta_k     2 G R R1 / (n R2)
      Lemma 4  Lambda_k  2 G (R^2 + 4 R R1 R3 + 4 R2 R3^2) / n

* weights: min-max normalisation, pi' = (pi - min pi) / (max pi - min pi), then smoothing
  zeta, pi = (pi' + zeta) / sum (pi' + zeta);
* Lambda: symmetric noise (the upper triangle, mirrored), then the diagonal shift
  Lambda + rho(Lambda) I to positive (semi-)definiteness (Higham 1988, as Wu et al. 2016;
  :func:`p2pem.dp.postprocess.repair_covariances` with ``"diagshift"``).

**What the printed method does not guarantee** (kept, so that the baseline is the paper's):

1. Lemma 2 bounds ||x - eta t1|| by R - R3; the triangle inequality gives R + R3, so the
   location's sensitivity is understated (to zero when ||eta_k||_1 = R;
   ``tests/test_dp_msnm.py`` finds a neighbouring data set, assumption satisfied, that moves
   xi_k by more than the lemma allows).
2. Lemma 3 divides by R2, an *upper* bound of t2, where the denominator sum_i z_ik t2_ik
   needs a *lower* bound.
3. The assumption N_k >= n / (2G) is about the private data: nothing checks it, and a
   smaller component has a larger sensitivity than the noise is calibrated to.
4. The min-max normalisation maps every 2-component model to the same weights,
   (zeta, 1 + zeta) / (1 + 2 zeta), whatever the data: with G = 2 the released weights
   carry no information.
5. The paper initialises by differentially private k-means (Zhang et al., PrivGene) and
   does not count its budget in epsilon; here the initialisation is p2pem's exact private
   initialisation (global moments and skewness signs), also unbudgeted.

So the epsilon it reports is the one the paper claims, **not** a guarantee: its
``privacy`` block says so.
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

__all__ = ["DPMSNM", "MSNM_SPLIT", "MsnmHook", "msnm_bounds", "msnm_budgets", "msnm_sensitivities"]

#: DP-MSNM's budget shares (pi, xi, eta, Lambda) of each iteration's epsilon / T: xi, eta and
#: Lambda are each shared among the G components (Algorithm 2 of Wu 2021), pi is the rest.
MSNM_SPLIT = (0.14, 0.13, 0.13, 0.6)


def msnm_budgets(epsilon: float, n_iter: int, n_components: int) -> tuple[float, float, float, float]:
    """Per-release epsilons (eps_pi, eps_xi, eps_eta, eps_Lambda) of one iteration (Algorithm 2 of Wu 2021).

    eps_Lambda = 0.6 eps / (T G), eps_xi = eps_eta = 0.13 eps / (T G) for each of the G
    components, eps_pi = eps / T - G (eps_xi + eps_eta + eps_Lambda) = 0.14 eps / T.
    """
    per_iter = epsilon / n_iter
    eps_xi = 0.13 * per_iter / n_components
    eps_eta = 0.13 * per_iter / n_components
    eps_lam = 0.6 * per_iter / n_components
    return (1.0 - 0.13 - 0.13 - 0.6) * per_iter, eps_xi, eps_eta, eps_lam  # the rest: 0.14 eps / T


def msnm_bounds(params: SkewNormalBatch, bound: float) -> tuple[float, FloatArray, FloatArray, FloatArray]:
    """(R, R1, R2, R3) of Lemmas 2-4 per node and component: R = d B (the largest ||x||_1 in the
    box [-B, B]^d), R1 and R2 the largest E[tau | x] and E[tau^2 | x] over the box at ``params``
    (both increase with mu_tau, largest at the box's corner that maximises it), R3 = ||eta_k||_1."""
    d = params.locations.shape[-1]
    c, q = gamma_inv_delta(params.deltas, params.prec_chol)
    m2 = 1.0 / (1.0 + q)
    m = np.sqrt(m2)
    reach = bound * np.abs(c).sum(axis=-1)
    centre = (c * params.locations).sum(axis=-1)
    r1, r2 = latent_moments(m * (reach - centre), m, m2)  # mu_tau = M^2 c.(x - xi), z = mu_tau / M
    return d * bound, r1, r2, np.abs(params.deltas).sum(axis=-1)


def msnm_sensitivities(params: SkewNormalBatch, n_rows: int, bound: float) -> tuple[FloatArray, ...]:
    """Lemmas 1-4 of Wu (2021) as printed (module docstring), per node and component: (pi, xi, eta, Lambda).

    Valid only under the paper's assumption N_k >= n / (2G) (and, for Lemmas 2 and 3, not
    even then: flaws 1 and 2 of the module docstring).
    """
    g = params.weights.shape[-1]
    radius, r1, r2, r3 = msnm_bounds(params, bound)
    s_pi = np.full_like(r1, g / n_rows)
    s_xi = 4 * g * np.abs(radius - r3) / n_rows
    s_eta = 2 * g * radius * r1 / (n_rows * r2)
    s_lam = 2 * g * (radius**2 + 4 * radius * r1 * r3 + 4 * r2 * r3**2) / n_rows
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

    def scales(self, params: SkewNormalBatch) -> tuple[FloatArray, ...]:
        """Laplace scales S / eps of (pi, xi, eta, Lambda) per node and component, at the M-step's input ``params``."""
        eps = msnm_budgets(self.epsilon, self.n_iter, params.weights.shape[-1])
        return tuple(s / e for s, e in zip(msnm_sensitivities(params, self.n_rows, self.bound), eps, strict=True))

    def repair(self, params: SkewNormalBatch) -> SkewNormalBatch:
        """Laplace noise on (pi, xi, eta, Lambda) at the scales of :meth:`scales`, then the post-processing."""
        k, d = params.weights.shape[-1], params.locations.shape[-1]
        b_pi, b_xi, b_eta, b_lam = self.scales(params)
        n = params.n_nodes
        weights = params.weights + self.rng.laplace(0.0, 1.0, (n, k)) * b_pi
        locations = params.locations + self.rng.laplace(0.0, 1.0, (n, k, d)) * b_xi[..., None]
        deltas = params.deltas + self.rng.laplace(0.0, 1.0, (n, k, d)) * b_eta[..., None]
        iu = np.triu_indices(d)
        upper = self.rng.laplace(0.0, 1.0, (n, k, len(iu[0]))) * b_lam[..., None]
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
    """``dp-msnm``: DP-MSNM (Wu 2021) as printed: its budget split and Lemmas 1-4 (module docstring); skew-normal only.

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
                "everything: DP-MSNM is reproduced as printed, and its Lemmas 2 and 3 are not bounds (Lemma 2's R - R3 "
                "where R + R3 holds, Lemma 3's upper bound R2 used as a lower bound), so the claimed epsilon is no guarantee",
                "rows of a component smaller than n / (2G): Lemmas 2-4 assume every component's soft count is at least "
                "n / (2G) (the paper's well-separated assumption), which nothing checks",
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
