"""A private Bayes classifier: one Gaussian mixture per class, classification by the posterior.

After Xi, Kantarcioglu & Inan, "Mixture of Gaussian models and Bayes error under differential
privacy" (ACM CODASPY 2011; the journal-length follow-up is Tong, Xi, Kantarcioglu & Inan,
DBSec 2017): each class c gets its own model p(x | c) and a row is assigned to
``argmax_c log pi_c + log p(x | c)``.

* :func:`fit_xi2011` is the paper's mechanism as printed: one Gaussian per class from the
  class's mean and covariance with Laplace noise (its Theorems 3.1 and 3.7), the covariance
  repaired by its eigenvalue heuristic, the class sizes public.
* :func:`fit_bayes` is p2pem's: each class model is a mixture fitted by any protocol (private
  or not) to the class's rows spread over the network.  A private protocol's budget epsilon
  is split: ``count_share`` of it releases the class counts (Laplace; L1 sensitivity 2 under
  p2pem's replace-one neighbours, a replaced row can leave one class for another; noise
  added as the protocol adds it: the aggregator's one draw for ``dp-central``, every node's
  share for ``dp-distributed``), the rest fits the class models (parallel composition over
  the disjoint classes, McSherry, SIGMOD 2009; sequential with the counts).  The noisy
  counts decide, by a public rule, whether the models can be trusted: a class model is
  *usable* when the noise its fit will add to a component's mean, one standard deviation in
  L2 over the d coordinates at the class's noisy count, is at most ``max_mean_noise`` times
  the data bound B.  If any class fails that, no model is fitted and the rest of the budget
  buys a second count release; the classifier then predicts the **DP majority class** (the
  argmax of the two releases combined by inverse variance) for every row: it is the
  constant classifier the budget could have released, at (1 + share) / 1 of its noise
  variance, instead of a classifier worse than a constant (Xi et al.'s Figs. 2-5 at small n).
  Otherwise the priors are the noisy counts, post-processed to at least one row and
  normalised; the mixture weights inside each class model are the protocol's (clipped at
  its ``weight_floor``).  Without noise (a non-private protocol) the counts are exact and
  the models always used.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np

from p2pem.dp import mechanisms, postprocess
from p2pem.dp.protocols import DPCentral, DPProtocol
from p2pem.em import EMSettings
from p2pem.errors import ConfigError, DataError
from p2pem.gmm import FloatArray, GMMParams, e_step
from p2pem.protocols import ProtocolSpec
from p2pem.simulate import RunResult, run_protocol
from p2pem.streams import child


#: L1 sensitivity of the class counts under replace-one neighbours (one class loses a row, another gains it)
COUNT_SENSITIVITY = 2.0


@dataclass(frozen=True, eq=False)
class BayesClassifier:
    """Fitted class models.

    Attributes
    ----------
    classes : (C,) array
        The class labels, sorted.
    priors : (C,) array
        pi_c, summing to 1: the class counts (noisy when private), post-processed.
    models : tuple of GMMParams
        p(x | c), one per class; empty when the classifier is the constant ``fallback``.
    runs : tuple of RunResult
        The protocol run that fitted each class model.
    excluded : tuple of str
        What a private classifier's epsilon does not cover beyond its releases.
    fallback : int or None
        The index of the class every row is assigned to when the class models were not
        usable (the DP majority class); None when the models classify.
    counts : (C,) array
        The class counts the priors and the fall-back decision come from (noisy when private).
    """

    classes: FloatArray
    priors: FloatArray
    models: tuple[GMMParams, ...]
    runs: tuple[RunResult, ...] = ()
    excluded: tuple[str, ...] = ()
    fallback: int | None = None
    counts: FloatArray | None = None

    def log_posterior(self, X: FloatArray) -> FloatArray:
        """(n, C) unnormalised log posteriors log pi_c + log p(x | c) (log pi_c alone for the fall-back)."""
        X = np.asarray(X, dtype=float)
        if self.fallback is not None:
            out = np.full((len(X), len(self.classes)), -np.inf)
            out[:, self.fallback] = 0.0
            return out
        return np.stack([np.log(p) + e_step(X, m)[1] for p, m in zip(self.priors, self.models, strict=True)], axis=1)

    def predict(self, X: FloatArray) -> FloatArray:
        return self.classes[np.argmax(self.log_posterior(X), axis=1)]

    def error(self, X: FloatArray, y: FloatArray) -> float:
        """Fraction of rows of ``X`` misclassified."""
        return float(np.mean(self.predict(X) != np.asarray(y)))


def _noisy_counts(exact: FloatArray, scale: float, plan_shares: int, n_nodes: int, central: bool, rng: np.random.Generator) -> FloatArray:
    """The class counts plus Laplace(scale) noise as the protocol adds it: one draw by the trusted
    aggregator (``dp-central``) or one share per node, any ``plan_shares`` of which make the noise."""
    scales = np.full(len(exact), scale)
    if central:
        return exact + mechanisms.noise(rng, scales, "laplace")
    return exact + sum(mechanisms.noise_share(rng, scales, "laplace", plan_shares) for _ in range(n_nodes))


def fit_bayes(
    class_parts: Sequence[Sequence[FloatArray]],
    classes: FloatArray,
    graph: nx.Graph,
    protocol: ProtocolSpec,
    settings: Sequence[EMSettings],
    *,
    seed: int | np.random.SeedSequence = 0,
    count_share: float = 0.2,
    max_mean_noise: float = 0.5,
) -> BayesClassifier:
    """Fit one mixture per class with ``protocol`` (module docstring).

    Parameters
    ----------
    class_parts : one list of per-node arrays per class
        Class c's training rows spread over the graph's nodes.
    classes : (C,) array
    graph : networkx.Graph
    protocol : ProtocolSpec
        Any protocol.  A private one (``dp-central``, ``dp-distributed``) has its epsilon
        split between the class counts (``count_share``) and the class models (the rest,
        spent by *each* class model: the classes are disjoint); its delta goes to the models.
    settings : one EMSettings per class
    seed : int or SeedSequence
        Class c's model uses child c of it; the count releases child C and C + 1
        (simulation streams, as every protocol run's).
    count_share : float in (0, 1)
        The share of a private protocol's epsilon spent on the class counts.
    max_mean_noise : float > 0
        The usability rule's threshold (module docstring), in units of the data bound.

    Returns
    -------
    BayesClassifier
    """
    if len(class_parts) != len(classes) or len(settings) != len(classes):
        raise DataError("fit_bayes: one list of parts and one EMSettings per class are needed")
    if not 0 < count_share < 1:
        raise ConfigError(f"fit_bayes: count_share must be in (0, 1), got {count_share!r}")
    if not max_mean_noise > 0:
        raise ConfigError(f"fit_bayes: max_mean_noise must be > 0, got {max_mean_noise!r}")
    exact = np.array([sum(len(p) for p in parts) for parts in class_parts], dtype=float)
    private = isinstance(protocol, DPProtocol) and math.isfinite(protocol.epsilon)
    if not private:
        runs = [run_protocol(list(parts), graph, protocol, s, seed=child(seed, c)) for c, (parts, s) in enumerate(zip(class_parts, settings, strict=True))]
        counts = np.maximum(np.array([r.released_rows for r in runs], dtype=float), 1.0)
        return BayesClassifier(np.asarray(classes), counts / counts.sum(), tuple(r.params for r in runs), tuple(runs), counts=counts)
    assert isinstance(protocol, DPProtocol)
    n_classes = len(classes)
    model_spec = dataclasses.replace(protocol, epsilon=protocol.epsilon * (1.0 - count_share))
    bound_spec, _, _ = model_spec.bind(settings[0], [np.asarray(p, dtype=float) for p in class_parts[0]], seed=child(seed, 0))
    plan = bound_spec.plan
    assert plan is not None
    central = isinstance(protocol, DPCentral)
    b1 = COUNT_SENSITIVITY / (protocol.epsilon * count_share)
    counts1 = _noisy_counts(exact, b1, plan.shares, plan.n_nodes, central, np.random.default_rng(child(seed, n_classes)))
    # the noise std of one component's mean at the noisy count: the first-moment block's
    # per-coordinate std (the released sum's: n_nodes / shares of a share's variance when distributed)
    k = settings[0].n_components
    d = class_parts[0][0].shape[1]
    spread = 1.0 if central else math.sqrt(plan.n_nodes / plan.shares)
    sum_std = float(mechanisms.noise_std(plan.em_scale[k : k + 1], plan.mechanism)[0]) * spread
    usable = all(math.sqrt(d) * sum_std / max(c / s.n_components, 1.0) <= max_mean_noise * plan.bound for c, s in zip(counts1, settings, strict=True))
    excluded = (f"the class counts: released with Laplace noise from {count_share:g} of epsilon (L1 sensitivity {COUNT_SENSITIVITY:g})",)
    if not usable:
        b2 = COUNT_SENSITIVITY / (protocol.epsilon * (1.0 - count_share))
        counts2 = _noisy_counts(exact, b2, plan.shares, plan.n_nodes, central, np.random.default_rng(child(seed, n_classes + 1)))
        w1, w2 = 1.0 / b1**2, 1.0 / b2**2
        combined = (w1 * counts1 + w2 * counts2) / (w1 + w2)
        priors = np.maximum(combined, 1.0) / np.maximum(combined, 1.0).sum()
        return BayesClassifier(np.asarray(classes), priors, (), (), excluded, fallback=int(np.argmax(combined)), counts=combined)
    runs = [run_protocol(list(parts), graph, model_spec, s, seed=child(seed, c)) for c, (parts, s) in enumerate(zip(class_parts, settings, strict=True))]
    counts = np.maximum(counts1, 1.0)
    return BayesClassifier(np.asarray(classes), counts / counts.sum(), tuple(r.params for r in runs), tuple(runs), excluded, counts=counts1)


def xi_sensitivity(n_rows: int, ranges: FloatArray) -> float:
    """L1 sensitivity of one class's query set {mean, covariance (upper triangle)}, Xi et al. (2011).

    Theorem 3.1 (the mean: d / n for attributes in [0, 1]) and the upper bound of Theorem 3.7
    (the covariance with the 1/n normalisation: (3/n - 3/n^2) d (d + 1) / 2), each "adjusted for
    the range" of every attribute as the paper's Section 5 does: sum_i r_i / n and
    (3/n - 3/n^2) sum_{k <= l} r_k r_l.  Neighbours replace one row (n is public).
    """
    r = np.asarray(ranges, dtype=float)
    n = float(n_rows)
    upper = np.triu(np.outer(r, r)).sum()
    return float(r.sum() / n + (3.0 / n - 3.0 / n**2) * upper)


def fit_xi2011(
    class_rows: Sequence[FloatArray],
    classes: FloatArray,
    *,
    epsilon: float,
    lows: FloatArray,
    highs: FloatArray,
    rng: np.random.Generator | None = None,
) -> BayesClassifier:
    """The Gaussian Bayes classifier of Xi, Kantarcioglu & Inan (CODASPY 2011), Section 5, as printed.

    Per class: the rows clipped to the public box [lows, highs] (the paper truncates at
    mu +- 6 sigma), their mean and covariance (1/n normalisation) with Laplace noise of scale
    lambda = S(Q) / epsilon on every mean entry and every upper-triangle covariance entry
    (:func:`xi_sensitivity`), the covariance mirrored and repaired by the paper's eigenvalue
    heuristic (:func:`p2pem.dp.postprocess.repair_covariances` ``"xi"``).  The class sizes are
    public in the paper's setting (neighbours replace a row, so a count's sensitivity is 0)
    and give the priors; they are listed in ``excluded``.  Classes are disjoint: each spends
    ``epsilon`` (parallel composition).  ``epsilon = inf`` adds no noise.

    ``rng`` draws the noise; the default is seeded from OS entropy.
    """
    if len(class_rows) != len(classes):
        raise DataError("fit_xi2011: one array of rows per class is needed")
    if not epsilon > 0:
        raise DataError(f"fit_xi2011: epsilon must be > 0 (inf: no noise), got {epsilon!r}")
    rng = np.random.default_rng() if rng is None else rng
    lows, highs = np.asarray(lows, dtype=float), np.asarray(highs, dtype=float)
    models, sizes = [], []
    for c, rows in enumerate(class_rows):
        X = np.clip(np.asarray(rows, dtype=float), lows, highs)
        n, d = X.shape
        if n < 2:
            raise DataError(f"fit_xi2011: class {classes[c]!r} has {n} rows; its covariance needs at least 2")
        mean = X.mean(axis=0)
        cov = (X - mean).T @ (X - mean) / n
        if np.isfinite(epsilon):
            scale = xi_sensitivity(n, highs - lows) / epsilon
            mean = mean + rng.laplace(0.0, scale, d)
            iu = np.triu_indices(d)
            upper = cov[iu] + rng.laplace(0.0, scale, len(iu[0]))
            cov = np.zeros((d, d))
            cov[iu] = upper
            cov[iu[1], iu[0]] = upper
            cov = postprocess.repair_covariances(cov, "xi", 1e-6 * float(np.max(highs - lows)) ** 2)
        models.append(GMMParams(np.ones(1), mean[None, :], cov[None, :, :]))
        sizes.append(n)
    priors = np.asarray(sizes, dtype=float) / sum(sizes)
    return BayesClassifier(np.asarray(classes), priors, tuple(models), excluded=("the class sizes: public in the paper's setting (a replaced row keeps them)",))
