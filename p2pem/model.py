"""A scikit-learn estimator around :func:`p2pem.simulate.run_protocol`.

:class:`DistributedGMM` and :class:`DistributedSkewNormalMixture` (one base class,
:class:`DistributedMixture`, that reaches the model through its family) follow scikit-learn's estimator contract (parameters only in
``__init__``, ``get_params``/``set_params`` so ``sklearn.base.clone`` works, fitted state with a
trailing underscore, :class:`~p2pem.errors.NotFittedError` before ``fit``) and offers
``GaussianMixture``'s inference methods on the fitted model.  scikit-learn itself is not a
dependency.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import networkx as nx
import numpy as np
import numpy.typing as npt

from p2pem.data import check_parts
from p2pem.em import EMSettings
from p2pem.errors import ConfigError, DataError, NotFittedError
from p2pem.families import GAUSSIAN, MixtureFamily, make_family
from p2pem.gmm import FloatArray
from p2pem.graphs import geometric_graph
from p2pem.protocols import ProtocolSpec
from p2pem.registry import make_protocol
from p2pem.simulate import RunResult, run_protocol
from p2pem.streams import init_seed, scenario_streams


class DistributedMixture:
    """What every distributed mixture estimator shares: fitting over a graph and inference.

    A subclass names its model family (:meth:`_family`); one with parameters of its own
    declares them in its own ``__init__``, which calls this one (scikit-learn's contract:
    ``get_params`` reads the signature).  The parameters here are :class:`DistributedGMM`'s.
    After ``fit`` the model's arrays are attributes named after the family's parameters with
    a trailing underscore (:attr:`~p2pem.families.base.MixtureFamily.param_keys`, then
    :meth:`~p2pem.families.base.MixtureFamily.derived`): ``weights_``, ``means_``,
    ``covariances_`` for :class:`DistributedGMM`; ``weights_``, ``locations_``, ``scales_``,
    ``shapes_``, ``deltas_``, ``means_``, ``covariances_`` for
    :class:`DistributedSkewNormalMixture`; ``weights_``, ``means_``, ``covariances_``,
    ``probabilities_`` for :class:`DistributedMixedMixture`.
    """

    def __init__(
        self,
        n_components: int = 1,
        protocol: str | ProtocolSpec = "pdmm-sp",
        max_iter: int = 100,
        tol: float = 1e-6,
        reg_covar: float = 1e-6,
        random_state: int = 0,
        init: Mapping[str, Any] | None = None,
        engine: str = "vectorised",
        record_trace: bool = False,
        graph: nx.Graph | None = None,
    ) -> None:
        self.n_components = n_components
        self.protocol = protocol
        self.max_iter = max_iter
        self.tol = tol
        self.reg_covar = reg_covar
        self.random_state = random_state
        self.init = init
        self.engine = engine
        self.record_trace = record_trace
        self.graph = graph

    def _family(self) -> MixtureFamily:
        """The model family this estimator fits (from its constructor parameters)."""
        raise NotImplementedError

    # -- scikit-learn's parameter protocol ---------------------------------------------------

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [p for p in sig.parameters if p != "self"]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's parameters (scikit-learn's contract; ``deep`` has no effect)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> DistributedMixture:
        """Set constructor parameters; an unknown name is a ConfigError naming it."""
        known = self._param_names()
        for name, value in params.items():
            if name not in known:
                raise ConfigError(f"{type(self).__name__} has no parameter {name!r} (known: {', '.join(known)})")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values() if p.name != "self"}
        shown = [f"{k}={v!r}" for k, v in self.get_params().items() if not _same(v, defaults[k])]
        return f"{type(self).__name__}({', '.join(shown)})"

    # -- fitting -------------------------------------------------------------------------------

    def fit(
        self,
        X: Sequence[FloatArray] | npt.ArrayLike,
        y: Any = None,
        *,
        graph: nx.Graph | None = None,
        groups: npt.ArrayLike | None = None,
    ) -> DistributedMixture:
        """Fit the mixture with the configured protocol over the graph.

        Parameters
        ----------
        X : list of (n_i, d) arrays, or (n_rows, d) array
            One array per node, or all rows at once with ``groups`` giving each row's node.
        y : networkx.Graph or None
            Ignored (scikit-learn passes ``y``), except that a graph here is taken as
            ``graph``, so ``fit(parts, graph)`` works.
        graph : networkx.Graph, optional
            Nodes ``0..n-1``; default: the ``graph`` parameter, else a random geometric
            graph over the nodes drawn from ``random_state``.
        groups : array_like of int, shape (n_rows,), optional
            With a 2-D ``X``: the node id (0..n-1) holding each row.  This is a simulation
            convenience so the estimator fits scikit-learn tooling.
        """
        if isinstance(y, nx.Graph) and graph is None:
            graph = y
        parts = _parts(X, groups)
        check_parts(parts, self.n_components)
        if graph is None:
            graph = self.graph
        if graph is None:
            graph = geometric_graph(len(parts), seed=self.random_state)
        d = int(np.asarray(parts[0]).shape[1])
        family = self._family()
        init = None if self.init is None else family.params_from_dict(dict(self.init), self.n_components, d)
        streams = scenario_streams(self.random_state)
        settings = EMSettings(
            self.n_components, self.max_iter, self.tol, self.reg_covar, init, init_seed(streams), family=family
        )
        spec = make_protocol(self.protocol)
        result = run_protocol(parts, graph, spec, settings, seed=streams["protocol"], engine=self.engine, record_trace=self.record_trace)
        self.result_: RunResult = result
        for key, _ in family.param_keys:
            setattr(self, f"{key}_", np.asarray(getattr(result.params, key)))
        for key, value in family.derived(result.params).items():
            setattr(self, f"{key}_", np.asarray(value))
        self.loglik_ = result.loglik
        self.n_iter_ = result.n_iter
        self.converged_ = result.converged
        self.n_features_in_ = d
        self.n_rows_ = int(sum(len(p) for p in parts))
        self.network_loglik_ = float(result.loglik[-1]) * self.n_rows_ if result.loglik else float("nan")
        return self

    # -- inference (GaussianMixture's methods) ----------------------------------------------

    @property
    def params_(self) -> Any:
        """The fitted model as the family's single parameters (GMMParams, SkewNormalParams)."""
        self._check_fitted()
        return self.result_.params

    def _check_fitted(self) -> None:
        if not hasattr(self, "result_"):
            raise _not_fitted_class()(
                f"This {type(self).__name__} instance is not fitted yet: call fit() before using this estimator"
            )

    def _X(self, X: npt.ArrayLike) -> FloatArray:
        self._check_fitted()
        arr = np.asarray(X, dtype=float)
        if arr.ndim != 2 or arr.shape[1] != self.n_features_in_:
            raise DataError(f"X must have shape (n_rows, {self.n_features_in_}), got {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise DataError("X holds NaN or infinite values")
        return arr

    def score_samples(self, X: npt.ArrayLike) -> FloatArray:
        """Log-likelihood log p(x) of every row of ``X`` under the fitted mixture."""
        arr = self._X(X)
        return self.result_.family.score_samples(arr, self.params_)

    def score(self, X: npt.ArrayLike, y: Any = None) -> float:
        """Mean log-likelihood per row of ``X`` (scikit-learn's ``score``)."""
        return float(self.score_samples(X).mean())

    def predict_proba(self, X: npt.ArrayLike) -> FloatArray:
        """Posterior probability of each component for every row of ``X``, shape (n, K)."""
        arr = self._X(X)
        return self.result_.family.predict_proba(arr, self.params_)

    def predict(self, X: npt.ArrayLike) -> npt.NDArray[np.intp]:
        """The most probable component of every row of ``X``."""
        arr = self._X(X)
        return np.argmax(self.result_.family.log_responsibilities(arr, self.params_)[0], axis=1)

    def sample(
        self, n_samples: int = 1, *, rng: np.random.Generator | np.random.RandomState | int | None = None
    ) -> tuple[FloatArray, npt.NDArray[np.intp]]:
        """Draw ``n_samples`` rows from the fitted mixture: ``(X, component labels)``.

        Component counts are multinomial with the fitted weights, then each component's rows
        are drawn from its distribution (the family's ``sample``); rows come grouped by
        component, as in scikit-learn.  ``rng`` is an explicit Generator (or a seed for one);
        None uses ``random_state``.  A legacy ``RandomState`` is accepted too: for the
        Gaussian family it makes the same draws in the same order as scikit-learn's
        ``GaussianMixture.sample`` given that state, so the two agree exactly.
        """
        self._check_fitted()
        if not (isinstance(n_samples, (int, np.integer)) and n_samples >= 1):
            raise ConfigError(f"n_samples must be a positive integer, got {n_samples!r}")
        gen: np.random.Generator | np.random.RandomState
        if isinstance(rng, (np.random.Generator, np.random.RandomState)):
            gen = rng
        else:
            gen = np.random.default_rng(self.random_state if rng is None else rng)
        return self.result_.family.sample(self.params_, int(n_samples), gen)

    def _n_parameters(self) -> int:
        """Free parameters of the fitted family's model (what BIC and AIC charge)."""
        return self.result_.family.n_parameters(self.n_components, self.n_features_in_)

    def bic(self, X: npt.ArrayLike | None = None) -> float:
        """Bayesian information criterion; lower is better.

        With ``X``: on those rows, as scikit-learn computes it.  Without: over the union of
        every node's rows, from the private aggregation (``network_loglik_``, ``n_rows_``).
        """
        if X is None:
            self._check_fitted()
            return -2.0 * self.network_loglik_ + self._n_parameters() * np.log(self.n_rows_)
        arr = self._X(X)
        return -2.0 * self.score(arr) * arr.shape[0] + self._n_parameters() * np.log(arr.shape[0])

    def aic(self, X: npt.ArrayLike | None = None) -> float:
        """Akaike information criterion; lower is better (``X`` as for :meth:`bic`)."""
        if X is None:
            self._check_fitted()
            return -2.0 * self.network_loglik_ + 2 * self._n_parameters()
        arr = self._X(X)
        return -2.0 * self.score(arr) * arr.shape[0] + 2 * self._n_parameters()


class DistributedGMM(DistributedMixture):
    """Gaussian mixture fitted to data spread over the nodes of a graph.

    Parameters
    ----------
    n_components : int, default 1
    protocol : str or ProtocolSpec
        "pdmm-sp" (default), "secure-sum", "federated", "centralized", "dp-central",
        "dp-distributed", or a spec object such as
        ``PdmmSP(mode="async", c=0.2, theta=0.5, perturbation_std=1e3, tol=1e-12)``.
    max_iter : int
        Number of M-steps at most (``tol=0`` runs exactly this many).
    tol : float
        Stop when the mean log-likelihood per row changes by less than this.
    reg_covar : float
        Added to covariance diagonals, as in scikit-learn.
    random_state : int
        Public seed: the init draw and the protocol randomness of the simulation are
        derived from it (scikit-learn's name for it).
    init : dict, optional
        ``{"weights", "means", "covariances"}`` to start every protocol from; by default the
        init is drawn from the privately averaged global mean and covariance.
    engine : {"vectorised", "messages"}
    record_trace : bool
        Keep every message in ``result_.trace``.
    graph : networkx.Graph, optional
        The communication graph used when :meth:`fit` is not given one; None draws a random
        geometric graph over the nodes from ``random_state``.

    Attributes
    ----------
    weights_, means_, covariances_ : arrays
        Fitted parameters (as held by node 0; see ``result_.node_spread`` for the others).
    loglik_ : list of float
        Mean log-likelihood per row over the union of all nodes' rows, at every EM
        iteration, as the network aggregated it (one more entry than ``n_iter_``: the last
        is the final model's).
    n_rows_ : int
        Rows over all nodes (what the aggregated soft counts reveal to every node anyway).
    network_loglik_ : float
        Total log-likelihood of the final model over the union of rows, from the private
        aggregation itself (``loglik_[-1] * n_rows_``), never from pooled data.
    n_iter_ : int
    converged_ : bool
    n_features_in_ : int
    result_ : RunResult

    Examples
    --------
    >>> from p2pem import DistributedGMM, geometric_graph
    >>> rng = np.random.default_rng(0)
    >>> parts = [rng.normal(size=(3, 2)) + (i % 2) * 4 for i in range(20)]
    >>> m = DistributedGMM(n_components=2, max_iter=20, random_state=0).fit(parts, geometric_graph(20, seed=1))
    >>> m.weights_.shape, m.means_.shape
    ((2,), (2, 2))
    """

    def _family(self) -> MixtureFamily:
        return GAUSSIAN


class DistributedSkewNormalMixture(DistributedMixture):
    """Skew-normal mixture fitted to data spread over the nodes of a graph.

    Azzalini's multivariate skew-normal components in the direct parametrisation (the R
    package ``sn``'s ``dp``); the EM and the parametrisations are in :mod:`p2pem.snmix`.
    Every protocol of :class:`DistributedGMM` fits it, with the same privacy.

    Parameters
    ----------
    n_components, protocol, max_iter, tol, reg_covar, random_state, engine, record_trace, graph
        As for :class:`DistributedGMM`.
    init : dict, optional
        ``{"weights", "locations", "scales", "shapes"}`` to start every protocol from; by
        default the private initialisation (global mean and covariance, and the signs of the
        global skewness, by the private protocol).
    init_shapes : sequence of float, optional
        Public initial shapes (one per feature) for the private initialisation instead of
        the signs of the global skewness (:class:`p2pem.families.SkewNormalFamily`).
    max_delta : float, optional
        Cap on |delta| in (0, 1) (:class:`p2pem.families.SkewNormalFamily`).

    Attributes
    ----------
    weights_ : (K,) array
    locations_ : (K, d) array
        xi (not the means).
    scales_ : (K, d, d) array
        Sigma = Omega.
    shapes_ : (K, d) array
        alpha.
    deltas_ : (K, d) array
        Delta = omega delta (the EM's working parameter).
    means_, covariances_ : arrays
        Each component's mean xi + sqrt(2/pi) Delta and covariance Sigma - (2/pi) Delta Delta^T.
    loglik_, n_rows_, network_loglik_, n_iter_, converged_, n_features_in_, result_
        As for :class:`DistributedGMM`.
    """

    def __init__(
        self,
        n_components: int = 1,
        protocol: str | ProtocolSpec = "pdmm-sp",
        max_iter: int = 100,
        tol: float = 1e-6,
        reg_covar: float = 1e-6,
        random_state: int = 0,
        init: Mapping[str, Any] | None = None,
        engine: str = "vectorised",
        record_trace: bool = False,
        graph: nx.Graph | None = None,
        init_shapes: Sequence[float] | None = None,
        max_delta: float | None = None,
    ) -> None:
        super().__init__(n_components, protocol, max_iter, tol, reg_covar, random_state, init, engine, record_trace, graph)
        self.init_shapes = init_shapes
        self.max_delta = max_delta

    def _family(self) -> MixtureFamily:
        shapes = None if self.init_shapes is None else list(self.init_shapes)
        return make_family("skew-normal", init_shapes=shapes, max_delta=self.max_delta)


class DistributedMixedMixture(DistributedMixture):
    """Mixed-type mixture (Gaussian and categorical columns) fitted to data spread over the nodes.

    Per component, the continuous columns are Gaussian (diagonal, or one full covariance over
    them) and each categorical column has its own category probabilities, independent given
    the component (:mod:`p2pem.families.mixed`).  A row holds the continuous values first,
    then one category code 0 .. C_j - 1 per categorical column
    (:meth:`p2pem.families.encoding.TableEncoding.rows` makes such rows from a table under a
    public schema).  Every protocol of :class:`DistributedGMM` fits it, with the same privacy.

    Parameters
    ----------
    n_components, protocol, max_iter, tol, reg_covar, random_state, engine, record_trace, graph
        As for :class:`DistributedGMM`.
    init : dict, optional
        ``{"weights", "means", "covariances", "probabilities"}`` to start every protocol from;
        by default the private initialisation.
    n_continuous : int
        p, the continuous columns (the first p of a row).
    n_categories : sequence of int
        The public number of categories of each categorical column, in row order.
    covariance : {"diag", "full"}
    stratify : int, optional
        Index (among the categorical columns) of a public attribute: one mixture of
        ``n_components / C`` components per category.
    strata_weights : sequence of float, optional
        Public shares of the strata (otherwise released through the weights).

    Attributes
    ----------
    weights_ : (K,) array
    means_ : (K, p) array
    covariances_ : (K, p) or (K, p, p) array
    probabilities_ : (K, S) array
        Each categorical column's category probabilities, column after column.
    loglik_, n_rows_, network_loglik_, n_iter_, converged_, n_features_in_, result_
        As for :class:`DistributedGMM`.
    """

    def __init__(
        self,
        n_components: int = 1,
        protocol: str | ProtocolSpec = "pdmm-sp",
        max_iter: int = 100,
        tol: float = 1e-6,
        reg_covar: float = 1e-6,
        random_state: int = 0,
        init: Mapping[str, Any] | None = None,
        engine: str = "vectorised",
        record_trace: bool = False,
        graph: nx.Graph | None = None,
        n_continuous: int = 0,
        n_categories: Sequence[int] = (),
        covariance: str = "diag",
        stratify: int | None = None,
        strata_weights: Sequence[float] | None = None,
    ) -> None:
        super().__init__(n_components, protocol, max_iter, tol, reg_covar, random_state, init, engine, record_trace, graph)
        self.n_continuous = n_continuous
        self.n_categories = n_categories
        self.covariance = covariance
        self.stratify = stratify
        self.strata_weights = strata_weights

    def _family(self) -> MixtureFamily:
        weights = None if self.strata_weights is None else list(self.strata_weights)
        return make_family("mixed", n_continuous=self.n_continuous, n_categories=list(self.n_categories), covariance=self.covariance,
                           stratify=self.stratify, strata_weights=weights)


_SKLEARN_NOT_FITTED: dict[type, type[NotFittedError]] = {}


def _not_fitted_class() -> type[NotFittedError]:
    """:class:`~p2pem.errors.NotFittedError`, also scikit-learn's when scikit-learn is loaded.

    scikit-learn is not a dependency, so it is never imported here; but a caller that already
    uses it (``except sklearn.exceptions.NotFittedError``, its model-selection tools) gets an
    error of that class too.
    """
    module = sys.modules.get("sklearn.exceptions")
    base = getattr(module, "NotFittedError", None)
    if not isinstance(base, type) or not issubclass(base, Exception):
        return NotFittedError
    if base not in _SKLEARN_NOT_FITTED:
        _SKLEARN_NOT_FITTED[base] = type("NotFittedError", (NotFittedError, base), {"__module__": __name__})
    return _SKLEARN_NOT_FITTED[base]


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) if not isinstance(a, np.ndarray) else False
    except Exception:  # noqa: BLE001 - objects without a usable ==
        return a is b


