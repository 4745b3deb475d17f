"""A *task*: what a node computes between network aggregations, and the one loop that drives it.

A distributed computation in p2pem is a sequence of aggregations: every node contributes a
vector, the network averages the vectors (any protocol), every node absorbs its average and
computes its next contribution.  EM is one such task (:class:`p2pem.em.EMState`: the private
initialisation, then one aggregation per EM iteration); a differentially private
Bayesian-network release (a sequence of count aggregations of public lengths) is another.
The :class:`~p2pem.node.Node` composes a task with a protocol's per-node state machine, so
any task runs through the same Node, engines and transports.

A task object may advance several nodes at once (a *batch*: the vectorised engine), so
:meth:`Task.contribution` returns one row per node and :meth:`Task.absorb` takes one average
per node; a Node holds a batch of one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

__all__ = ["Aggregate", "Hook", "Task", "drive"]


class Task(Protocol):
    """What the Node and the engines need from a computation.

    Attributes
    ----------
    iteration : int
        Number of the aggregation the next :meth:`contribution` feeds (0, 1, ...); a
        message carries it, so a node can tell the aggregations apart.
    finished : bool
        True once the last average was absorbed; no more contributions.
    """

    iteration: int
    finished: bool

    def contribution(self) -> FloatArray:
        """(n_parts, contribution_size()): what each node feeds into aggregation ``iteration``."""
        ...

    def contribution_size(self) -> int:
        """Length of the next contribution; public (every node knows it before the aggregation
        starts), so a deployment can check the payloads of messages that arrive early."""
        ...

    def absorb(self, averages: FloatArray) -> None:
        """Advance with each node's network average of aggregation ``iteration``.

        Raises ValueError, ArithmeticError or :class:`~p2pem.errors.ProtocolError` on averages
        it cannot use (the Node reports them as a failed aggregation).
        """
        ...

    def summary(self, part: int = 0) -> FloatArray:
        """The finished result of node ``part`` as one float64 vector: what nodes compare to
        agree they ended with the same result (up to consensus error).  The last entry is
        compared as a log-likelihood (relative to its magnitude, at least 1): a task without one
        puts 0 there."""
        ...

    def summary_size(self) -> int:
        """Length of :meth:`summary` (public)."""
        ...

    # optional: ``max_contribution_size() -> int``, the longest contribution of the whole run
    # (public); a deployment refuses longer payloads before decoding them.  Without it, 64
    # times the first contribution's length.
    # optional: ``document() -> dict``, the finished result as JSON-ready data (a release); a
    # deployed node writes it into its result file as ``output``.


T = TypeVar("T", bound=Task)

#: ``aggregate(iteration, values)``: every node's average of the (n_parts, P) ``values``.
Aggregate = Callable[[int, FloatArray], FloatArray]
#: ``hook(iteration, values)`` or ``hook(iteration, values, averages)``.
Hook = Callable[..., None]


def drive(task: T, aggregate: Aggregate, *, before: Hook | None = None, after: Hook | None = None) -> T:
    """Run ``task`` to the end: contribute, aggregate, absorb, until it is finished.

    The one driver loop of p2pem: the vectorised simulator, the dropout replay, the whole-run
    recorder, the multi-iteration leakage Monte Carlo and centralised EM all run it, each
    with its own ``aggregate`` (a protocol's batch path, a plain average, ...).

    Parameters
    ----------
    task : Task
    aggregate : callable(iteration, values) -> averages
        ``values`` is ``task.contribution()``, shape (n_parts, P); return every node's
        average, shape (n_parts, P).
    before : callable(iteration, values), optional
        Called after the contribution is computed and before it is aggregated (the task
        still holds the model the values were computed at).
    after : callable(iteration, values, averages), optional
        Called after the task absorbed the averages.

    Returns
    -------
    task
        The same object, finished.
    """
    while not task.finished:
        iteration = task.iteration
        values = task.contribution()
        if before is not None:
            before(iteration, values)
        averages = aggregate(iteration, values)
        task.absorb(averages)
        if after is not None:
            after(iteration, values, averages)
    return task
