"""The EM loop of one node as a small state machine, shared by every engine.

A node alternates two things: it *contributes* a statistics vector to a network aggregation
and it *absorbs* the network average that comes back.  :class:`EMState` owns that loop (a
:class:`~p2pem.task.Task`); the Node (message level), the vectorised simulator and the
centralised reference all drive the same object through :func:`p2pem.task.drive`, so they
cannot drift apart.  It reaches the model only through ``EMSettings.family`` (a
:class:`~p2pem.families.base.MixtureFamily`: statistics, M-step, initialisation), so every
family runs in the same loop.

Aggregation 0 averages the global moments for the private initialisation (skipped when the
user gives ``init``).  Aggregation t >= 1 averages the E-step statistics at theta_{t-1} plus a
*continue* flag: a node sets it to 1 while it still wants M-step t (t <= max_iter and the
log-likelihood change of the previous iteration was >= tol).  All nodes apply M-step t iff the
average flag exceeds 0.5/n, i.e. iff any node wants to continue.  That makes the stopping
decision identical on every node even when consensus leaves each node a slightly different
average (the flag average is a multiple of 1/n, so a 0.5/n margin is far above any consensus
error).  The last aggregation, which nobody wants to continue from, still delivers the
log-likelihood of the final parameters, so ``loglik`` has one entry per M-step plus one.  A
private run (``settings.privacy``) skips that aggregation: it would release the statistics
at the final model once more, unpaid; its last ``loglik`` entry is NaN like the others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from p2pem.errors import ConfigError, ProtocolError
from p2pem.families import GAUSSIAN, MixtureFamily
from p2pem.families.base import FloatArray
from p2pem.task import drive


class PrivacyHook(Protocol):
    """How a differentially private run changes the EM loop (``EMSettings.privacy``).

    Set by a private protocol's :meth:`~p2pem.protocols.base.ProtocolSpec.bind` (never by
    hand); each family's is in :mod:`p2pem.dp.releases` (the Gaussian family's
    :class:`p2pem.dp.releases.gaussian.PrivateEM`).  Everything here is
    post-processing of released values or of a node's own data, so it costs no budget.
    ``params`` are the family's batched parameters (one model per node).
    """

    def encode(self, stats: FloatArray, params: Any) -> FloatArray:
        """(N, P) statistics computed at ``params`` -> what is released (log-likelihood blanked)."""
        ...

    def decode(self, stats: FloatArray, params: Any) -> FloatArray:
        """Noisy released averages (N, P) -> statistics the family's M-step takes."""
        ...

    def repair(self, params: Any) -> Any:
        """The M-step's models post-processed into valid ones (same batched type)."""
        ...

    def decode_init(self, rows: FloatArray) -> FloatArray:
        """Noisy averages of the private initialisation (N, P0) -> consistent ones."""
        ...


