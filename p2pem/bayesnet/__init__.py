"""Differentially private Bayesian networks (PrivBayes, HMPrivBayes) from counts a network sums.

Pure NumPy, like :mod:`p2pem.gmm`: no transport, no I/O.

* :mod:`~p2pem.bayesnet.counts` -- contingency counts of discretised rows as flat vectors
  of public length, per node;
* :mod:`~p2pem.bayesnet.scores` -- entropy, mutual information, normalised MI and their
  sensitivities;
* :mod:`~p2pem.bayesnet.greedy` -- GreedyBayes' candidate attribute-parent pairs
  (theta-usefulness) and network state;
* :mod:`~p2pem.bayesnet.cluster` -- HMPrivBayes' spectral clustering of attributes;
* :mod:`~p2pem.bayesnet.network` -- noisy conditionals and ancestral sampling;
* :mod:`~p2pem.bayesnet.privacy` -- settings, budget and the ledger of every release;
* :mod:`~p2pem.bayesnet.seed` -- the shared seed by commit-and-reveal;
* :mod:`~p2pem.bayesnet.task` -- the whole release as a :class:`~p2pem.task.Task`, so any
  aggregation protocol, both simulators and a deployment run it.
* :mod:`~p2pem.bayesnet.release` -- a finished release as data (the body of its document),
  and a deployed node's task built from public facts and its own rows file (the one module
  that reads a file).
"""

from __future__ import annotations

from p2pem.bayesnet.network import Conditional, Network, sample_networks
from p2pem.bayesnet.privacy import DEFAULT_MAX_CATEGORIES, MODELS, NOISE, BayesNetSettings, Budget, Ledger
from p2pem.bayesnet.task import BayesNetTask, Selection

__all__ = [
    "DEFAULT_MAX_CATEGORIES",
    "MODELS",
    "NOISE",
    "BayesNetSettings",
    "BayesNetTask",
    "Budget",
    "Conditional",
    "Ledger",
    "Network",
    "Selection",
    "sample_networks",
]
