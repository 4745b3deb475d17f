"""The EM loop of one node as a small state machine, shared by every engine.

A node alternates two things: it *contributes* a statistics vector to a network aggregation
and it *absorbs* the network average that comes back.  :class:`EMState` owns that loop; the
Node (message level), the vectorised simulator and the centralised reference all drive the
same object, so they cannot drift apart.

Aggregation 0 averages the global moments for the private initialisation (skipped when the
user gives ``init``).  Aggregation t >= 1 averages the E-step statistics at theta_{t-1} plus a
*continue* flag: a node sets it to 1 while it still wants M-step t (t <= max_iter and the
log-likelihood change of the previous iteration was >= tol).  All nodes apply M-step t iff the
average flag exceeds 0.5/n, i.e. iff any node wants to continue.  That makes the stopping
decision identical on every node even when consensus leaves each node a slightly different
average (the flag average is a multiple of 1/n, so a 0.5/n margin is far above any consensus
error).  The last aggregation, which nobody wants to continue from, still delivers the
log-likelihood of the final parameters, so ``loglik`` has one entry per M-step plus one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from p2pem.errors import ConfigError
from p2pem.gmm import (
    FloatArray,
    GMMParams,
    init_from_global,
    init_statistics,
    local_statistics,
    m_step,
    precision_cholesky,
)


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
    init : GMMParams or None
        Given initial parameters; None draws them from the privately averaged global
        mean and covariance and ``init_seed`` (public).
    init_seed : int
    """

    n_components: int
    max_iter: int = 100
    tol: float = 1e-6
    reg_covar: float = 1e-6
    init: GMMParams | None = None
    init_seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.n_components, int) or isinstance(self.n_components, bool) or self.n_components < 1:
            raise ConfigError(f"n_components must be a positive integer, got {self.n_components!r}")
        if not isinstance(self.max_iter, int) or isinstance(self.max_iter, bool) or self.max_iter < 0:
            raise ConfigError(f"max_iter must be a non-negative integer, got {self.max_iter!r}")
        if not (isinstance(self.tol, (int, float)) and math.isfinite(self.tol) and self.tol >= 0):
            raise ConfigError(f"tol must be a finite number >= 0, got {self.tol!r}")
        if not (isinstance(self.reg_covar, (int, float)) and math.isfinite(self.reg_covar) and self.reg_covar >= 0):
            raise ConfigError(f"reg_covar must be a finite number >= 0, got {self.reg_covar!r}")


class EMState:
    """One node's EM loop: ``contribution()`` -> network average -> ``absorb(average)``.

    Parameters
    ----------
    X : (n_rows, d) array
        The node's own rows (never leave this object).
    settings : EMSettings
    n_nodes : int
        Number of nodes the averages run over (sets the continue-flag threshold).
    """

    def __init__(self, X: FloatArray, settings: EMSettings, n_nodes: int) -> None:
        self.X = X
        self.settings = settings
        self.n_nodes = n_nodes
        self.params: GMMParams | None = settings.init
        self._prec_chol = None if settings.init is None else precision_cholesky(settings.init.covariances)
        self.iteration = 0 if settings.init is None else 1
        self.loglik: list[float] = []
        self.n_iter = 0
        self.converged = False
        self.finished = False
        self._want_more = settings.max_iter > 0

    def contribution(self) -> FloatArray:
        """The vector this node feeds into aggregation ``self.iteration``."""
        if self.iteration == 0:
            return init_statistics(self.X)
        stats = local_statistics(self.X, self.params, self._prec_chol)
        return np.concatenate([stats, [1.0 if self._want_more else 0.0]])

    def absorb(self, average: FloatArray) -> None:
        """Advance with the network average of aggregation ``self.iteration``."""
        s = self.settings
        if self.iteration == 0:
            self._set_params(init_from_global(average, s.n_components, s.init_seed))
            self.iteration = 1
            return
        stats, flag = average[:-1], average[-1]
        if flag <= 0.5 / self.n_nodes:
            k = s.n_components
            self.loglik.append(float(stats[-1] / stats[:k].sum()))
            self.finished = True
            return
        params, ll = m_step(stats, self.params.means, s.reg_covar, iteration=self.iteration)
        self._set_params(params)
        self.loglik.append(ll)
        self.n_iter += 1
        if len(self.loglik) >= 2 and abs(self.loglik[-1] - self.loglik[-2]) < s.tol:
            self.converged = True
            self._want_more = False
        if self.n_iter >= s.max_iter:
            self._want_more = False
        self.iteration += 1

    def _set_params(self, params: GMMParams) -> None:
        self._prec_chol = precision_cholesky(params.covariances)
        self.params = params


def fit_centralized(X: FloatArray, settings: EMSettings) -> EMState:
    """Plain EM on pooled rows: the reference every protocol is compared with."""
    state = EMState(X, settings, n_nodes=1)
    while not state.finished:
        state.absorb(state.contribution())
    return state
