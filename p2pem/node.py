"""The Node: one party's task composed with one protocol, as a message-driven state machine.

A Node consumes messages and produces messages; it never knows what carries them.  The
in-memory simulator and the MQTT node process drive the very same class (like a Flower client
app), which is why a deployment reproduces a simulation exactly.  What the node computes
between aggregations is its *task* (:class:`p2pem.task.Task`): an EM loop
(:class:`p2pem.em.EMState`, :meth:`Node.for_em`) or any other sequence of aggregations.

Calls: ``start()`` once, then ``receive(msg)`` for every message addressed to the node (and
``wake()`` on each activation in asynchronous mode); each returns the messages to send.
``done`` turns True when the task has finished; an EM node's fitted model is ``task.params()``.
"""

from __future__ import annotations

import logging
from collections import defaultdict

import numpy as np

from p2pem.em import EMSettings, EMState
from p2pem.errors import ProtocolError
from p2pem.families.base import FloatArray
from p2pem.messages import Message
from p2pem.protocols.base import Aggregation, NodeContext, ProtocolSpec, ProtocolViolation
from p2pem.task import Task

log = logging.getLogger(__name__)


#: Messages of the next aggregation a neighbour may send before this node begins it
#: (pdmm-sp: a dual-init and a first primal).
MAX_AHEAD = 4


class OutOfRound(ProtocolError):
    """A message for an aggregation this node has already finished (stale, replayed or reordered)."""


class EMFailed(ProtocolError):
    """The network average of an aggregation is unusable (not finite, or the task fails on it,
    e.g. the M-step)."""


