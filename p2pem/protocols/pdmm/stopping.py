"""pdmm-sp's stopping rule, written once for one node, for all nodes at once and for asynchronous mode.

Each node decides on what it sees.  Node i is *locally settled* in round t when both its own
change |x_i(t) - x_i(t-1)| and its disagreement with the (weighted) mean of its neighbours are
at most ``tol * max|x_i(t)|`` (infinity norms, ``updates.settled``).  A counter
g_i(t) = 1 + min(g_i(t-1), min_j g_j(t-1)) while settled (0 otherwise) rides on the
broadcasts; by induction g_i(t) >= k iff every node j at distance delta < k was settled in all
rounds t - k + 1 .. t - delta.  With e_i a public upper bound on i's eccentricity
(``Topology.eccentricity``), g_i(t) >= e_i + 1 therefore means every node j was settled in
rounds t - e_i .. t - dist(i, j) (all of them at least in round t - e_i), and node i fixes
``stop_at = t + e_i`` and floods it (the minimum of proposals): a proposal made at node i in
round t reaches every node by round t + e_i, so all nodes know the smallest proposal by the
round it names and stop together (or at ``max_iter``).  Using e_i instead of the diameter D
lets the central nodes decide first: the overhead after the last node settles falls from
about 2D rounds to about twice the radius.  No node counts as settled up to round
``settle_after`` (a schedule's special rounds).

With a Leja polynomial known to be below its target on the whole public spectrum
(``steps.fixed_stop``) the stop round is public instead: every node stops one round after
the schedule's last special round, no counter or stop round rides on the broadcasts (both
stay 0 and ``NEVER``), and a node that is not settled there records the aggregation as
unconverged.  Its end then
depends on the graph alone, not on the data, and nobody can propose another.

Asynchronous mode counts the same way on each activation, against the neighbours' last
broadcasts (settled when close to each of them), waits for the diameter bound D (a round is
one activation, so eccentricities do not bound the spread) and floods a stop flag instead of
a stop round: a node stops when its counter exceeds D or a neighbour has stopped.

``StopRule`` holds the rule's state (counters, stop rounds, the waits) for one node
(Python integers) or for all nodes (integer arrays of an array namespace); the message-level
node, the batch engine and asynchronous mode all call it, so their decisions and traces agree.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from p2pem.errors import ProtocolError
from p2pem.protocols.base import StopContradicted
from p2pem.protocols.pdmm.steps import Options
from p2pem.protocols.pdmm.updates import settled

#: "No stop round yet" in the ``stop_at`` meta field (an integer, so it rides in messages).
NEVER = 2**62


class _One:
    """The array functions the rule calls, for one node's Python integers and booleans."""

    @staticmethod
    def any(a) -> bool:
        return bool(a)

    all = any

    @staticmethod
    def where(cond, a, b):
        return a if cond else b

    @staticmethod
    def minimum(a, b):
        return min(a, b)

    @staticmethod
    def first(a) -> int:
        return a


class _Many:
    """The same functions for all nodes' integer arrays in namespace ``xp``."""

    def __init__(self, xp) -> None:
        self.xp = xp

    def any(self, a) -> bool:
        return bool(self.xp.any(a))

    def all(self, a) -> bool:
        return bool(self.xp.all(a))

    def where(self, cond, a, b):
        return self.xp.where(cond, a, b)

    def minimum(self, a, b):
        return self.xp.minimum(a, b)

    @staticmethod
    def first(a) -> int:
        return int(a[0])