@dataclass(frozen=True, eq=False)
class EMSettings:
    """What every node must agree on before a run (all of it is public).

    Parameters
    ----------
    n_components : int
    max_iter : int
        Number of M-steps at most; with ``tol=0`` exactly this many are run.
    tol : float
        Stop when the change of the mean log-likelihood per row falls below ``tol``.
    reg_covar : float
        Added to covariance diagonals, as in scikit-learn.
    init : single parameters of ``family`` (GMMParams for the Gaussian family) or None
        Given initial parameters; None draws them from the privately averaged global
        moments and ``init_seed`` (public).
    init_seed : int
    privacy : PrivacyHook or None
        Set by a differentially private protocol (never by hand): how statistics are
        released and the noisy M-step repaired, see :mod:`p2pem.dp`.
    family : MixtureFamily
        The model family (:mod:`p2pem.families`); Gaussian mixtures by default.
    """

    n_components: int
    max_iter: int = 100
    tol: float = 1e-6
    reg_covar: float = 1e-6
    init: Any = None
    init_seed: int = 0
    privacy: PrivacyHook | None = None
    family: MixtureFamily = GAUSSIAN

    def __post_init__(self) -> None:
        if not isinstance(self.n_components, int) or isinstance(self.n_components, bool) or self.n_components < 1:
            raise ConfigError(f"n_components must be a positive integer, got {self.n_components!r}")
        if not isinstance(self.max_iter, int) or isinstance(self.max_iter, bool) or self.max_iter < 0:
            raise ConfigError(f"max_iter must be a non-negative integer, got {self.max_iter!r}")
        if not (isinstance(self.tol, (int, float)) and math.isfinite(self.tol) and self.tol >= 0):
            raise ConfigError(f"tol must be a finite number >= 0, got {self.tol!r}")
        if not (isinstance(self.reg_covar, (int, float)) and math.isfinite(self.reg_covar) and self.reg_covar >= 0):
            raise ConfigError(f"reg_covar must be a finite number >= 0, got {self.reg_covar!r}")
        if not isinstance(self.family, MixtureFamily):
            raise ConfigError(f"family must be a MixtureFamily (p2pem.families.make_family), got {self.family!r}")


