"""A private Bayes classifier: one Gaussian mixture per class, classification by the posterior.

As in Tong, Xi, Kantarcioglu & Inan (DBSec 2017), each class c gets its own model p(x | c),
here a mixture fitted by any protocol (private or not) to the class's rows spread over the
network, and a row is assigned to ``argmax_c log pi_c + log p(x | c)``.  The class priors
pi_c come from what the class models' runs already released: the network's total soft count
of each class's last EM aggregation (``RunResult.released_rows``).  Without noise that is the
class size; in a private run it is the noisy count every node received, so the priors are
post-processing of paid releases and cost no budget (diffprivlib's classifier instead
spends budget on separate noisy class counts).  Counts below one row are raised to one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np

from p2pem.em import EMSettings
from p2pem.errors import DataError
from p2pem.gmm import FloatArray, GMMParams, e_step
from p2pem.protocols import ProtocolSpec
from p2pem.simulate import RunResult, run_protocol
from p2pem.streams import child


@dataclass(frozen=True, eq=False)
class BayesClassifier:
    """Fitted class models.

    Attributes
    ----------
    classes : (C,) array
        The class labels, sorted.
    priors : (C,) array
        pi_c, summing to 1: the class models' released soft counts, normalised.
    models : tuple of GMMParams
        p(x | c), one per class.
    runs : tuple of RunResult
        The protocol run that fitted each class model.
    excluded : tuple of str
        What a private classifier's epsilon does not cover beyond its class models' runs
        (nothing: the priors are post-processing of their releases).
    """

    classes: FloatArray
    priors: FloatArray
    models: tuple[GMMParams, ...]
    runs: tuple[RunResult, ...] = ()
    excluded: tuple[str, ...] = ()

    def log_posterior(self, X: FloatArray) -> FloatArray:
        """(n, C) unnormalised log posteriors log pi_c + log p(x | c)."""
        X = np.asarray(X, dtype=float)
        return np.stack([np.log(p) + e_step(X, m)[1] for p, m in zip(self.priors, self.models, strict=True)], axis=1)

    def predict(self, X: FloatArray) -> FloatArray:
        return self.classes[np.argmax(self.log_posterior(X), axis=1)]

    def error(self, X: FloatArray, y: FloatArray) -> float:
        """Fraction of rows of ``X`` misclassified."""
        return float(np.mean(self.predict(X) != np.asarray(y)))


def fit_bayes(
    class_parts: Sequence[Sequence[FloatArray]],
    classes: FloatArray,
    graph: nx.Graph,
    protocol: ProtocolSpec,
    settings: Sequence[EMSettings],
    *,
    seed: int | np.random.SeedSequence = 0,
) -> BayesClassifier:
    """Fit one mixture per class with ``protocol``.

    Parameters
    ----------
    class_parts : one list of per-node arrays per class
        Class c's training rows spread over the graph's nodes.
    classes : (C,) array
    graph : networkx.Graph
    protocol : ProtocolSpec
        Any protocol; a private one spends its whole budget on *each* class model, which is
        still (epsilon, delta)-DP overall because the classes are disjoint (parallel
        composition, McSherry, SIGMOD 2009).
    settings : one EMSettings per class
    seed : int or SeedSequence
        Class c uses child c of it.

    Returns
    -------
    BayesClassifier
    """
    if len(class_parts) != len(classes) or len(settings) != len(classes):
        raise DataError("fit_bayes: one list of parts and one EMSettings per class are needed")
    runs = []
    for c, (parts, s) in enumerate(zip(class_parts, settings, strict=True)):
        runs.append(run_protocol(list(parts), graph, protocol, s, seed=child(seed, c)))
    counts = np.maximum(np.array([r.released_rows for r in runs], dtype=float), 1.0)
    return BayesClassifier(np.asarray(classes), counts / counts.sum(), tuple(r.params for r in runs), tuple(runs))