class StopRule:
    """The stopping rule's state and its one step per round (module docstring).

    Parameters
    ----------
    wait : int or integer array
        e_i, the eccentricity bound of each node (synchronous), or the diameter bound D
        (asynchronous): a counter above it triggers.
    tol : float
        Relative settle tolerance.
    max_iter : int
        Rounds (activations) at most.
    settle_after : int
        No node counts as settled up to this round.
    n_nodes : int, optional
        All nodes at once (counters as arrays of namespace ``xp``); None for one node.
    xp : array namespace
        Where the batch's counters live (NumPy on the host); also the namespace of the
        vectors the settle test compares.

    Attributes
    ----------
    g, stop_at
        The settled counter g_i(t - 1) and the stop round known before round t (``NEVER``
        while none): what round t's broadcast carries.
    done, converged
        Whether the rule has stopped, and whether by agreement rather than ``max_iter``.
    proposed
        One node: ``(t, stop round)`` when its own counter triggered in round t with a stop
        round below every one it knew (a proposal of its own, which a deployment signs);
        None until then, and always for a batch.
    """

    def __init__(self, wait, *, tol: float, max_iter: int, settle_after: int = 1, n_nodes: int | None = None, xp=np,
                 fixed_stop: int | None = None) -> None:
        self.wait, self.tol, self.max_iter, self.settle_after, self.xp = wait, tol, max_iter, settle_after, xp
        self.fixed_stop = fixed_stop
        self.ops: Any
        self.zero: Any  # a node's int, or all nodes' integer array
        self.stop_at: Any
        if n_nodes is None:
            self.ops, self.zero, self.stop_at = _One, 0, NEVER
        else:
            self.ops = _Many(xp)
            self.zero = xp.zeros(n_nodes, dtype=xp.int64)  # never written to: g may alias it
            self.stop_at = xp.full(n_nodes, NEVER, dtype=xp.int64)
        self.g = self.zero
        self.proposed: tuple[int, int] | None = None
        self.flooding = n_nodes is None  # does any node hold a stop round yet? (a node cannot know: it always floods)
        self.done = False
        self.converged = False

    def advance(self, t: int, x, x_prev, nb_sum, degree, min_g: Callable, min_stop: Callable) -> bool:
        """Round t's step, after x(t) is known; True when the aggregation stops with x(t).

        ``nb_sum / degree`` is the (weighted) neighbour mean of x(t) (``updates.settled``);
        ``min_g(a)`` and ``min_stop(a)`` return min(a_i, min_j a_j) over each node's
        neighbours' counters and stop rounds of round t's broadcasts.  Both are called only
        when their answer matters (a batch skips the reductions, with the same result).
        """
        ops = self.ops
        if self.fixed_stop is not None:
            return self._advance_fixed(self.fixed_stop, t, x, x_prev, nb_sum, degree)
        stop = min_stop(self.stop_at) if self.flooding else self.stop_at
        g_new = self.zero
        ok = False
        if t > self.settle_after:
            ok = settled(x, x_prev, nb_sum, degree, self.tol, self.xp)
            if ops.any(ok):
                g_new = self.count(ok, min_g(self.g))
                trigger = g_new >= self.wait + 1
                if ops.any(trigger):
                    if ops is _One and self.proposed is None and t + self.wait < stop:
                        self.proposed = (t, t + self.wait)
                    stop = ops.where(trigger, ops.minimum(stop, t + self.wait), stop)
                    self.flooding = True
        stop_round = ops.first(stop)
        if t >= stop_round or t >= self.max_iter:
            # stop_at is flooded, so at the stopping round every node holds the same value
            if t < self.max_iter and not ops.all(t >= stop):
                raise ProtocolError("pdmm-sp: nodes disagree on the stopping round (internal error)")
            if ops is _One and t >= stop_round and not ok:
                # a stop round is only ever proposed once every node has settled for a while;
                # a node that is not settled when it arrives was told a stop no counter allows
                raise StopContradicted(stop_round, f"pdmm-sp: this node reached stop round {stop_round} without being settled")
            self.done, self.converged = True, t >= stop_round
            return True
        self.g, self.stop_at = g_new, stop
        return False

    def _advance_fixed(self, fixed: int, t: int, x, x_prev, nb_sum, degree) -> bool:
        """Round t with a public stop round: no counters (g stays 0, no stop round is
        announced); at the stop round (or ``max_iter``) converged where every node of this
        rule is settled."""
        if t < min(fixed, self.max_iter):
            return False
        ok = t > self.settle_after and t >= fixed and self.ops.all(settled(x, x_prev, nb_sum, degree, self.tol, self.xp))
        self.done, self.converged = True, bool(ok)
        return True

    def count(self, ok, g_min):
        """g(t) = 1 + min(g_i(t-1), min_j g_j(t-1)) where settled, else 0 (``g_min`` is the min)."""
        return self.ops.where(ok, 1 + g_min, self.zero)

    def advance_async(self, t: int, x, x_prev, x_nb: list, g_nb: list[int], stop_nb: bool) -> bool:
        """One asynchronous activation (round t of this node) with its new x; True when it stops.

        ``x_prev`` is the node's previous broadcast and ``x_nb``, ``g_nb`` the neighbours' last
        broadcasts and counters (None where none arrived yet); ``stop_nb`` whether a neighbour
        has stopped.  Settled: within tol of its previous value and of each neighbour's.
        """
        ok = x_prev is not None and not any(v is None for v in x_nb) and bool(
            np.all(settled(x, x_prev, np.stack(x_nb), 1.0, self.tol)))
        self.g = self.count(ok, min(self.g, min(g_nb)))
        trigger = self.g >= self.wait + 1
        if stop_nb or trigger or t >= self.max_iter:
            self.done, self.converged = True, t < self.max_iter or stop_nb or trigger
        return self.done


class PrecisionWarning(UserWarning):
    """The initial duals are so large that float64 rounding exceeds the stopping tolerance."""


def check_precision(spec: Options, value: np.ndarray, node: int | str, *, stacklevel: int = 3) -> None:
    """Warn when eps * perturbation_std exceeds tol * max|s_i|: the float64 floor is reached.

    Consensus then still settles, on a value whose error is about eps * std (times the
    rounding growth of the iteration): the nodes agree, but the average is off.  Runs with
    ``tol = 0`` (a fixed number of rounds) are not checked.
    ``sim/bench_precision.py`` maps the floor.  ``stacklevel`` points the warning at the
    caller of whoever calls this (the user's ``start`` or ``aggregate``).
    """
    scale = float(np.max(np.abs(value))) if value.size else 0.0
    if spec.stop_tol > 0 and scale > 0 and spec.perturbation_std * np.finfo(float).eps > spec.stop_tol * scale:
        warnings.warn(
            f"pdmm-sp: perturbation_std {spec.perturbation_std:g} is too large for float64 at node {node} "
            f"(eps * std > tol * max|input| = {spec.stop_tol * scale:.2g}): the average will be off by about "
            f"{spec.perturbation_std * np.finfo(float).eps:.1g}; lower perturbation_std or raise tol",
            PrecisionWarning,
            stacklevel=stacklevel,
        )
