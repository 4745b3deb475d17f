"""scikit-learn estimators around :func:`p2pem.simulate.run_protocol`, one per model family.

:class:`DistributedGMM` and :class:`DistributedSkewNormalMixture` (one base class,
:class:`DistributedMixture`, that reaches the model through its family) follow
scikit-learn's estimator contract (parameters only in
``__init__``, ``get_params``/``set_params`` so ``sklearn.base.clone`` works, fitted state with a
trailing underscore, :class:`~p2pem.errors.NotFittedError` before ``fit``) and offers
``GaussianMixture``'s inference methods on the fitted model.  scikit-learn itself is not a
dependency.
"""

from __future__ import annotations

import inspect
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import numpy.typing as npt

from p2pem.data import Preprocessing, check_parts
from p2pem.em import EMSettings
from p2pem.errors import ConfigError, ConvergenceWarning, NotFittedError
from p2pem.families import GAUSSIAN, MixtureFamily, make_family
from p2pem.gmm import FloatArray
from p2pem.inputs import check_rows, graph_over_parties, node_split, simulated_graph
from p2pem.protocols import ProtocolSpec
from p2pem.registry import make_protocol
from p2pem.saved import SavedModel, read_model, write_model
from p2pem.simulate import RunResult, run_protocol
from p2pem.streams import init_seed, scenario_streams


#: The estimator class of each model family (what :func:`load` returns), filled as the classes
#: are defined (:meth:`DistributedMixture.__init_subclass__`).
ESTIMATORS: dict[str, type[DistributedMixture]] = {}



def degenerate_components(weights: Any, n_rows: int, n_features: int) -> npt.NDArray[np.intp]:
    """The components that hold fewer rows' weight than ``n_features + 1`` (a NaN weight too):
    their covariance rests on ``reg_covar`` more than on the data (scikit-learn warns of them)."""
    mass = np.asarray(weights, dtype=np.float64) * n_rows
    return np.flatnonzero(~(mass >= n_features + 1))