def _parts(X: Sequence[FloatArray] | npt.ArrayLike, groups: npt.ArrayLike | None) -> list[FloatArray]:
    """One array per node from either form :meth:`DistributedGMM.fit` accepts."""
    if groups is None:
        if isinstance(X, np.ndarray):
            raise DataError("a 2-D X needs groups= (the node id of every row), or pass one array per node")
        if not isinstance(X, Iterable) or isinstance(X, (str, bytes)):
            raise DataError(f"X must be one array per node or a 2-D array with groups=, not {type(X).__name__}")
        return [np.asarray(p, dtype=float) for p in X]
    arr = np.asarray(X, dtype=float)
    g = np.asarray(groups)
    if arr.ndim != 2 or g.shape != (arr.shape[0],):
        raise DataError(f"groups must hold one node id per row of X ({arr.shape[0]}), got shape {g.shape}")
    if not np.issubdtype(g.dtype, np.integer) or g.size == 0 or g.min() < 0:
        raise DataError("groups must be non-negative integer node ids")
    n = int(g.max()) + 1
    parts = [arr[g == i] for i in range(n)]
    empty = [i for i, p in enumerate(parts) if len(p) == 0]
    if empty:
        raise DataError(f"groups names nodes 0..{n - 1} but node {empty[0]} holds no row")
    return parts
