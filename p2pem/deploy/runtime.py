"""One deployed node: the unchanged :class:`~p2pem.node.Node` driven over a link to its peers.

The simulator's message engine hands each :class:`~p2pem.messages.Message` straight to the
receiving Node; here the same messages are authenticated per receiver (and sealed per edge
where the protocol asks) by :class:`~p2pem.deploy.codec.Codec`, published through a
:class:`~p2pem.deploy.transports.base.Link` and checked on arrival.  Nothing else differs, so
a deployment reproduces ``p2pem simulate`` for the same seeds.

:class:`NodeRuntime` composes parts of one job each and runs the loop that ties them
together (wait for a message or a timer, admit, hand on, send what comes out):

* :mod:`~p2pem.deploy.bootstrap`: load the files, connect, the hello exchange;
* :mod:`~p2pem.deploy.admission`: what is accepted from the wire (pure, no I/O);
* :mod:`~p2pem.deploy.control`: hello, final, bye, abort and drop messages, signed
  statements and the final agreement;
* :mod:`~p2pem.deploy.outbox`: publishing, re-publishing, reconnection;
* :mod:`~p2pem.deploy.watchdog`: silent neighbours and stalls;
* :mod:`~p2pem.deploy.failures`: why a node stops (one typed failure, one enum of reasons);
* :mod:`~p2pem.deploy.report`: the node's ``result.json``;
* :mod:`~p2pem.deploy.process`: the process entry (signals, always a result file).

Failures end in a :class:`~p2pem.deploy.failures.NodeFailure` (or another
:class:`~p2pem.errors.P2pemError`) whose one-line message names this node, the culprit
node(s) and the EM iteration and protocol round.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import struct
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from p2pem.deploy.admission import CONTROL, Admission, Admitted, Convicted, Ignored, Rejected
from p2pem.deploy.bootstrap import Handshake, connect, load_node, public_parameters_digest
from p2pem.deploy.clock import Clock, loop_clock
from p2pem.deploy.config import NodeConfig
from p2pem.deploy.control import ABORT, BYE, DROP, FINAL, HELLO, Agreement, Signer, abort_message, check_bye, plausible_receivers, violation
from p2pem.deploy.dropout import survivor_topology
from p2pem.deploy.failures import NodeFailure, Reason, describe_abort, nodes_text
from p2pem.deploy.outbox import Outbox
from p2pem.deploy.report import node_report, write_report
from p2pem.deploy.transports.base import ConnectionLost, Incoming, Link, LinkTimeout
from p2pem.deploy.watchdog import Watchdog
from p2pem.errors import P2pemError, ProtocolError, TransportError
from p2pem.messages import Message
from p2pem.node import EMFailed, OutOfRound
from p2pem.protocols import NodeContext
from p2pem.protocols.base import ProtocolViolation
from p2pem.task import Task

log = logging.getLogger(__name__)

__all__ = ["NodeRuntime"]

#: Seconds an abort may take to reach the broker before the node stops anyway.
ABORT_PUBLISH_S = 2.0


class NodeRuntime:
    """One node process: load its files, connect, run the Node to the end, report.

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
        self.config = config
        self.launch = launch
        self.progress = progress
        self.parent_pid = parent_pid
        self.roster = roster = setup.roster
        self.node_id = i = config.node_id
        self.run_id = roster.run_id
        self.timeouts = config.timeouts
        self.on_dropout = config.on_dropout
        self.node = setup.node
        self.link: Link = setup.link
        self.n_rows = setup.n_rows
        self.codec = setup.codec
        self.spec = setup.spec
        self.clock: Clock = loop_clock if clock is None else clock
        self.neighbours: tuple[int, ...] = roster.neighbours[i]
        self._nbr_set = frozenset(self.neighbours)
        self.counters: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self.timings: dict[str, float] = {}
        #: CPU seconds spent checking messages of the protocol and handling control messages
        #: (their checks, the abort signatures, the final comparison): the price of this
        #: runtime's defences, printed by ``sim/bench_deploy.py``.
        self.costs: dict[str, float] = {"validate_s": 0.0, "control_s": 0.0}
        # the parts
        self.handshake = Handshake(i, roster.digest(), public_parameters_digest(self.spec, self.node.ctx.topology), self.counters)
        self.admission = Admission(self.run_id, self.codec, i, kinds=self.spec.message_kinds)
        self.outbox = Outbox(self.link, self.codec, self.run_id, i, self.clock, self.timeouts.reconnect_s, self.counters)
        self.signer = Signer(setup.identity, roster.keys, self.run_id, launch, roster.neighbours)
        self.agreement = Agreement(i, self.node.task.summary_size())
        self.watchdog = Watchdog(i, self.timeouts)
        # the run's state
        self.started = False
        self.status = "created"
        self.error: P2pemError | None = None
        self.dropped: dict[int, dict[str, int]] = {}
        self._byes: set[int] = set()
        self._tick = min(0.2, self.timeouts.heartbeat_s / 2)
        self._next_check = -math.inf
        self._reported_iter = -1
        self._t0 = 0.0

    # ------------------------------------------------------------------ the run

    def where(self) -> str:
        """``EM iteration k, protocol round r`` (what the node is waiting for)."""
        if self.node.done:
            if self.agreement.mine is not None and self.status != "finished":
                return f"the final agreement after EM iteration {self.node.iteration}"
            return f"EM iteration {self.node.iteration} (finished)"
        return f"EM iteration {self.node.iteration}, protocol round {self.node.round}"

    def _elapsed(self) -> float:
        return self.clock() - self._t0

    async def run(self) -> dict[str, Any]:
        """Connect, run the protocol to the end, agree with the neighbours, linger until they are done.

        Returns
        -------
        dict
            The node's report (see :meth:`report`).

        Raises
        ------
        NodeFailure, TransportError, ProtocolError
            With a one-line message naming this node, the culprit and the round.
        """
        if self.clock is loop_clock:  # the same clock, one call less on every message
            self.clock = self.outbox.clock = asyncio.get_running_loop().time
        self._t0 = self.clock()
        self.timings["started_unix"] = time.time()
        try:
            await connect(self.link, self.node_id, self.config.broker.username, self.timeouts.startup_timeout, self.clock)
            self.timings["connected_s"] = self._elapsed()
            log.info("node %d connected to %s, waiting for %s", self.node_id, self.link.address, nodes_text(self.neighbours))
            await self._send_hello()
            while not self.node.done:
                await self._step()
            self.timings["finished_s"] = self._elapsed()
            await self._agree()
            self.status = "finished"
            self.timings["agreed_s"] = self._elapsed()
            await self._linger()
            self.timings["total_s"] = self._elapsed()
            return self.report()
        except asyncio.CancelledError:
            self.status = "failed"
            await self._abort(Reason.INTERRUPTED, ())
            raise
        except Exception as exc:  # noqa: BLE001 - no exception escapes a node: it is reported and told
            if isinstance(exc, P2pemError):
                err: P2pemError = exc
            else:
                log.debug("node %d: internal error", self.node_id, exc_info=exc)  # the traceback only with -vv
                err = NodeFailure(Reason.INTERNAL, self.node_id, f"internal error in {self.where()}: {type(exc).__name__}: {exc}")
            self.fail(err)
            await self._abort_for(err)
            if err is exc:
                raise
            raise err from None
        finally:
            self.timings.setdefault("total_s", self._elapsed())
            try:
                await asyncio.wait_for(self.link.close(), 2.0)
            except (TransportError, TimeoutError):
                pass

    def fail(self, error: P2pemError) -> None:
        """Record that the run failed with ``error`` (reported by :meth:`report`)."""
        self.status, self.error = "failed", error

    async def _step(self) -> None:
        """Check the timers, then wait (briefly) for one message and handle it."""
        if self.outbox.failed and await self.outbox.check(self.where, self._reconnect_hello):
            self.watchdog.restart(self.neighbours, self.clock())
        now = self.clock()
        if now >= self._next_check:
            self._next_check = now + self._tick
            await self._timers(now)
        try:
            # A queued message needs no timer; arming one per message costs measurable CPU.
            incoming = await self.link.receive(timeout=math.inf if self.link.pending else self._tick)
        except LinkTimeout:
            return
        except ConnectionLost as exc:
            await self.outbox.recover(exc, self.where, self._reconnect_hello)
            self.watchdog.restart(self.neighbours, self.clock())
            return
        await self._handle(incoming)

    async def _timers(self, now: float) -> None:
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            raise NodeFailure(
                Reason.INTERRUPTED,
                self.node_id,
                f"the launcher (pid {self.parent_pid}) exited; stopping in {self.where()}",
                exit_code=128 + signal.SIGTERM,
            )
        if self.handshake.hello_due or now - self.outbox.last_broadcast >= self.timeouts.heartbeat_s:
            await self._send_hello()
        if self.handshake.republish_due:
            self.handshake.republish_due = False
            await self.outbox.republish()
        if not self.started:
            if not self.handshake.missing(self.neighbours):
                await self._start()
            else:
                self.handshake.check_startup(self.neighbours, now - self._t0, self.timeouts.startup_timeout)
            return
        if self.node.done and (self.agreement.mine is None or self.status == "finished"):
            return
        awaited = self.awaiting()
        if self.on_dropout == "continue" and not self.node.done:
            silent = self.watchdog.silent(awaited, now)
            for j in silent:
                log.warning("node %d: neighbour node %d fell silent in %s; dropping it (on_dropout = continue)", self.node_id, j, self.where())
                await self.drop(j, self.node.iteration, self.node_id, None)
            if silent:
                return
        self.watchdog.check(awaited, now, self.where(), bool(self.node.rounds))

    def awaiting(self) -> list[int]:
        """Neighbours whose message the protocol waits for now (or whose final model has not arrived)."""
        if not self.started:
            return []
        if self.node.done:
            return [j for j in self.neighbours if j not in self.agreement.agreed] if self.agreement.mine is not None else []
        return list(self.node.awaiting())

    async def _start(self) -> None:
        self.started = True
        self.timings["online_s"] = self._elapsed()
        # CPU spent on imports, keys, data and start-up, apart from the consensus phase's
        self.timings["online_cpu_s"] = time.process_time()
        self.watchdog.restart(self.neighbours, self.clock())
        log.info("node %d: every neighbour is online, starting the protocol", self.node_id)
        if self.progress is not None:
            self.progress("online", 0, self._max_iter())
        try:
            out = self.node.start()  # with what the neighbours sent before (the Node kept it)
        except ProtocolError as exc:  # e.g. a message kept until now fails its check
            raise self._node_failure(exc) from None
        await self._send(out)
        self._after_progress()

    async def _agree(self) -> None:
        """Show every neighbour this node's final model and check theirs (no split outcome).

        Neighbours still computing keep the heartbeats going; the usual silence and stall
        timeouts apply (see :class:`~p2pem.deploy.control.Agreement`).
        """
        await self._send([self.agreement.message(self.neighbours, self.node.task.summary(), self._n_iter())])
        self.agreement.settle()
        self.watchdog.progressed(self.clock())
        while not self.agreement.done(self._nbr_set):
            await self._step()

    async def _linger(self) -> None:
        """Say bye; stay (answering hellos, re-publishing) until every neighbour said bye."""
        await self._send([Message(self.node_id, self.neighbours, CONTROL, 0, BYE, (), False)])
        deadline = self.clock() + self.timeouts.timeout
        try:
            while not self._nbr_set <= self._byes and self.clock() < deadline:
                await self._step()
        except P2pemError as exc:
            log.warning("node %d: finished and agreed with every neighbour, but afterwards %s", self.node_id, exc)
            return
        await self.outbox.drain(min(5.0, self.timeouts.timeout))
        missing = sorted(self._nbr_set - self._byes)
        if missing:
            log.warning("node %d: finished, but %s did not say bye within %g s", self.node_id, nodes_text(missing), self.timeouts.timeout)

    # ------------------------------------------------------------------ receiving

    async def _handle(self, incoming: Incoming) -> None:
        verdict = self.admission.admit(incoming, self._nbr_set, self.node.iteration)
        if incoming.payload:
            self.counters["received"] += 1
        if not isinstance(verdict, Admitted):
            self._not_admitted(verdict)
            return
        msg = verdict.msg
        if msg.iteration == CONTROL:
            t0 = time.thread_time()
            try:
                await self._control(msg)
            finally:
                self.costs["control_s"] += time.thread_time() - t0
            if self.handshake.start_due:  # started here, outside the control messages' CPU account
                self.handshake.start_due = False
                await self._start()
            return
        await self._deliver(msg)

    def _not_admitted(self, verdict: Ignored | Rejected | Convicted) -> None:
        if isinstance(verdict, Ignored):
            self.counters[verdict.counter] += 1
            msg = verdict.msg
            if msg is not None and 0 <= msg.iteration < self.node.iteration:
                log.info(
                    "node %d: ignored a replayed or late duplicate %s message from node %d (EM iteration %d, round %d)",
                    self.node_id, msg.kind, msg.sender, msg.iteration, msg.round,
                )
        elif isinstance(verdict, Rejected):
            self._reject(verdict.reason, verdict.detail)
        else:
            raise NodeFailure(Reason.VIOLATION, self.node_id, f"in {self.where()}: {verdict.detail}", (verdict.culprit,))

    def _violated(self, exc: ProtocolViolation) -> NodeFailure:
        return NodeFailure(Reason.VIOLATION, self.node_id, f"in {self.where()}: {exc}", (exc.sender,))

    def _node_failure(self, exc: ProtocolError, msg: Message | None = None) -> NodeFailure:
        """What an error of the Node means for the run.

        A violation names its sender (possibly of a message the Node kept and checked only as
        its aggregation began); an unusable average names nobody; any other refusal by the
        state machine of an authenticated, fresh, well-formed ``msg`` (e.g. two rounds ahead)
        is a violation by its sender, as honest peers never send one.
        """
        if isinstance(exc, ProtocolViolation):
            return self._violated(exc)
        if isinstance(exc, EMFailed):
            detail = str(exc).removeprefix(f"node {self.node.node_id}: ")
            return NodeFailure(Reason.UNUSABLE_AVERAGE, self.node_id, f"{detail} (a member sent values that are finite but absurd)")
        if msg is None:
            return NodeFailure(Reason.PROTOCOL, self.node_id, f"in {self.where()}: {exc}")
        return NodeFailure(Reason.VIOLATION, self.node_id, f"in {self.where()}, after a {msg.kind} message from node {msg.sender}: {exc}", (msg.sender,))

    def _plausible(self, msg: Message) -> bool:
        return plausible_receivers(self.roster.neighbours[msg.sender], msg.receivers, self.dropped)

    async def _control(self, msg: Message) -> None:
        """Hello, final, bye, abort and drop: each checked field by field before it counts."""
        j = msg.sender
        try:
            if msg.kind == HELLO:
                if self.handshake.receive(msg, self._plausible(msg), self.neighbours, self.started):
                    self.watchdog.heard(j, self.clock())
            elif msg.kind == FINAL:
                if self.agreement.receive(msg, self._plausible(msg)):
                    now = self.clock()
                    self.watchdog.heard(j, now)
                    if self.agreement.mine is not None:
                        self.watchdog.progressed(now)
            elif msg.kind == BYE:
                check_bye(msg)
                self._byes.add(j)
            elif msg.kind == ABORT:
                meta, signature = self.signer.verify_abort(msg)
                if meta[3] == self.node_id:
                    return  # our own abort, relayed back
                text = f"run stopped in {self.where()}: {describe_abort(meta)}; relayed by node {j}"
                raise NodeFailure(Reason.ABORTED, self.node_id, text, meta[4:], relay=(meta, signature))
            elif msg.kind == DROP:
                (k, it, origin), signature = self.signer.verify_drop(msg)
            else:
                raise violation(msg, "kind", "unknown control message")
        except ProtocolViolation as exc:
            raise self._violated(exc) from None
        if msg.kind == DROP:
            if self.on_dropout != "continue":
                raise NodeFailure(
                    Reason.DROPOUT_MISMATCH,
                    self.node_id,
                    f"node {origin} drops node {k} (on_dropout = 'continue'), but this node runs with on_dropout = 'stop' "
                    f"(every node needs the same setting)",
                    (k,),
                )
            await self.drop(k, it, origin, signature)

    async def drop(self, k: int, it: int, origin: int, signature: tuple[int, ...] | None) -> None:
        """Go on without node ``k``: tell the neighbours, re-run EM iteration ``it`` among the survivors.

        The drop ``(k, it, origin)`` is signed by the node that saw ``k`` fall silent and
        flooded unchanged, so every survivor drops the same node at the same iteration.  Each
        survivor checks that the graph without the dropped nodes is connected and has a
        cycle, relays the drop, binds the dropped set into the tags of protocol messages
        (messages of the abandoned attempt then no longer authenticate) and restarts the
        aggregation of iteration ``it`` over the survivors' graph.
        """
        if k in self.dropped:
            return
        me = self.node_id
        if k == me:
            raise NodeFailure(Reason.CANNOT_CONTINUE, me, f"node {origin} declared this node silent in EM iteration {it} and the others go on without it", (me,))
        if not self.started or self.node.done or self.node.iteration != it:
            raise NodeFailure(Reason.CANNOT_CONTINUE, me, f"cannot drop node {k} in EM iteration {it} (noticed by node {origin}): this node is in {self.where()}", (k,))
        dropped = {*self.dropped, k}
        try:
            survivors, topology = survivor_topology(self.roster.neighbours, dropped)
        except ProtocolError as exc:
            raise NodeFailure(
                Reason.CANNOT_CONTINUE, me, f"node {k} fell silent in {self.where()} (noticed by node {origin}) and the run cannot go on: {exc}", (k,)
            ) from None
        self.dropped[k] = {"node": k, "iteration": it, "detected_by": origin, "round": self.node.round}
        self.neighbours = tuple(j for j in self.neighbours if j != k)
        self._nbr_set = frozenset(self.neighbours)
        # tell the neighbours before anything of the new attempt goes out (the broker keeps each
        # client's order), so none of them receives a message it cannot yet authenticate
        msg, _ = self.signer.drop(me, self.neighbours, (k, it, origin), signature)
        await self._send([msg])
        # the survivors' step parameters are bound too: one that derived other ones (another
        # host's eigenvalue rounding) cannot authenticate to its neighbours and the run stops,
        # where it would otherwise converge with them to a slightly wrong average
        digest = public_parameters_digest(self.spec, topology).to_bytes(32, "big")
        self.codec.set_generation(b"".join(struct.pack(">i", j) for j in sorted(dropped)) + digest)
        self.admission.guard.forget_from(it)
        self.outbox.forget()
        log.warning("node %d: dropped node %d (noticed by node %d); re-running EM iteration %d over %d nodes", me, k, origin, it, len(survivors))
        try:
            out = self.node.restart(NodeContext(survivors.index(me), topology, self.node.ctx.rng), survivors)
        except ProtocolError as exc:
            raise self._node_failure(exc) from None
        self.watchdog.restart(self.neighbours, self.clock())
        await self._send(out)
        self._after_progress()

    def _reject(self, reason: str, detail: str) -> None:
        self.rejected[reason] += 1
        log.warning("node %d: rejected a message (%s): %s", self.node_id, reason, detail)

    async def _deliver(self, msg: Message) -> None:
        """Hand a protocol message to the Node (which keeps one for an aggregation it has not begun)."""
        try:
            t0 = time.thread_time()
            self.node.check(msg)
            self.costs["validate_s"] += time.thread_time() - t0
            out = self.node.receive(msg)
        except OutOfRound as exc:
            self._reject("OutOfRound", str(exc))
            return
        except ProtocolError as exc:
            raise self._node_failure(exc, msg) from None
        self.watchdog.moved_on_by(msg.sender, self.clock())
        if out:
            await self._send(out)
        self._after_progress()

    def _n_iter(self) -> int:
        """EM's M-steps, or the aggregations of another task."""
        return int(getattr(self.node.task, "n_iter", self.node.iteration))

    def _max_iter(self) -> int:
        settings = getattr(self.node.task, "settings", None)
        return int(getattr(settings, "max_iter", 0))

    def _after_progress(self) -> None:
        n_iter = self._n_iter()
        if n_iter != self._reported_iter:
            self._reported_iter = n_iter
            it = self.node.iteration
            # Keys of iterations before it - 1 cannot come back legitimately; a replay of one
            # is refused by the Node as out of round.  Control keys are guarded by sequence
            # numbers instead (see the Handshake).
            self.admission.guard.forget_before(it - 1)
            if self.progress is not None and n_iter > 0:
                self.progress("progress", n_iter, self._max_iter())

    # ------------------------------------------------------------------ sending

    async def _send(self, msgs: Sequence[Message]) -> None:
        secret = self.spec.secret_kinds
        for m in msgs:
            if m.kind in secret and not m.encrypted:
                raise ProtocolError(f"node {self.node_id}: refusing to publish a {m.kind} message in clear (its payload is secret)")
        await self.outbox.send(msgs, len(self.neighbours))

    async def _send_hello(self) -> None:
        self.handshake.hello_due = False
        await self._send([self.handshake.hello(self.neighbours, self.outbox.epoch)])

    def _reconnect_hello(self) -> Message:
        return self.handshake.hello(self.neighbours, self.outbox.epoch)

    async def _abort_for(self, exc: BaseException) -> None:
        if isinstance(exc, NodeFailure) and exc.relay is not None:  # relay what we were told, signed by its origin
            await self.outbox.publish_retained(abort_message(self.node_id, self.neighbours, *exc.relay), ABORT_PUBLISH_S)
        elif isinstance(exc, NodeFailure):
            await self._abort(exc.reason, exc.culprits)
        else:
            await self._abort(Reason.PROTOCOL if isinstance(exc, ProtocolError) else Reason.BROKER, ())

    async def _abort(self, reason: Reason, culprits: Sequence[int]) -> None:
        """Tell the neighbours (retained) that the run stops, signed by this node."""
        if self.link.connected:
            msg = self.signer.abort(self.node_id, self.neighbours, reason, self.node.iteration, self.node.round, culprits)
            await self.outbox.publish_retained(msg, ABORT_PUBLISH_S)

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
        )

    def write_result(self):
        """Write :meth:`report` to the configured result file (atomically) and return its path."""
        return write_report(self.config.result, self.report())