class DistributedMixture:
    """What every distributed mixture estimator shares: fitting over a graph, inference, saving.

    A subclass names its model family (:meth:`_family`, and :attr:`family_name` for
    :func:`load`); one with parameters of its own declares them in its own ``__init__``,
    which calls this one (scikit-learn's contract: ``get_params`` reads the signature).  The
    parameters here are :class:`DistributedGMM`'s.  After ``fit`` the model's arrays are
    attributes named after the family's parameters with a trailing underscore
    (:attr:`~p2pem.families.base.MixtureFamily.param_keys`, then
    :meth:`~p2pem.families.base.MixtureFamily.derived`): ``weights_``, ``means_``,
    ``covariances_`` for :class:`DistributedGMM`; ``weights_``, ``locations_``, ``scales_``,
    ``shapes_``, ``deltas_``, ``means_``, ``covariances_`` for
    :class:`DistributedSkewNormalMixture`; ``weights_``, ``means_``, ``covariances_``,
    ``probabilities_`` for :class:`DistributedMixedMixture`.  Every subclass is
    scikit-learn-native the same way (tags, a plain 2-D ``X`` over ``n_nodes``, ``node_ids``)
    and saves the same way (:meth:`save`, :func:`load`).
    """

    #: the name of the family this class fits (:data:`ESTIMATORS`; None: an abstract base)
    family_name: str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that names its family becomes that family's estimator (:func:`load`, the tests' list)."""
        super().__init_subclass__(**kwargs)
        if cls.family_name is not None:
            ESTIMATORS[cls.family_name] = cls

    #: a loaded model's record (:func:`load`): the saved document and its graph
    saved_: SavedModel
    saved_graph_: dict[str, Any] | None
    row_nodes_: npt.NDArray[np.int64] | None

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
        n_nodes: int = 10,
        protocol_params: Mapping[str, Any] | None = None,
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
        self.n_nodes = n_nodes
        self.protocol_params = protocol_params

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

    def __sklearn_tags__(self) -> Any:
        """scikit-learn's tags: an unsupervised density estimator on dense 2-D float data.

        Only scikit-learn's own tools call this, so scikit-learn is imported here and
        nowhere else (it is not a dependency of p2pem).
        """
        from sklearn.utils import InputTags, Tags, TargetTags  # here: optional dependency, loaded by its caller already

        return Tags(estimator_type="density_estimator", target_tags=TargetTags(required=False), input_tags=InputTags(allow_nan=False))

    def __repr__(self) -> str:
        defaults = {p.name: p.default for p in inspect.signature(type(self).__init__).parameters.values() if p.name != "self"}
        shown = [f"{k}={v!r}" for k, v in self.get_params().items() if not _same(v, defaults[k])]
        return f"{type(self).__name__}({', '.join(shown)})"

    # -- fitting -------------------------------------------------------------------------------

    def fit(self, X: Any, y: Any = None, *, node_ids: Any = None, graph: nx.Graph | None = None) -> DistributedMixture:
        """Fit the mixture with the configured protocol over the graph.

        Parameters
        ----------
        X : (n_rows, d) array-like, or a list of (n_i, d) arrays
            All rows (an array, a list of rows, a DataFrame), or one array per node.  Rows
            without ``node_ids`` are spread evenly over ``n_nodes`` simulated nodes.
        y : ignored
            scikit-learn passes ``y``; a networkx graph here is taken as ``graph``, so
            ``fit(parts, graph)`` works.
        node_ids : array-like of hashable, shape (n_rows,), optional
            The party of every row (site names, any ids): the parties become nodes ``0..n-1``
            in sorted order of their ids (:func:`p2pem.data.relabel_ids`).  One party
            alone has nothing to aggregate: its model is fitted locally (``centralized``).
        graph : networkx.Graph, optional
            Nodes ``0..n-1``, or the parties' ids of ``node_ids`` (``nx.cycle_graph(sites)``); default: the ``graph`` parameter, else a random geometric
            graph over the nodes drawn from ``random_state`` (:func:`p2pem.inputs.simulated_graph`).

        Returns
        -------
        self
        """
        if isinstance(y, nx.Graph) and graph is None:
            graph = y
        streams = scenario_streams(self.random_state)
        split = node_split(X, node_ids=node_ids, n_nodes=self.n_nodes, rng=np.random.default_rng(streams["data"]), estimator=type(self).__name__)
        parts = split.parts
        check_parts(parts, self.n_components)
        d = int(parts[0].shape[1])
        family = self._family(d)
        init = None if self.init is None else family.params_from_dict(dict(self.init), self.n_components, d)
        settings = EMSettings(self.n_components, self.max_iter, self.tol, self.reg_covar, init, init_seed(streams), family=family)
        spec = self._protocol_spec()
        if graph is None:
            graph = self.graph
        if len(parts) == 1 and graph is None:
            spec = make_protocol("centralized")  # one party: nothing to aggregate, every protocol is local EM
        if graph is None:
            graph = simulated_graph(len(parts), spec, np.random.default_rng(streams["graph"]))
        else:
            graph = graph_over_parties(graph, split.node_ids, len(parts))
        result = run_protocol(parts, graph, spec, settings, seed=streams["protocol"], engine=self.engine, record_trace=self.record_trace)
        self.result_: RunResult = result
        # the model as its family's parameters read back (what save writes and load reads): a family whose EM works in
        # other coordinates (the skew-normal's Delta, Gamma) recomputes them from these, so a loaded model is the same bits
        params = result.family.params_from_dict(result.family.to_dict(result.params), self.n_components, d)
        self._set_model(result.family, params, n_features_in=d, loglik=result.loglik, n_iter=result.n_iter,
                        converged=result.converged, n_rows=len(split.row_nodes))
        self._warn_convergence(result.converged, len(split.row_nodes), d)
        self.graph_ = graph
        self.row_nodes_ = split.row_nodes
        self.node_ids_ = split.node_ids
        self.protocol_ = {"name": spec.name, "label": result.protocol, "params": result.protocol_params}
        if split.feature_names is not None:
            self.feature_names_in_ = np.asarray(split.feature_names, dtype=object)
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        return self

    def _warn_convergence(self, converged: bool, n_rows: int, n_features: int) -> None:
        """scikit-learn's warnings after a fit: EM that stopped at ``max_iter`` short of its
        tolerance, and components too light to estimate (fewer rows' weight than
        ``n_features + 1``: their covariance is ``reg_covar``'s more than the data's)."""
        name = type(self).__name__
        if self.tol > 0 and self.max_iter > 0 and not converged:
            warnings.warn(
                f"{name} did not converge in max_iter = {self.max_iter} EM iterations (tol = {self.tol:g}): "
                "increase max_iter or tol, or check for degenerate data",
                ConvergenceWarning,
                stacklevel=3,
            )
        weights = getattr(self._params, "weights", None)
        if weights is None:
            return
        mass = np.asarray(weights, dtype=np.float64) * n_rows
        light = degenerate_components(weights, n_rows, n_features)
        if light.size:
            shown = ", ".join(f"{k} ({mass[k]:.2g} rows)" for k in light[:5]) + (", ..." if light.size > 5 else "")
            warnings.warn(
                f"{name}: {light.size} of {self.n_components} components hold fewer rows' weight than n_features + 1 = "
                f"{n_features + 1}: {shown}; they are degenerate (their covariance rests on reg_covar): decrease n_components",
                ConvergenceWarning,
                stacklevel=3,
            )

    def _family(self, n_features: int | None = None) -> MixtureFamily:
        """The model family this estimator fits (from its constructor parameters and, where
        they leave it open, the width of the rows it is given)."""
        raise NotImplementedError(f"{type(self).__name__} names no model family: use DistributedGMM or DistributedSkewNormalMixture")

    @classmethod
    def _family_params(cls, family: MixtureFamily) -> dict[str, Any]:
        """The constructor parameters that rebuild ``family`` (:func:`load`); none by default."""
        return {}

    def _protocol_spec(self) -> ProtocolSpec:
        if isinstance(self.protocol, ProtocolSpec):
            if self.protocol_params:
                raise ConfigError("protocol_params go with a protocol name; a protocol object carries its own parameters")
            return self.protocol
        return make_protocol(self.protocol, self.protocol_params)

    def _set_model(self, family: MixtureFamily, params: Any, *, n_features_in: int, loglik: list[float], n_iter: int, converged: bool,
                   n_rows: int, preprocessing: Preprocessing | None = None) -> None:
        """The fitted state, from a fit or from a saved model (:func:`load`)."""
        self.family_ = family
        self._params = params
        for key, _ in family.param_keys:
            setattr(self, f"{key}_", np.asarray(getattr(params, key)))
        for key, value in family.derived(params).items():
            setattr(self, f"{key}_", np.asarray(value))
        self.preprocessing_ = preprocessing
        self.loglik_ = list(loglik)
        self.n_iter_ = n_iter
        self.converged_ = converged
        self.n_features_in_ = n_features_in
        self.n_rows_ = n_rows
        last = loglik[-1] if loglik else None
        self.network_loglik_ = float(last) * n_rows if last is not None and last == last else float("nan")

    # -- saving ---------------------------------------------------------------------------

    def to_saved(self) -> SavedModel:
        """The fitted model as a :class:`~p2pem.saved.SavedModel` (what :meth:`save` writes)."""
        self._check_fitted()
        graph = getattr(self, "graph_", None)
        names = getattr(self, "feature_names_in_", None)
        rows = getattr(self, "row_nodes_", None)
        return SavedModel(
            family=self.family_,
            params=self._params,
            n_features_in=self.n_features_in_,
            feature_names=None if names is None else tuple(str(n) for n in names),
            preprocessing=self.preprocessing_,
            protocol=getattr(self, "protocol_", {}),
            fit={"n_iter": self.n_iter_, "converged": self.converged_, "loglik": self.loglik_, "n_rows": self.n_rows_,
                 "max_iter": self.max_iter, "tol": self.tol, "reg_covar": self.reg_covar, "seed": self.random_state},
            graph=getattr(self, "saved_graph_", None) if graph is None else
            {"n_nodes": graph.number_of_nodes(), "edges": sorted([min(e), max(e)] for e in graph.edges), "node_ids": _json_ids(getattr(self, "node_ids_", None))},
            row_nodes=None if rows is None else [int(v) for v in rows],
        )

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the fitted model to ``path`` (JSON, format ``p2pem-model``); :func:`p2pem.load` reads it back.

        The file holds the parameters, the family, the feature names and preprocessing
        constants, the protocol with its privacy block, the EM trace, the graph and the node
        of every row, the p2pem version and the time; a loaded model predicts and scores
        rows exactly (to the bit) as this one.
        """
        return write_model(self.to_saved(), path)

    # -- inference (GaussianMixture's methods) ----------------------------------------------

    @property
    def params_(self) -> Any:
        """The fitted model as the family's single parameters (GMMParams, SkewNormalParams)."""
        self._check_fitted()
        return self._params

    def _check_fitted(self) -> None:
        if not hasattr(self, "family_"):
            raise _not_fitted_class()(
                f"This {type(self).__name__} instance is not fitted yet: call fit() before using this estimator"
            )

    def _X(self, X: npt.ArrayLike) -> FloatArray:
        self._check_fitted()
        names = getattr(self, "feature_names_in_", None)
        arr = check_rows(X, n_features=self.n_features_in_, names=None if names is None else list(names), estimator=type(self).__name__,
                         unnamed_ok=hasattr(self, "saved_"))
        return arr if self.preprocessing_ is None else self.preprocessing_.apply(arr)

    def score_samples(self, X: npt.ArrayLike) -> FloatArray:
        """Log-likelihood log p(x) of every row of ``X`` under the fitted mixture."""
        arr = self._X(X)
        return self.family_.score_samples(arr, self.params_)

    def score(self, X: npt.ArrayLike, y: Any = None) -> float:
        """Mean log-likelihood per row of ``X`` (scikit-learn's ``score``)."""
        return float(self.score_samples(X).mean())

    def predict_proba(self, X: npt.ArrayLike) -> FloatArray:
        """Posterior probability of each component for every row of ``X``, shape (n, K)."""
        arr = self._X(X)
        return self.family_.predict_proba(arr, self.params_)

    def predict(self, X: npt.ArrayLike) -> npt.NDArray[np.intp]:
        """The most probable component of every row of ``X``."""
        arr = self._X(X)
        return np.argmax(self.family_.log_responsibilities(arr, self.params_)[0], axis=1)

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
        return self.family_.sample(self.params_, int(n_samples), gen)

    def _n_parameters(self) -> int:
        """Free parameters of the fitted family's model (what BIC and AIC charge; scikit-learn's count for a Gaussian one)."""
        width = np.asarray(self._params.means).shape[-1]  # the model's features (after any projection)
        return self.family_.n_parameters(int(np.asarray(self._params.weights).shape[0]), int(width))

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
        geometric graph over the nodes from ``random_state`` (redrawn until the protocol
        can run on it: pdmm-sp needs a cycle, secure-sum a Hamiltonian cycle).
    n_nodes : int, default 10
        Simulated nodes that :meth:`fit` spreads a plain 2-D ``X`` over (evenly, from
        ``random_state``; at most one node per row).  Not used when ``fit`` is given one
        array per node or ``node_ids``.
    protocol_params : dict, optional
        Parameters of ``protocol`` given by name, e.g. ``{"perturbation_std": 1e3}``: what
        ``GridSearchCV`` searches over (``{"protocol_params": [{...}, {...}]}``).

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
    feature_names_in_ : array of str
        The columns of a DataFrame ``X`` (only then).
    graph_ : networkx.Graph
        The graph of the fit.
    row_nodes_ : (n_rows,) int array
        The node of every row of ``X`` (one array per node: their rows in order).
    node_ids_ : tuple or None
        The ``node_ids`` of nodes ``0..n-1``, in sorted order, when given.
    result_ : RunResult

    Notes
    -----
    scikit-learn's tools take it as they take ``GaussianMixture``: ``Pipeline``,
    ``cross_val_score`` (its ``score`` is the mean log-likelihood per row: higher is better),
    ``GridSearchCV`` over ``n_components``, ``n_nodes`` and ``protocol_params``.  To give the
    parties in cross-validation, pass ``params={"node_ids": site}`` (scikit-learn splits it with
    the rows); a group splitter's ``groups`` stays scikit-learn's.  scikit-learn is not
    imported by p2pem: only its own tools call ``__sklearn_tags__``.

    Examples
    --------
    >>> from p2pem import DistributedGMM, geometric_graph
    >>> rng = np.random.default_rng(0)
    >>> parts = [rng.normal(size=(3, 2)) + (i % 2) * 4 for i in range(20)]
    >>> m = DistributedGMM(n_components=2, max_iter=20, random_state=0).fit(parts, geometric_graph(20, seed=1))
    >>> m.weights_.shape, m.means_.shape
    ((2,), (2, 2))
    """

    family_name = "gaussian"

    def _family(self, n_features: int | None = None) -> MixtureFamily:
        return GAUSSIAN


class DistributedSkewNormalMixture(DistributedMixture):
    """Skew-normal mixture fitted to data spread over the nodes of a graph.

    Azzalini's multivariate skew-normal components in the direct parametrisation (the R
    package ``sn``'s ``dp``); the EM and the parametrisations are in :mod:`p2pem.snmix`.
    Every protocol of :class:`DistributedGMM` fits it, with the same privacy; it is as
    scikit-learn-native (a plain 2-D ``X`` over ``n_nodes``, ``node_ids``) and saves the same
    way.

    Parameters
    ----------
    n_components, protocol, max_iter, tol, reg_covar, random_state, engine, record_trace, graph, n_nodes, protocol_params
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
    loglik_, n_rows_, network_loglik_, n_iter_, converged_, n_features_in_, graph_, row_nodes_, node_ids_, result_
        As for :class:`DistributedGMM`.
    """

    family_name = "skew-normal"

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
        n_nodes: int = 10,
        protocol_params: Mapping[str, Any] | None = None,
        init_shapes: Sequence[float] | None = None,
        max_delta: float | None = None,
    ) -> None:
        super().__init__(n_components, protocol, max_iter, tol, reg_covar, random_state, init, engine, record_trace, graph, n_nodes,
                         protocol_params)
        self.init_shapes = init_shapes
        self.max_delta = max_delta

    def _family(self, n_features: int | None = None) -> MixtureFamily:
        shapes = None if self.init_shapes is None else list(self.init_shapes)
        return make_family("skew-normal", init_shapes=shapes, max_delta=self.max_delta)

    @classmethod
    def _family_params(cls, family: MixtureFamily) -> dict[str, Any]:
        config = family.config()
        return {"init_shapes": config.get("init_shapes"), "max_delta": config.get("max_delta")}


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
    n_components, protocol, max_iter, tol, reg_covar, random_state, engine, record_trace, graph, n_nodes, protocol_params
        As for :class:`DistributedGMM`.
    init : dict, optional
        ``{"weights", "means", "covariances", "probabilities"}`` to start every protocol from;
        by default the private initialisation.
    n_continuous : int, optional
        p, the continuous columns (the first p of a row); default: every column but the
        last ``len(n_categories)``.
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
    loglik_, n_rows_, network_loglik_, n_iter_, converged_, n_features_in_, graph_, row_nodes_, node_ids_, result_
        As for :class:`DistributedGMM`.
    """

    family_name = "mixed"

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
        n_nodes: int = 10,
        protocol_params: Mapping[str, Any] | None = None,
        n_continuous: int | None = None,
        n_categories: Sequence[int] = (),
        covariance: str = "diag",
        stratify: int | None = None,
        strata_weights: Sequence[float] | None = None,
    ) -> None:
        super().__init__(n_components, protocol, max_iter, tol, reg_covar, random_state, init, engine, record_trace, graph, n_nodes,
                         protocol_params)
        self.n_continuous = n_continuous
        self.n_categories = n_categories
        self.covariance = covariance
        self.stratify = stratify
        self.strata_weights = strata_weights

    def _family(self, n_features: int | None = None) -> MixtureFamily:
        weights = None if self.strata_weights is None else list(self.strata_weights)
        categories = list(self.n_categories)
        p = self.n_continuous
        if p is None:  # every column but the categorical ones
            p = 0 if n_features is None else n_features - len(categories)
        return make_family("mixed", n_continuous=p, n_categories=categories, covariance=self.covariance, stratify=self.stratify,
                           strata_weights=weights)

    @classmethod
    def _family_params(cls, family: MixtureFamily) -> dict[str, Any]:
        config = family.config()
        return {key: config[key] for key in ("n_continuous", "n_categories", "covariance", "stratify", "strata_weights")}