class EMState:
    """The EM loop of one node, or of many nodes advanced together (the vectorised engine).

    A :class:`~p2pem.task.Task`: the Node, the engines and :func:`p2pem.task.drive` run it.

    Parameters
    ----------
    parts : list of (n_rows_i, d) arrays
        The private rows of each node this object advances (one for a Node).
    settings : EMSettings
    n_nodes : int
        Number of nodes the network averages run over (sets the continue-flag threshold).

    Notes
    -----
    ``contribution()`` returns one row per node; ``absorb(averages)`` takes one average per
    node (consensus leaves each node its own).  All arithmetic is batched over nodes by the
    family, whose rounding does not depend on the batch size, so one Node and the batch
    engine produce the same bits.  ``model`` holds the family's batched parameters (leading
    node axis); :meth:`params` gives one node's.
    """

    def __init__(self, parts: list[FloatArray], settings: EMSettings, n_nodes: int) -> None:
        self.X = np.ascontiguousarray(np.concatenate(parts, axis=0), dtype=float)
        sizes = [len(p) for p in parts]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.intp)
        self.n_parts = len(parts)
        self.settings = settings
        self.family = settings.family
        self.n_nodes = n_nodes
        self.iteration = 0
        self.loglik: list[FloatArray] = []
        self.n_iter = 0
        self._converged = np.zeros(self.n_parts, dtype=bool)
        self.finished = False
        self._want_more = np.full(self.n_parts, settings.max_iter > 0)
        self.model: Any = None  # the family's batched parameters, from aggregation 0 or init
        #: per node, the network's total soft count (sum_k a_k, in rows) of the last EM
        #: aggregation as the node received it: noisy in a private run, where it is
        #: post-processing of a paid release (the private Bayes classifier's priors)
        self.released_rows = np.full(self.n_parts, np.nan)
        if settings.init is not None:
            self._set_model(self.family.broadcast(settings.init, self.n_parts))
            self.iteration = 1

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])

    def params(self, node: int = 0) -> Any:
        """Node ``node``'s model (the family's single parameters, e.g. GMMParams)."""
        return self.model.node(node)

    def node_loglik(self, node: int = 0) -> list[float]:
        return [float(v[node]) for v in self.loglik]

    def contribution_size(self) -> int:
        """Length of the next contribution: the init moments, or the statistics and the flag."""
        if self.iteration == 0:
            return self.family.init_stats_size(self.n_features)
        return self.family.stats_size(self.settings.n_components, self.n_features) + 1

    def contribution(self) -> FloatArray:
        """(n_parts, P): what each node feeds into aggregation ``self.iteration``."""
        if self.iteration == 0:
            return self.family.init_statistics(self.X, self.offsets)
        stats = self.family.statistics(self.X, self.offsets, self.model)
        if self.settings.privacy is not None:
            stats = self.settings.privacy.encode(stats, self.model)
        flag = np.where(self._want_more, 1.0, 0.0)[:, None]
        return np.concatenate([stats, flag], axis=1)

    def absorb(self, averages: FloatArray) -> None:
        """Advance with each node's network average of aggregation ``self.iteration``."""
        s = self.settings
        averages = np.asarray(averages, dtype=float).reshape(self.n_parts, -1)
        if self.iteration == 0:
            if s.privacy is not None:
                averages = s.privacy.decode_init(averages)
            self._set_model(self.family.init_from_global(averages, s.n_components, s.init_seed))
            self.iteration = 1
            return
        stats, flags = averages[:, :-1], averages[:, -1]
        go = flags > 0.5 / self.n_nodes
        if go.any() != go.all():
            raise ProtocolError(f"nodes disagree on whether to continue after EM iteration {self.iteration} (internal error)")
        if not go[0]:
            total = self.family.total_count(stats, self.model)
            self.loglik.append(stats[:, -1] / total if s.privacy is None else np.full(self.n_parts, np.nan))
            self.finished = True
            return
        self.released_rows = self.family.total_count(stats, self.model) * self.n_nodes
        if s.privacy is not None:
            stats = s.privacy.decode(stats, self.model)
        model, ll = self.family.m_step(stats, self.model, s.reg_covar, iteration=self.iteration)
        if s.privacy is not None:
            model = s.privacy.repair(model)
            ll = np.full_like(ll, np.nan)  # a private run releases no log-likelihood
        self._set_model(model)
        self.loglik.append(ll)
        self.n_iter += 1
        # each node judges its own log-likelihood; the flag average makes the decision common
        if len(self.loglik) >= 2:
            settled = np.abs(self.loglik[-1] - self.loglik[-2]) < s.tol
            self._converged |= settled
            self._want_more &= ~settled
        if self.n_iter >= s.max_iter:
            self._want_more[:] = False
        self.iteration += 1
        if s.privacy is not None and not self._want_more.any():
            # A private run stops here: the aggregation that would deliver the final
            # log-likelihood carries the statistics at the final model with fresh noise, a
            # release every node receives that the budget does not pay for (and a private run
            # releases no log-likelihood anyway).
            self.loglik.append(np.full(self.n_parts, np.nan))
            self.finished = True

    def summary(self, part: int = 0) -> FloatArray:
        """Node ``part``'s model flattened by the family, then its final log-likelihood per row
        (NaN in a private run, which releases none): what nodes compare at the end."""
        ll = float(self.loglik[-1][part]) if self.loglik else float("nan")
        return np.append(self.family.flatten(self.params(part)), ll)

    def summary_size(self) -> int:
        return self.family.flat_size(self.settings.n_components, self.n_features) + 1

    def max_contribution_size(self) -> int:
        """The longest contribution of the run (the init moments or the statistics and flag)."""
        d = self.n_features
        return max(self.family.init_stats_size(d), self.family.stats_size(self.settings.n_components, d) + 1)

    def flat_models(self) -> FloatArray:
        """(n_parts, summary_size): every node's model flattened (for the node spread)."""
        return self.family.flatten_batch(self.model)

    @property
    def converged(self) -> bool:
        """Node 0 stopped because the log-likelihood settled (not because of max_iter)."""
        return bool(self._converged[0])

    def _set_model(self, model: Any) -> None:
        self.family.check(model)  # a collapsed covariance fails here, inside absorb
        self.model = model


def _pooled(iteration: int, values: FloatArray) -> FloatArray:
    """The network average of a network of one: its own statistics."""
    return values


def fit_centralized(X: FloatArray, settings: EMSettings) -> EMState:
    """Plain EM on pooled rows: the reference every protocol is compared with."""
    return drive(EMState([X], settings, n_nodes=1), _pooled)
