"""A scikit-learn-like estimator around :func:`p2pem.simulate.run_protocol`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import networkx as nx
import numpy as np

from p2pem.em import EMSettings
from p2pem.gmm import FloatArray, GMMParams, params_from_dict
from p2pem.protocols import ProtocolSpec, make_protocol
from p2pem.simulate import RunResult, run_protocol


class DistributedGMM:
    """Gaussian mixture fitted to data spread over the nodes of a graph.

    Parameters
    ----------
    n_components : int
    protocol : str or ProtocolSpec
        "pdmm-sp" (default), "secure-sum", "federated", "centralized", or a spec object such
        as ``PdmmSP(mode="async", c=0.2, theta=0.5, perturbation_std=1e3, tol=1e-12)``.
    max_iter : int
        Number of M-steps at most (``tol=0`` runs exactly this many).
    tol : float
        Stop when the mean log-likelihood per row changes by less than this.
    reg_covar : float
        Added to covariance diagonals, as in scikit-learn.
    seed : int
        Public seed: the init draw and the protocol randomness are derived from it.
    init : dict, optional
        ``{"weights", "means", "covariances"}`` to start every protocol from; by default the
        init is drawn from the privately averaged global mean and covariance.
    engine : {"vectorised", "messages"}
    record_trace : bool
        Keep every message in ``result_.trace``.

    Attributes
    ----------
    weights_, means_, covariances_ : arrays
        Fitted parameters (as held by node 0; see ``result_.node_spread`` for the others).
    loglik_ : list of float
        Mean log-likelihood per row at every EM iteration (one more entry than ``n_iter_``).
    n_iter_ : int
    converged_ : bool
    result_ : RunResult

    Examples
    --------
    >>> from p2pem import DistributedGMM, geometric_graph
    >>> rng = np.random.default_rng(0)
    >>> parts = [rng.normal(size=(3, 2)) + (i % 2) * 4 for i in range(20)]
    >>> m = DistributedGMM(n_components=2, max_iter=20, seed=0).fit(parts, geometric_graph(20, seed=1))
    >>> m.weights_.shape, m.means_.shape
    ((2,), (2, 2))
    """

    def __init__(
        self,
        n_components: int,
        protocol: str | ProtocolSpec = "pdmm-sp",
        max_iter: int = 100,
        tol: float = 1e-6,
        reg_covar: float = 1e-6,
        seed: int = 0,
        init: Mapping[str, Any] | None = None,
        engine: str = "vectorised",
        record_trace: bool = False,
    ) -> None:
        self.n_components = n_components
        self.protocol = protocol
        self.max_iter = max_iter
        self.tol = tol
        self.reg_covar = reg_covar
        self.seed = seed
        self.init = init
        self.engine = engine
        self.record_trace = record_trace

    def fit(self, parts: Sequence[FloatArray], graph: nx.Graph) -> DistributedGMM:
        from p2pem.data import check_parts
        from p2pem.scenario import seed_streams

        check_parts(parts, self.n_components)
        d = int(np.asarray(parts[0]).shape[1])
        init = None if self.init is None else params_from_dict(dict(self.init), self.n_components, d)
        streams = seed_streams(self.seed)
        settings = EMSettings(
            self.n_components, self.max_iter, self.tol, self.reg_covar, init, int(streams["init"].generate_state(1)[0])
        )
        spec = make_protocol(self.protocol)
        result = run_protocol(parts, graph, spec, settings, seed=streams["protocol"], engine=self.engine, record_trace=self.record_trace)
        self.result_: RunResult = result
        self.weights_ = result.weights
        self.means_ = result.means
        self.covariances_ = result.covariances
        self.loglik_ = result.loglik
        self.n_iter_ = result.n_iter
        self.converged_ = result.converged
        return self

    @property
    def params_(self) -> GMMParams:
        return self.result_.params

    def score(self, X: FloatArray) -> float:
        """Mean log-likelihood per row of ``X`` under the fitted model."""
        from p2pem.gmm import mean_loglik

        return mean_loglik(np.asarray(X, dtype=float), self.params_)