def load(path: str | os.PathLike[str]) -> DistributedMixture:
    """A fitted estimator from a saved model (:meth:`DistributedMixture.save`, ``p2pem model``).

    The estimator of the model's family, with its constructor parameters (``n_components``,
    ``protocol``, ``max_iter``, ``tol``, ``reg_covar``, ``random_state``) as saved and its
    fitted state; it predicts, scores and samples exactly as the saved one (raw rows pass
    through the saved preprocessing first).  It holds no ``result_`` (the run is not saved;
    its record is in ``saved_``: protocol, privacy, EM trace, graph, rows' nodes).

    Raises
    ------
    ConfigError
        The file is missing or not a saved model (one line naming the file and key).
    """
    saved = read_model(path)
    cls = ESTIMATORS.get(saved.family.name)
    if cls is None:
        raise ConfigError(f"{path}: no estimator for model family {saved.family.name!r} (known: {', '.join(ESTIMATORS)})")
    fit = saved.fit
    settings = {key: fit[key] for key in ("max_iter", "tol", "reg_covar") if isinstance(fit.get(key), (int, float))}
    model = cls(n_components=saved.n_components, protocol=saved.protocol.get("name", "pdmm-sp"), **settings)
    model.set_params(**cls._family_params(saved.family))
    if isinstance(fit.get("seed"), int):
        model.random_state = fit["seed"]
    loglik = [float("nan") if v is None else float(v) for v in fit.get("loglik", [])]
    model._set_model(saved.family, saved.params, n_features_in=saved.n_features_in, loglik=loglik, n_iter=int(fit.get("n_iter", 0)),
                     converged=bool(fit.get("converged", False)), n_rows=int(fit.get("n_rows", 0)), preprocessing=saved.preprocessing)
    if saved.feature_names is not None:
        model.feature_names_in_ = np.asarray(saved.feature_names, dtype=object)
    model.protocol_ = saved.protocol
    model.saved_graph_ = saved.graph
    ids = (saved.graph or {}).get("node_ids")
    model.node_ids_ = None if ids is None else tuple(ids)  # the parties' names, as fitted
    model.row_nodes_ = None if saved.row_nodes is None else np.asarray(saved.row_nodes)
    model.saved_ = saved
    return model


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


def _json_ids(ids: Any) -> list[Any] | None:
    """Node ids as JSON can hold them: numbers and text as they are, anything else as its text."""
    if ids is None:
        return None
    return [v.item() if isinstance(v, np.generic) else v if isinstance(v, (str, int, float)) and not isinstance(v, bool) else str(v) for v in ids]