class Node:
    """One party: its task (private data and state) and the protocol's per-node state machine.

    Parameters
    ----------
    ctx : NodeContext
        Node id, public topology and the node's own random generator.
    task : Task
        What the node computes between aggregations, a batch of one (see :meth:`for_em`).
    protocol : ProtocolSpec
    """

    def __init__(self, ctx: NodeContext, task: Task, protocol: ProtocolSpec) -> None:
        self.ctx = ctx
        self.node_id = ctx.node_id
        self.protocol = protocol
        self.task = task
        self.agg: Aggregation | None = None
        self._previous: Aggregation | None = None
        self._pending: dict[int, list[Message]] = defaultdict(list)
        self.rounds: dict[int, float] = {}
        self.unconverged: list[int] = []
        self.sent_messages = 0
        self.sent_bytes = 0
        #: Check queued messages of the next aggregation when it begins (set by a deployment).
        self.validate = False

    @classmethod
    def for_em(cls, ctx: NodeContext, X: FloatArray, settings: EMSettings, protocol: ProtocolSpec) -> Node:
        """A node that runs EM on its private rows ``X`` with the public ``settings``."""
        return cls(ctx, EMState([X], settings, ctx.n_nodes), protocol)

    @property
    def em(self) -> EMState:
        """The task of an EM node (:meth:`for_em`)."""
        if not isinstance(self.task, EMState):
            raise ProtocolError(f"node {self.node_id} runs {type(self.task).__name__}, not EM")
        return self.task

    @property
    def done(self) -> bool:
        return self.task.finished

    @property
    def iteration(self) -> int:
        return self.task.iteration

    def start(self) -> list[Message]:
        return self._begin()

    def receive(self, msg: Message) -> list[Message]:
        if self.node_id not in msg.receivers:
            raise ProtocolError(f"node {self.node_id} got a message addressed to {msg.receivers}")
        if self._previous is not None and msg.iteration == self._previous.iteration:
            # asynchronous consensus: a neighbour's last broadcast of an aggregation this node
            # already left; the finished state machine discards it
            return self._count(self._previous.receive(msg))
        if self.done or msg.iteration < self.iteration:
            raise OutOfRound(
                f"node {self.node_id}: stale {msg.kind} message from node {msg.sender} for EM iteration {msg.iteration}"
            )
        if msg.iteration > self.iteration:
            if msg.iteration > self.iteration + 1:
                raise OutOfRound(f"node {self.node_id}: message from node {msg.sender} is {msg.iteration - self.iteration} EM iterations ahead")
            pending = self._pending[msg.iteration]
            if self.validate and sum(m.sender == msg.sender for m in pending) >= MAX_AHEAD:
                raise ProtocolViolation(msg.sender, msg.iteration, msg.round, "ahead", f"more than {MAX_AHEAD} messages for the next aggregation")
            pending.append(msg)
            return []
        assert self.agg is not None  # not done and in the current iteration: an aggregation runs
        return self._count(self.agg.receive(msg)) + self._maybe_advance()

    def check(self, msg: Message) -> None:
        """Raise :class:`~p2pem.protocols.base.ProtocolViolation` if ``msg`` cannot come from an honest peer.

        A deployment calls it for every authenticated message before :meth:`receive`.
        Messages of the current aggregation are checked by its state machine now; those of
        the next one are checked when it begins (:meth:`receive` keeps them until then),
        before any of them is folded in.  Stale messages are left to :meth:`receive`
        (:class:`OutOfRound`, harmless).
        """
        if self.agg is not None and not self.done and msg.iteration == self.iteration:
            self.agg.check(msg)

    def restart(self, ctx: NodeContext) -> list[Message]:
        """Run the current aggregation again from its start, over ``ctx``'s topology.

        For a deployment that drops a node that fell silent: the survivors re-run the EM
        iteration in progress among themselves (the EM state has not absorbed it yet, so
        its contribution is recomputed unchanged).  Queued messages belong to the abandoned
        attempt and are discarded.
        """
        if self.done:
            raise ProtocolError(f"node {self.node_id}: cannot restart an aggregation after EM finished")
        self.ctx = ctx
        self.node_id = ctx.node_id
        self._pending.clear()
        self._previous = None
        return self._begin()

    def wake(self) -> list[Message]:
        """One asynchronous activation (pdmm-sp in async mode)."""
        if self.done or self.agg is None:
            return []
        return self._count(self.agg.wake()) + self._maybe_advance()

    @property
    def ready(self) -> bool:
        return not self.done and self.agg is not None and self.agg.ready

    def waiting_for(self) -> str:
        """What the node is waiting for, for timeout messages."""
        return f"EM iteration {self.iteration}, protocol round {getattr(self.agg, 'round', '?')}"

    # -------------------------------------------------------------------------------------------

    def _count(self, out: list[Message]) -> list[Message]:
        self.sent_messages += len(out)
        self.sent_bytes += sum(m.nbytes for m in out)
        return out

    def _begin(self) -> list[Message]:
        value = self.task.contribution()[0]
        agg = self.agg = self.protocol.node_aggregation(self.ctx, self.task.iteration)
        out = self._count(agg.start(value))
        pending = self._pending.pop(self.task.iteration, [])
        if self.validate:
            for msg in pending:
                agg.check(msg)
        for msg in pending:
            try:
                out += self._count(agg.receive(msg))
            except ProtocolViolation:
                raise
            except ProtocolError as exc:
                if not self.validate:
                    raise
                # the state machine refused a queued message: blame its sender, not the current one
                raise ProtocolViolation(msg.sender, msg.iteration, msg.round, "state", str(exc)) from None
        return out + self._maybe_advance()

    def _maybe_advance(self) -> list[Message]:
        agg = self.agg
        if agg is None or not agg.done:
            return []
        it = self.task.iteration
        if self.protocol.asynchronous:
            agg.iteration = it
            self._previous = agg
        self.rounds[it] = agg.rounds
        if not agg.converged:
            self.unconverged.append(it)
        result = np.asarray(agg.result, dtype=float)
        if not np.all(np.isfinite(result)):
            raise EMFailed(f"node {self.node_id}: the network average of EM iteration {it} is not finite")
        try:
            self.task.absorb(result)
        except (ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
            # finite but absurd averages (a member lying about its statistics) can break the M-step
            raise EMFailed(f"node {self.node_id}: EM iteration {it} failed on the network average ({exc})") from None
        if self.task.finished:
            self.agg = None
            return []
        return self._begin()


class Server:
    """The aggregation server of protocols that have one (``federated``); sees every upload."""

    node_id = -1

    def __init__(self, protocol: ProtocolSpec, topology) -> None:
        self.protocol = protocol
        self.topology = topology
        self._aggs: dict[int, Aggregation] = {}
        self.sent_messages = 0
        self.sent_bytes = 0

    def receive(self, msg: Message) -> list[Message]:
        agg = self._aggs.get(msg.iteration)
        if agg is None:
            new = self.protocol.server_aggregation(self.topology, msg.iteration)
            if new is None:
                raise ProtocolError(f"{self.protocol.name} has no server, yet node {msg.sender} sent it a {msg.kind} message")
            agg = self._aggs[msg.iteration] = new
        out = agg.receive(msg)
        if agg.done:
            del self._aggs[msg.iteration]
        self.sent_messages += len(out)
        self.sent_bytes += sum(m.nbytes for m in out)
        return out
