"""What a mixture family provides to the EM loop, the engines and the estimator.

The EM loop (:class:`p2pem.em.EMState`) never looks inside a model: it asks the family for
statistics vectors, hands network averages back to it and keeps whatever parameters the
family returns.  The protocols never see the family at all: they sum vectors.  So a new
family (skew-normal, mixed-type, ...) is one subclass of :class:`MixtureFamily`, and every
protocol, both engines, the DP mechanisms' plumbing and the deployment run it unchanged.

Two parameter types
-------------------
*Single parameters* (``P``, e.g. :class:`p2pem.gmm.GMMParams`) are one node's model: what
the user gives as ``init``, what ``result.json`` and the estimator show.  *Batched
parameters* (``B``, e.g. :class:`p2pem.families.gaussian.GaussianBatch`) are the models of
N nodes at once with a leading node axis, because the vectorised engine advances every node
in one call (a Node is a batch of one).  Both expose every name of
:attr:`MixtureFamily.param_keys` as an attribute holding an array (batched: with the
leading node axis), which is how :meth:`MixtureFamily.flatten` and
:meth:`MixtureFamily.to_dict` work for every family.

Batch invariance
----------------
Everything batched must give each node the same bits whatever N is: elementwise operations,
sums in a fixed order, ``np.add.reduceat`` over a node's rows, no BLAS call whose rounding
depends on the batch (see :func:`p2pem.gmm.batch_statistics`).  That is what makes one
:class:`~p2pem.node.Node` reproduce the vectorised engine to the last bit, and a deployment
reproduce a simulation.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping
from typing import Any, Generic, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntpArray = npt.NDArray[np.intp]


class BatchParams(Protocol):
    """The models of N nodes (leading node axis on every array of ``param_keys``)."""

    @property
    def n_nodes(self) -> int:
        """N."""
        ...

    def node(self, i: int) -> Any:
        """Node ``i``'s model as the family's single-parameter type (views, no copies)."""
        ...


P = TypeVar("P")  # single parameters
B = TypeVar("B", bound=BatchParams)  # batched parameters


class MixtureFamily(abc.ABC, Generic[P, B]):
    """A family of mixture models, as the EM loop and the estimator use it.

    Implementations are frozen dataclasses: the instance is public configuration every
    node shares (a mixed-type family carries its column types and public category sets;
    the Gaussian family has none).  Names in :data:`p2pem.families.FAMILIES`.

    Attributes
    ----------
    name : str
        The name users type (``"gaussian"``).
    param_keys : tuple of (str, int)
        The model's arrays as ``(name, ndim)`` of a single model, in the order of
        ``result.json``, :meth:`to_dict` and :meth:`flatten` (Gaussian:
        ``(("weights", 1), ("means", 2), ("covariances", 3))``).

    Notes
    -----
    The statistics vector of one node and iteration is one flat float64 vector of
    :meth:`stats_size` entries whose **last entry is the node's log-likelihood sum**; the EM
    loop appends the continue flag itself.  Only ratios of network averages may enter the
    M-step (consensus delivers averages, exact protocols sums divided by n), so
    :meth:`m_step` must be invariant to scaling all statistics by one factor.
    """

    name: str
    param_keys: tuple[tuple[str, int], ...]

    # -- sizes -------------------------------------------------------------------------------

    @abc.abstractmethod
    def stats_size(self, n_components: int, n_features: int) -> int:
        """Length of the E-step statistics vector (log-likelihood included, flag excluded)."""

    @abc.abstractmethod
    def init_stats_size(self, n_features: int) -> int:
        """Length of the private-initialisation statistics vector."""

    @abc.abstractmethod
    def flat_size(self, n_components: int, n_features: int) -> int:
        """Length of :meth:`flatten` of one model."""

    # -- the EM loop (batched over nodes, batch-invariant rounding) --------------------------

    @abc.abstractmethod
    def init_statistics(self, X: FloatArray, offsets: IntpArray) -> FloatArray:
        """(N, init_stats_size): what each node contributes to the private initialisation.

        ``X`` holds the rows of all N nodes back to back; node i's start at ``offsets[i]``.
        """

    @abc.abstractmethod
    def init_from_global(self, averages: FloatArray, n_components: int, seed: int) -> B:
        """Initial models from each node's network average of :meth:`init_statistics`.

        Must give bit-identical models on every node although consensus leaves each node a
        slightly different average (round the moments to a few significant digits, as
        :func:`p2pem.gmm.init_from_global` does), and draw only from ``seed`` (public).

        Raises
        ------
        p2pem.errors.ModelError
            The averages cannot give a model (e.g. a singular global covariance).
        """

    @abc.abstractmethod
    def statistics(self, X: FloatArray, offsets: IntpArray, params: B) -> FloatArray:
        """(N, stats_size): the E-step statistics of each node's rows at its own model.

        The last column is the log-likelihood sum of the node's rows at ``params``.
        """

    @abc.abstractmethod
    def m_step(self, stats: FloatArray, params: B, reg_covar: float, *, iteration: int | None = None) -> tuple[B, FloatArray]:
        """New models from each node's network average of :meth:`statistics`.

        Parameters
        ----------
        stats : (N, stats_size) array
            Averages (or sums) of the statistics computed at ``params``.
        params : B
            The models the statistics were computed at.
        reg_covar : float
        iteration : int, optional
            For error messages.

        Returns
        -------
        params : B
            The updated models (not yet checked, see :meth:`check`).
        mean_loglik : (N,) array
            Mean log-likelihood per row of ``params`` (the old models).

        Raises
        ------
        p2pem.errors.ModelError
            A component collapsed or the statistics are not finite: one line that says which
            component and what to change.
        """

    @abc.abstractmethod
    def total_count(self, stats: FloatArray, params: B) -> FloatArray:
        """(N,): the number of rows the statistics (computed at ``params``) sum over; of an
        average, the rows per node."""

    def check(self, params: B) -> None:
        """Raise :class:`~p2pem.errors.ModelError` when ``params`` cannot be evaluated.

        Called once when the EM loop adopts new models (after the M-step and any privacy
        repair), so a failure surfaces where the models were made.  A family may compute
        and cache what its E-step needs here (the Gaussian family: precision Cholesky
        factors).  The default accepts everything.
        """

    @abc.abstractmethod
    def broadcast(self, params: P, n_nodes: int) -> B:
        """A given single model (``EMSettings.init``) as the same model at N nodes."""

    # -- single models: input, output, the estimator ----------------------------------------

    @abc.abstractmethod
    def params_from_dict(self, init: Mapping[str, Any], n_components: int, n_features: int | None = None) -> P:
        """Validate a user-given model (``[em.init]``, rosters, the estimator's ``init``).

        Raises
        ------
        p2pem.errors.InitError
            Naming the key at fault (``key``, ``problem``), so a file reader can report
            the file and the dotted key.
        """

    def to_dict(self, params: P | B) -> dict[str, list]:
        """``{key: nested list}`` in :attr:`param_keys` order (``result.json``)."""
        return {key: np.asarray(getattr(params, key)).tolist() for key, _ in self.param_keys}

    def derived(self, params: P) -> dict[str, list]:
        """Quantities derived from a model that ``result.json`` shows after :meth:`to_dict`
        (never read back).  The skew-normal family: ``deltas`` and each component's
        ``means`` and ``covariances``.  The default: none."""
        return {}

    def config(self) -> dict[str, Any]:
        """The family's public configuration: the keyword arguments that rebuild it with
        :func:`p2pem.families.make_family` (None values left out; tuples as lists, as TOML
        and JSON write them).  Scenarios, rosters and ``result.json`` carry it."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]  # every family is a dataclass
            value = getattr(self, f.name)
            if f.init and value is not None:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out

    def describe(self) -> dict[str, Any]:
        """``{"name": ..., **config()}``: the family as a document names it."""
        return {"name": self.name, **self.config()}

    def flatten(self, params: P | Mapping[str, Any]) -> FloatArray:
        """One model (or its :meth:`to_dict` form) as one float64 vector.

        The arrays of :attr:`param_keys` raveled and concatenated in that order: the one
        flattening that node spreads, a deployment's final agreement and the comparison of a
        deployment with its simulation use.
        """
        if isinstance(params, Mapping):
            return np.concatenate([np.ravel(np.asarray(params[key], dtype=np.float64)) for key, _ in self.param_keys])
        return np.concatenate([np.ravel(np.asarray(getattr(params, key), dtype=np.float64)) for key, _ in self.param_keys])

    def flatten_batch(self, params: B) -> FloatArray:
        """(N, flat_size): row i is :meth:`flatten` of ``params.node(i)``."""
        n = params.n_nodes
        return np.concatenate([np.asarray(getattr(params, key)).reshape(n, -1) for key, _ in self.param_keys], axis=1)

    @abc.abstractmethod
    def log_responsibilities(self, X: FloatArray, params: P) -> tuple[FloatArray, FloatArray]:
        """``(log_resp (n, K), log p(x) (n,))`` of rows ``X`` under one model (in log space)."""

    def score_samples(self, X: FloatArray, params: P) -> FloatArray:
        """log p(x) of every row of ``X``."""
        return self.log_responsibilities(X, params)[1]

    def predict_proba(self, X: FloatArray, params: P) -> FloatArray:
        """(n, K) posterior probabilities of the components."""
        return np.exp(self.log_responsibilities(X, params)[0])

    @abc.abstractmethod
    def sample(
        self, params: P, n_samples: int, rng: np.random.Generator | np.random.RandomState
    ) -> tuple[FloatArray, npt.NDArray[np.intp]]:
        """``n_samples`` rows from one model and their component labels (rows grouped by component)."""

    @abc.abstractmethod
    def n_parameters(self, n_components: int, n_features: int) -> int:
        """Free parameters of one model (for BIC and AIC)."""
