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
from collections.abc import Sequence

import numpy as np

from p2pem.em import EMSettings, EMState
from p2pem.errors import ModelError, ProtocolError
from p2pem.families.base import FloatArray
from p2pem.messages import Message
from p2pem.protocols.base import Aggregation, NodeContext, ProtocolSpec, ProtocolViolation
from p2pem.task import Task

log = logging.getLogger(__name__)


class OutOfRound(ProtocolError):
    """A message for an aggregation this node has already finished (stale, replayed or reordered)."""


class EMFailed(ModelError):
    """The network average of an aggregation is unusable: not finite, or the task fails on it
    (a collapsed component, a singular covariance, a non-finite M-step).  A model error, not a
    protocol violation: nobody in particular sent the average."""


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
        # after a restart over the survivors of a dropout (see restart): the node ids, as
        # messages name them, of the nodes of ctx.topology, and the inverse map
        self._members: tuple[int, ...] | None = None
        self._index: dict[int, int] | None = None

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
            return self._count(self._fold(self._previous, msg))
        if self.done or msg.iteration < self.iteration:
            raise OutOfRound(
                f"node {self.node_id}: stale {msg.kind} message from node {msg.sender} for EM iteration {msg.iteration}"
            )
        if msg.iteration > self.iteration or self.agg is None:  # ahead, or before start()
            if msg.iteration > self.iteration + 1:
                raise OutOfRound(f"node {self.node_id}: message from node {msg.sender} is {msg.iteration - self.iteration} EM iterations ahead")
            pending = self._pending[msg.iteration]
            limit = self.protocol.max_ahead
            if self.validate and sum(m.sender == msg.sender for m in pending) >= limit:
                raise ProtocolViolation(msg.sender, msg.iteration, msg.round, "ahead", f"more than {limit} messages for an aggregation this node has not begun")
            pending.append(msg)
            return []
        return self._count(self._fold(self.agg, msg)) + self._maybe_advance()

    def check(self, msg: Message) -> None:
        """Raise :class:`~p2pem.protocols.base.ProtocolViolation` if ``msg`` cannot come from an honest peer.

        A deployment calls it for every authenticated message before :meth:`receive`.
        Messages of the current aggregation are checked by its state machine now; those of
        the next one are checked when it begins (:meth:`receive` keeps them until then),
        before any of them is folded in.  Stale messages are left to :meth:`receive`
        (:class:`OutOfRound`, harmless).
        """
        if self.agg is not None and not self.done and msg.iteration == self.iteration:
            self._check(self.agg, msg)

    def restart(self, ctx: NodeContext, members: Sequence[int] | None = None) -> list[Message]:
        """Run the current aggregation again from its start, over ``ctx``'s topology.

        For a deployment that drops a node that fell silent: the survivors re-run the EM
        iteration in progress among themselves (the EM state has not absorbed it yet, so
        its contribution is recomputed unchanged).  Queued messages belong to the abandoned
        attempt and are discarded.

        Parameters
        ----------
        ctx : NodeContext
            This node in the survivors' topology, whose nodes are numbered ``0..n'-1``.
        members : sequence of int, optional
            ``members[k]`` is the id node ``k`` of that topology has in the messages (its id
            in the full graph); the Node translates in both directions, so its messages keep
            their ids.  Default: the topology's own numbering.
        """
        if self.done:
            raise ProtocolError(f"node {self.node_id}: cannot restart an aggregation after EM finished")
        if members is None:
            self._members = self._index = None
            self.node_id = ctx.node_id
        else:
            self._members = tuple(int(g) for g in members)
            self._index = {g: k for k, g in enumerate(self._members)}
            if self._members[ctx.node_id] != self.node_id:
                raise ProtocolError(f"node {self.node_id} is not member {ctx.node_id} of the new topology")
        self.ctx = ctx
        self._pending.clear()
        self._previous = None
        return self._begin()

    def awaiting(self) -> tuple[int, ...]:
        """The nodes whose message the running aggregation waits for (see :meth:`Aggregation.awaiting`)."""
        if self.agg is None or self.done:
            return ()
        waited = self.agg.awaiting()
        members = self._members
        return waited if members is None else tuple(members[k] for k in waited)

    # -- accountable stops: the running aggregation's declarations, in the ids messages use --

    def proposal(self) -> tuple[int, int] | None:
        """This node's own stop proposal ``(proposed_at, stop_round)``, once (see :meth:`Aggregation.proposal`)."""
        return None if self.agg is None or self.done else self.agg.proposal()

    def claimed_stop(self, msg: Message) -> int | None:
        """The stop round ``msg`` announces (see :meth:`Aggregation.claimed_stop`)."""
        return None if self.agg is None else self.agg.claimed_stop(msg)

    def check_proposal(self, origin: int, proposed_at: int, stop: int) -> tuple[str, str] | None:
        """Check node ``origin``'s stop proposal against this node's state (see :meth:`Aggregation.check_proposal`)."""
        if self.agg is None or self.done:
            return ("form", "this node runs no aggregation")
        if self._index is not None:
            if origin not in self._index:
                return ("form", f"node {origin} dropped out")
            origin = self._index[origin]
        return self.agg.check_proposal(origin, proposed_at, stop)

    @property
    def round(self) -> int:
        """The protocol round of the running aggregation (0 when none runs)."""
        return 0 if self.agg is None else self.agg.round

    def wake(self) -> list[Message]:
        """One asynchronous activation (pdmm-sp in async mode)."""
        if self.done or self.agg is None:
            return []
        return self._count(self.agg.wake()) + self._maybe_advance()

    @property
    def ready(self) -> bool:
        return not self.done and self.agg is not None and self.agg.ready

    def may_wake(self) -> bool:
        """Whether a deployment may wake the node now (see :meth:`Aggregation.may_wake`)."""
        return not self.done and self.agg is not None and self.agg.may_wake()

    def waiting_for(self) -> str:
        """What the node is waiting for, for timeout messages."""
        return f"EM iteration {self.iteration}, protocol round {self.round}"

    # -------------------------------------------------------------------------------------------

    def _count(self, out: list[Message]) -> list[Message]:
        self.sent_messages += len(out)
        self.sent_bytes += sum(m.nbytes for m in out)
        members = self._members
        if members is None:
            return out
        return [Message(members[m.sender], tuple(members[r] for r in m.receivers), m.iteration, m.round, m.kind, m.payload, m.encrypted, m.meta) for m in out]

    def _local(self, msg: Message) -> Message:
        """``msg`` with the ids of the running topology (the same unless restarted over survivors)."""
        index = self._index
        if index is None:
            return msg
        try:
            return Message(index[msg.sender], tuple(index[r] for r in msg.receivers), msg.iteration, msg.round, msg.kind, msg.payload, msg.encrypted, msg.meta)
        except KeyError:
            raise ProtocolViolation(msg.sender, msg.iteration, msg.round, "receivers", f"{msg.kind} message addressed to a node that dropped out") from None

    def _blame(self, exc: ProtocolViolation) -> ProtocolViolation:
        """``exc`` naming its sender by the id messages use."""
        if self._members is None:
            return exc
        return ProtocolViolation(self._members[exc.sender], exc.iteration, exc.round, exc.check, exc.detail)

    def _check(self, agg: Aggregation, msg: Message) -> None:
        if self._index is None:
            agg.check(msg)
            return
        local = self._local(msg)
        try:
            agg.check(local)
        except ProtocolViolation as exc:
            raise self._blame(exc) from None

    def _fold(self, agg: Aggregation, msg: Message) -> list[Message]:
        if self._index is None:
            return agg.receive(msg)
        local = self._local(msg)
        try:
            return agg.receive(local)
        except ProtocolViolation as exc:
            raise self._blame(exc) from None

    def _begin(self) -> list[Message]:
        value = self.task.contribution()[0]
        agg = self.agg = self.protocol.node_aggregation(self.ctx, self.task.iteration)
        out = self._count(agg.start(value))
        pending = self._pending.pop(self.task.iteration, [])
        if self.validate:
            for msg in pending:
                self._check(agg, msg)
        for msg in pending:
            try:
                out += self._count(self._fold(agg, msg))
            except (ProtocolViolation, ModelError):  # a model that cannot go on is nobody's forgery
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
        except (ProtocolError, ValueError, ArithmeticError, np.linalg.LinAlgError) as exc:
            # a component that collapses, or finite but absurd averages (a member lying about
            # its statistics): the task cannot use what the whole network computed
            raise EMFailed(f"node {self.node_id}: EM iteration {it} failed on the network average: {exc}") from None
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
