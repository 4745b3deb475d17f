"""One deployed node: the unchanged :class:`~p2pem.node.Node` driven over a link to its peers.

The simulator's message engine hands each :class:`~p2pem.messages.Message` straight to the
receiving Node; here the same messages are authenticated per receiver (and sealed per edge
where the protocol asks) by :class:`~p2pem.deploy.codec.Codec`, published through a
:class:`~p2pem.deploy.transports.base.Link` and checked on arrival.  Nothing else differs, so
a deployment reproduces ``p2pem simulate`` for the same seeds.

:class:`NodeRuntime` is a :class:`~p2pem.deploy.peer.Peer` (the loop, admission, hellos, aborts)
that composes parts of one job each:

* :mod:`~p2pem.deploy.bootstrap`: load the files, connect, the hello exchange;
* :mod:`~p2pem.deploy.stops`: every stop round it acts on is backed by a signed proposal;
* :mod:`~p2pem.deploy.eviction`: a node is dropped only on the signed votes of enough of its
  neighbours (``on_dropout = "continue"``);
* :mod:`~p2pem.deploy.agreement`: before it exits 0, the signed final results of every node
  reach it and agree with its own;
* :mod:`~p2pem.deploy.watchdog`: silent, slow and stalled neighbours;
* :mod:`~p2pem.deploy.report`: the node's ``result.json``; :mod:`~p2pem.deploy.process`: the
  process entry (signals, always a result file).

Failures end in a :class:`~p2pem.deploy.failures.NodeFailure` (or another
:class:`~p2pem.errors.P2pemError`) whose one-line message names this node, the culprit
node(s) and the EM iteration and protocol round.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable, Sequence
from typing import Any

from p2pem.deploy.admission import CONTROL
from p2pem.deploy.agreement import Agreement
from p2pem.deploy.bootstrap import load_node, public_parameters_digest
from p2pem.deploy.clock import Clock
from p2pem.deploy.config import NodeConfig
from p2pem.deploy.control import DROP, FINAL, STOP, violation
from p2pem.deploy.cuts import separator
from p2pem.deploy.dropout import survivor_topology
from p2pem.deploy.eviction import Eviction, colluders
from p2pem.deploy.failures import NodeFailure, Reason, nodes_text
from p2pem.deploy.peer import Peer
from p2pem.deploy.report import node_report, write_report
from p2pem.deploy.stops import Stops
from p2pem.deploy.transports.base import Link
from p2pem.deploy.watchdog import FINAL as FINAL_PHASE_STATUS
from p2pem.deploy.watchdog import RUNNING, STARTING
from p2pem.errors import ModelError, ProtocolError
from p2pem.messages import SERVER, Message
from p2pem.node import OutOfRound
from p2pem.protocols import NodeContext
from p2pem.protocols.base import ProtocolViolation, StopContradicted
from p2pem.task import Task

log = logging.getLogger(__name__)

__all__ = ["HELD_LIMIT", "NodeRuntime"]

#: Most messages of one sender kept while they wait for the stop proposal they announce.
HELD_LIMIT = 4


class NodeRuntime(Peer):
    """One node process: load its files, connect, run the Node to the end, agree, report.

    Parameters
    ----------
    config : NodeConfig
    progress : callable(event, n_iter, max_iter), optional
        Called with ``("online", 0, max_iter)`` when the protocol starts and
        ``("progress", n_iter, max_iter)`` after every M-step.
    parent_pid : int, optional
        Stop (as if interrupted) when the parent process is no longer ``parent_pid``: a node
        started by ``p2pem deploy`` dies with its launcher.
    link : Link, optional
        The transport; default an :class:`~p2pem.deploy.transports.mqtt.MqttLink` to the configured
        broker.  Tests pass a :class:`~p2pem.deploy.transports.memory.MemoryLink`.
    launch : bytes, default b""
        Nonce of this launch, bound into every envelope (see :class:`~p2pem.deploy.codec.Codec`);
        every node of a launch must get the same one.
    clock : callable, optional
        Monotonic seconds for every timeout; default the running event loop's clock (see
        :mod:`p2pem.deploy.clock`).
    task : Task, optional
        Run this task instead of the roster's EM (see :func:`~p2pem.deploy.bootstrap.load_node`).

    Raises
    ------
    ConfigError, DataError
        A file is missing or invalid, the key file does not match the roster entry, the
        protocol cannot be deployed, or the data does not fit the EM settings.
    """

    def __init__(
        self,
        config: NodeConfig,
        *,
        progress: Callable[[str, int, int], None] | None = None,
        parent_pid: int | None = None,
        link: Link | None = None,
        launch: bytes = b"",
        clock: Clock | None = None,
        task: Task | None = None,
    ) -> None:
        setup = load_node(config, link=link, launch=launch, task=task)
        roster, node, spec = setup.roster, setup.node, setup.spec
        i = config.node_id
        task = node.task
        server = spec.server_aggregation(node.ctx.topology, 0) is not None
        peers = tuple(sorted((*roster.neighbours[i], *((SERVER,) if server else ()))))
        sized = getattr(task, "max_contribution_size", None)  # optional in the Task interface
        longest = sized() if sized is not None else 64 * task.contribution_size()
        super().__init__(
            node_id=i,
            roster=roster,
            codec=setup.codec,
            identity=setup.identity,
            link=setup.link,
            peers=peers,
            timeouts=config.timeouts,
            spec=spec,
            max_entries=max(longest, task.summary_size(), 4),
            params_digest=public_parameters_digest(spec, node.ctx.topology),
            launch=launch,
            clock=clock,
            progress=progress,
            parent_pid=parent_pid,
        )
        self.config = config
        self.username = config.broker.username
        self.node = node
        self.n_rows = setup.n_rows
        self.on_dropout = roster.on_dropout
        self.agreement = Agreement(i, roster.n_nodes, roster.neighbours, task.summary_size(), spec.agreement_rtol, self.signer)
        self.stops = Stops(i, roster.n_nodes, self.signer)
        self.eviction = Eviction(i, roster.neighbours, roster.on_dropout, self.signer, colluders(spec, roster.n_nodes))
        #: dropouts so far: the number of the current attempt at the running aggregation
        self.attempt = 0
        self._voted: dict[int, float] = {}
        #: messages that announce a stop round no recorded proposal backs yet, per sender
        self._held: dict[int, list[Message]] = {}
        self._final_since = 0.0
        self._reported_iter = -1

    # ------------------------------------------------------------------ where the node is

    @property
    def iteration(self) -> int:
        return self.node.iteration

    @property
    def graph_neighbours(self) -> tuple[int, ...]:
        """The current neighbours in the graph (the server, where there is one, is not)."""
        return tuple(j for j in self.neighbours if j != SERVER)

    @property
    def present(self) -> list[int]:
        """The nodes still in the run."""
        return [k for k in range(self.n_nodes) if k not in self.dropped]

    def where(self) -> str:
        """``EM iteration k, protocol round r`` (what the node is waiting for)."""
        if self.node.done:
            if self.agreement.mine is not None and self.status != "finished":
                return f"the final agreement after EM iteration {self.node.iteration}"
            return f"EM iteration {self.node.iteration} (finished)"
        return f"EM iteration {self.node.iteration}, protocol round {self.node.round}"

    def abort_round(self) -> int:
        return self.node.round

    def fresh_incarnation(self) -> bool:
        """Still in the first rounds of EM iteration 0: a restarted process is here, waiting
        for messages its neighbours sent long ago (see :meth:`Peer.fresh_incarnation`)."""
        return self.node.iteration == 0 and self.node.round <= 1

    def awaiting(self) -> list[int]:
        """Whom this node waits for now: neighbours not yet heard (before it starts), those
        whose message the protocol waits for, or those whose final result has not arrived."""
        if not self.started:
            return self.handshake.missing(self.neighbours)
        if self.node.done:
            return [j for j in self.graph_neighbours if j not in self.agreement.agreed] if self.agreement.mine is not None else []
        return list(self.node.awaiting())

    def status_fields(self) -> tuple[int, ...]:
        phase = STARTING if not self.started else FINAL_PHASE_STATUS if self.node.done else RUNNING
        return (phase, self.node.iteration, self.node.round, *self.awaiting())

    # ------------------------------------------------------------------ the work

    async def work(self) -> None:
        while not self.node.done:
            await self._step()
        self.timings["finished_s"] = self._elapsed()
        await self._agree()

    async def on_start(self) -> None:
        if self.progress is not None:
            self.progress("online", 0, self._max_iter())
        try:
            out = self.node.start()  # with what the neighbours sent before (the Node kept it)
        except ProtocolError as exc:  # e.g. a message kept until now fails its check
            raise self._node_failure(exc) from None
        await self._emit(out)

    async def _agree(self) -> None:
        """Show every node this node's signed final result and check theirs (no split outcome)."""
        result = self.node.task.summary()
        n_iter = getattr(self.node.task, "n_iter", self.node.iteration)
        await self.send([self.agreement.message(self.graph_neighbours, result, n_iter, self.node.iteration)])
        now = self._final_since = self.clock()
        self.agreement.settle(now)
        self.watchdog.progressed(now)
        while not self.agreement.done(self.present):
            await self._step()

    async def on_timers(self, now: float) -> None:
        if self.node.done and (self.agreement.mine is None or self.status == "finished"):
            return
        awaited = self.awaiting()
        if self.node.done:
            self._final_checks(now)
        elif self.on_dropout == "continue":
            for k in self.watchdog.silent(awaited, now):
                if k != SERVER and k not in self._voted:
                    await self._vote(k, now)
            for k, since in self._voted.items():
                if k not in self.dropped and now - since > self.timeouts.timeout:
                    witnesses = self.eviction.witnesses(k, self.node.iteration)
                    raise NodeFailure(
                        Reason.SILENT, self.node_id,
                        f"neighbour node {k} fell silent in {self.where()}, and too few of its neighbours signed that it did "
                        f"(an eviction needs {self.eviction.threshold(k)} witnesses; it has {len(witnesses)}: {nodes_text(witnesses)}): "
                        f"unattributable, stopping",
                        (k,),
                    )
            awaited = [j for j in awaited if j not in self._voted]
        self.watchdog.check(awaited, now, self.where(), bool(self.node.rounds))
        if not self.node.done and self.watchdog.claims(self.outbox.sent, now, self.where()):
            await self.outbox.republish()
        if self.spec.asynchronous:
            await self._wake()

    def _final_checks(self, now: float) -> None:
        """The final phase: a neighbour still in another EM iteration, or a result that does not come.

        A neighbour may still be taking in the aggregation this node ran last: a private run
        ends with the M-step after it, one EM iteration further, without a final aggregation
        that would keep the nodes together (an exact run ends with one, in its own iteration).
        """
        ran_last = max(self.node.rounds, default=self.node.iteration)
        for j in self.graph_neighbours:
            status = self.watchdog.status.get(j)
            if status is not None and status.at >= self._final_since and status.phase == RUNNING and status.iteration not in (self.node.iteration, ran_last):
                raise NodeFailure(
                    Reason.DISAGREE, self.node_id,
                    f"neighbour node {j} is in EM iteration {status.iteration} after this node finished EM in EM iteration {self.node.iteration}",
                    (j,),
                )
        conflict = self.agreement.conflict
        stuck = now - max(self._final_since, self.watchdog.last_progress) > self.timeouts.timeout
        if (conflict is not None and now - conflict[1] > self.timeouts.timeout) or (conflict is None and stuck):
            raise self.agreement.overdue(self.present, lambda targets: separator(self.roster.neighbours, self.node_id, targets, self.dropped), self.where())

    # ------------------------------------------------------------------ receiving

    async def deliver(self, msg: Message) -> None:
        """Hand a protocol message to the Node (which keeps one for an aggregation it has not begun)."""
        node = self.node
        if node.done:
            if msg.iteration > node.iteration:
                raise NodeFailure(
                    Reason.DISAGREE, self.node_id,
                    f"neighbour node {msg.sender} sent a {msg.kind} message of EM iteration {msg.iteration} after this node finished EM in EM iteration {node.iteration}",
                    (msg.sender,),
                )
            self.counters["late"] += 1
            return
        try:
            t0 = time.thread_time()
            node.check(msg)
            self.costs["validate_s"] += time.thread_time() - t0
            held = self._held.get(msg.sender)
            claimed = node.claimed_stop(msg)
            if held or (claimed is not None and not self.stops.backed(msg.iteration, self.attempt, claimed)):
                # its sender relays the proposal first, so only a reordering broker or a member
                # makes it come later: keep the message (and the sender's next ones) until it does
                held = self._held.setdefault(msg.sender, [])
                if len(held) >= HELD_LIMIT:
                    raise ProtocolViolation(
                        msg.sender, msg.iteration, msg.round, "stop",
                        f"{len(held) + 1} messages announce stop rounds no signed proposal backs (an honest neighbour is at most a round ahead)",
                    )
                held.append(msg)
                self.counters["held"] += 1
                return
            out = node.receive(msg)
        except OutOfRound as exc:
            self.reject("OutOfRound", str(exc))
            return
        except StopContradicted as exc:
            raise self._stop_contradicted(exc) from None
        except ProtocolError as exc:
            raise self._node_failure(exc, msg) from None
        self.watchdog.moved_on_by(msg.sender, self.clock())
        await self._emit(out)
        if self.spec.asynchronous and not self.link.pending:
            await self._wake()

    async def _wake(self) -> None:
        """An asynchronous activation, when the Node may (see :meth:`~p2pem.protocols.base.Aggregation.may_wake`)."""
        if self.node.may_wake():
            try:
                out = self.node.wake()
            except ProtocolError as exc:
                raise self._node_failure(exc) from None
            await self._emit(out)

    def _node_failure(self, exc: ProtocolError, msg: Message | None = None) -> NodeFailure:
        """What an error of the Node means for the run.

        A violation names its sender (possibly of a message the Node kept and checked only as
        its aggregation began); a model error (the task failed on the network average) names
        nobody; any other refusal by the state machine of an authenticated, fresh, well-formed
        ``msg`` (e.g. two rounds ahead) is a violation by its sender, as honest peers never
        send one, unless this node may be a restarted process (:meth:`fresh_incarnation`):
        then it is evidence only.
        """
        if isinstance(exc, ProtocolViolation):
            return self.violated(exc)
        if isinstance(exc, ModelError):
            detail = str(exc).removeprefix(f"node {self.node.node_id}: ")
            return NodeFailure(Reason.MODEL, self.node_id, f"{detail} (in {self.where()}; nobody in particular is to blame)")
        if msg is None:
            return NodeFailure(Reason.PROTOCOL, self.node_id, f"in {self.where()}: {exc}")
        if self.fresh_incarnation():  # this node may be a restarted process, behind its honest neighbours
            return self._behind(msg.sender, str(exc))
        return NodeFailure(Reason.VIOLATION, self.node_id, f"in {self.where()}, after a {msg.kind} message from node {msg.sender}: {exc}", (msg.sender,))

    def _stop_contradicted(self, exc: StopContradicted) -> NodeFailure:
        found = self.stops.origin_of(self.node.iteration, self.attempt, exc.stop_round)
        if found is None:
            return NodeFailure(Reason.PROTOCOL, self.node_id, f"in {self.where()}: {exc}")
        origin, (at, stop, signature) = found
        return NodeFailure(
            Reason.STOP, self.node_id,
            f"in {self.where()}: {exc}; node {origin} signed that stop round (proposed in round {at})",
            (origin,), evidence=(self.attempt, at, stop), extra_signature=signature,
        )

    async def on_control(self, msg: Message) -> None:
        """Final results, stop proposals and drop votes: each checked before it counts, relayed once."""
        if msg.kind == FINAL:
            await self._final(msg)
        elif msg.kind == STOP:
            await self._stop(msg)
        elif msg.kind == DROP:
            await self._drop_vote(msg)
        else:
            raise violation(msg, "kind", "unknown control message")

    async def _final(self, msg: Message) -> None:
        j, meta = msg.sender, msg.meta
        if not self.plausible(msg):
            raise violation(msg, "final", f"receivers {msg.receivers} are not the sender's neighbours")
        if not self.node.done and len(meta) > 2 and meta[1] == j and meta[2] != self.node.iteration and j in self.node.awaiting():
            raise NodeFailure(
                Reason.DISAGREE, self.node_id,
                f"neighbour node {j} finished EM in EM iteration {meta[2]} while this node waits for its message in {self.where()}",
                (j,),
            )
        now = self.clock()
        if self.agreement.receive(msg, now):
            await self.send([Message(self.node_id, self.graph_neighbours, CONTROL, msg.round, FINAL, msg.payload, False, msg.meta)])
            self.watchdog.progressed(now)

    async def _stop(self, msg: Message) -> None:
        it, attempt, origin, at, stop = self.stops.parse(msg)
        if not self.plausible(msg):
            raise violation(msg, "stop", f"receivers {msg.receivers} are not the sender's neighbours")
        node = self.node
        if attempt < self.attempt or node.done or it < node.iteration:
            return  # an abandoned attempt, or an aggregation this node has left
        if attempt > self.attempt or it > node.iteration:
            raise violation(msg, "stop", f"a stop proposal for EM iteration {it} (attempt {attempt}), an aggregation this node has not begun")
        problem = node.check_proposal(origin, at, stop)
        if problem is not None:
            kind, why = problem
            if kind == "form":
                raise violation(msg, "stop", f"node {origin}'s proposal cannot be made: {why}")
            raise NodeFailure(
                Reason.STOP, self.node_id,
                f"node {origin} signed a proposal to stop EM iteration {it} at protocol round {stop} (made in round {at}) "
                f"that contradicts this node's counters: {why}",
                (origin,), evidence=(attempt, at, stop), extra_signature=tuple(msg.payload),
            )
        lowers = self.stops.record(it, attempt, origin, at, stop, tuple(msg.payload))
        if lowers:
            await self.send([self.stops.message(self.node_id, self.graph_neighbours, it, attempt, origin)])
        await self._release()

    async def _release(self) -> None:
        """Deliver the held messages that a proposal now backs, in each sender's order."""
        for j in list(self._held):
            queue = self._held.pop(j)
            for k, msg in enumerate(queue):
                claimed = self.node.claimed_stop(msg)
                if claimed is not None and not self.stops.backed(msg.iteration, self.attempt, claimed) and msg.iteration >= self.node.iteration:
                    self._held[j] = queue[k:]
                    break
                await self.deliver(msg)

    async def _drop_vote(self, msg: Message) -> None:
        if not self.plausible(msg):
            raise violation(msg, "drop", f"receivers {msg.receivers} are not the sender's neighbours")
        found = self.eviction.receive(msg, self.node.iteration)
        if found is None:
            return
        victim, it, witness = found
        await self.send([self.eviction.message(self.node_id, self.graph_neighbours, victim, it, witness)])  # relayed first
        if victim not in self.dropped and self.eviction.decided(victim, it):
            await self.drop(victim, it)

    async def _vote(self, k: int, now: float) -> None:
        """Sign that neighbour ``k`` fell silent, send the vote to every neighbour (``k`` too)."""
        it = self.node.iteration
        log.warning("node %d: neighbour node %d fell silent in %s; voting to drop it (on_dropout = continue)", self.node_id, k, self.where())
        self._voted[k] = now
        self.eviction.vote(k, it)
        await self.send([self.eviction.message(self.node_id, self.graph_neighbours, k, it, self.node_id)])
        if self.eviction.decided(k, it):
            await self.drop(k, it)

    async def drop(self, k: int, it: int) -> None:
        """Go on without node ``k``, which enough of its neighbours signed fell silent in EM iteration ``it``.

        Each survivor checks that the graph without the dropped nodes keeps every node two
        neighbours and stays 2-edge-connected (else the run stops, saying why), binds the
        dropped set into the tags of protocol messages (messages of the abandoned attempt then
        no longer authenticate) and re-runs the aggregation of iteration ``it`` over the
        survivors' graph.  The votes went out before anything of the new attempt, so every
        neighbour can authenticate what follows.
        """
        me = self.node_id
        witnesses = self.eviction.witnesses(k, it)
        if k == me:
            raise NodeFailure(
                Reason.EVICTED, me,
                f"{nodes_text(witnesses)} signed that this node fell silent in EM iteration {it}; the others go on without it",
            )
        if not self.started or self.node.done or self.node.iteration != it:
            raise NodeFailure(
                Reason.CANNOT_CONTINUE, me,
                f"cannot drop node {k} in EM iteration {it} (witnesses: {nodes_text(witnesses)}): this node is in {self.where()}", (k,),
            )
        dropped = {*self.dropped, k}
        try:
            survivors, topology = survivor_topology(self.roster.neighbours, dropped)
        except ProtocolError as exc:
            raise NodeFailure(
                Reason.CANNOT_CONTINUE, me,
                f"node {k} fell silent in {self.where()} (witnesses: {nodes_text(witnesses)}) and the run cannot go on: {exc}", (k,),
            ) from None
        self.dropped[k] = {"node": k, "iteration": it, "witnesses": list(witnesses), "round": self.node.round}
        self.neighbours = tuple(j for j in self.neighbours if j != k)
        self._nbr_set = frozenset(self.neighbours)
        self.attempt += 1
        # the survivors' step parameters are bound too: one that derived other ones (another
        # host's eigenvalue rounding) cannot authenticate to its neighbours and the run stops,
        # where it would otherwise converge with them to a slightly wrong average
        digest = public_parameters_digest(self.spec, topology).to_bytes(32, "big")
        self.codec.set_generation(b"".join(struct.pack(">i", j) for j in sorted(dropped)) + digest)
        self.admission.guard.forget_from(it)
        self.outbox.forget()
        log.warning("node %d: dropped node %d (witnesses: %s); re-running EM iteration %d over %d nodes", me, k, nodes_text(witnesses), it, len(survivors))
        try:
            out = self.node.restart(NodeContext(survivors.index(me), topology, self.node.ctx.rng), survivors)
        except ProtocolError as exc:
            raise self._node_failure(exc) from None
        self.watchdog.restart(self.neighbours, self.clock())
        await self._emit(out)

    # ------------------------------------------------------------------ sending

    async def _emit(self, out: Sequence[Message]) -> None:
        """Send what the Node produced, its stop proposal (signed) first."""
        proposal = self.node.proposal()
        if proposal is not None:
            it = self.node.iteration
            self.stops.own(it, self.attempt, *proposal)
            out = [self.stops.message(self.node_id, self.graph_neighbours, it, self.attempt, self.node_id), *out]
        if out:
            await self.send(out)
        self._after_progress()

    def _after_progress(self) -> None:
        it = self.node.iteration
        if it != self._reported_iter:
            self._reported_iter = it
            # Keys of iterations before it - 1 cannot come back legitimately: admission ignores
            # them by iteration number.  Hellos are guarded by sequence numbers instead.
            self.admission.guard.forget_before(it - 1)
            self.stops.forget_before(it - 1)
            n_iter = getattr(self.node.task, "n_iter", it)
            if self.progress is not None and n_iter > 0:
                self.progress("progress", n_iter, self._max_iter())

    def _max_iter(self) -> int:
        settings = getattr(self.node.task, "settings", None)
        return int(getattr(settings, "max_iter", 0))

    # ------------------------------------------------------------------ report

    def report(self) -> dict[str, Any]:
        """The node's result: model, log-likelihoods, counts, timings, status and error."""
        return node_report(
            config=self.config,
            run_id=self.run_id,
            launch=self.launch,
            node=self.node,
            status=self.status,
            error=self.error,
            protocol_round=None if self.node.done else self.node.round,
            n_rows=self.n_rows,
            dropped=list(self.dropped.values()),
            counters=self.counters,
            rejected=self.rejected,
            timings=self.timings,
            costs=self.costs,
            on_dropout=self.on_dropout,
        )

    def write_result(self):
        """Write :meth:`report` to the configured result file (atomically) and return its path."""
        return write_report(self.config.result, self.report())
