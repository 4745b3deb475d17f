"""What every party of a deployment does, node or server: the loop, admission, hellos and aborts.

:class:`Peer` connects, meets its peers (the hello exchange of :mod:`p2pem.deploy.bootstrap`),
runs its subclass's work (:meth:`Peer.work`: a node's EM and final agreement, a server's
aggregations), lingers until its peers said bye, and reports.  In between it owns the loop that
ties the parts together: wait for a message or a timer, admit it
(:mod:`p2pem.deploy.admission`), check a control message field by field (hello, bye, abort
here; the subclass's own kinds in :meth:`Peer.on_control`) or hand a protocol message on
(:meth:`Peer.deliver`), and send what comes out through the :mod:`~p2pem.deploy.outbox`.

Whatever goes wrong ends in a :class:`~p2pem.deploy.failures.NodeFailure` (or another
:class:`~p2pem.errors.P2pemError`) that the peer tells its neighbours as a signed, retained
abort before it stops (:meth:`Peer.tell`).  A relayed abort is checked for its signature and
its plausibility first: one that no honest origin signs (naming nodes its origin cannot have
watched, a reason that does not fit its phase) convicts the neighbour that sent it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from p2pem.deploy.admission import CONTROL, Admission, Admitted, Convicted, Ignored, Rejected
from p2pem.deploy.bootstrap import Handshake, connect
from p2pem.deploy.clock import Clock, loop_clock
from p2pem.deploy.config import Timeouts
from p2pem.deploy.control import ABORT, BYE, DROP, FINAL, FINAL_PHASE, HELLO, STOP, Abort, Signer, StatementBudget, abort_message, bye_message, check_bye, implausible, make_abort, parse_abort, plausible_receivers, statement_limit, violation
from p2pem.deploy.cuts import separates
from p2pem.deploy.failures import NodeFailure, Reason, describe_abort, nodes_text
from p2pem.deploy.limits import LogLimiter
from p2pem.deploy.outbox import Outbox
from p2pem.deploy.transports.base import ConnectionLost, Incoming, Link, LinkTimeout
from p2pem.deploy.watchdog import STARTING, Status, Watchdog
from p2pem.errors import P2pemError, ProtocolError, TransportError
from p2pem.messages import SERVER, Message
from p2pem.protocols.base import ProtocolViolation

log = logging.getLogger(__name__)

__all__ = ["ABORT_PUBLISH_S", "Peer"]

#: Seconds an abort may take to reach the broker before the peer stops anyway.
ABORT_PUBLISH_S = 2.0
#: Checks a neighbour's message fails when it is ahead of this party: proof, unless this party
#: may be a restarted process that starts again from the beginning (:meth:`Peer.fresh_incarnation`;
#: the price: in the first round of a run such a message, or a stop proposal this party cannot
#: place yet, is only evidence against its sender).
_AHEAD = frozenset({"window", "ahead", "state", "stop"})
#: Control messages that carry a signed statement (each costs a signature check): budgeted per sender.
_STATEMENTS = frozenset({FINAL, STOP, DROP, ABORT})


class Peer:
    """One party of a deployment (module docstring); subclassed by the node and the server runtimes.

    Parameters
    ----------
    node_id : int
        This party's id (:data:`~p2pem.messages.SERVER` for a server).
    roster : Roster
    codec : Codec
    identity : Identity
    link : Link
    peers : tuple of int
        The parties it exchanges messages with (graph neighbours, and a server).
    timeouts : Timeouts
    spec : ProtocolSpec
        The run's protocol (message kinds, payload sizes).
    max_entries : int
        Most payload entries of any message of the run.
    params_digest : int
        Digest of the protocol's public step parameters (bound into hellos).
    launch : bytes
    clock : callable, optional
    progress, parent_pid : see :class:`~p2pem.deploy.runtime.NodeRuntime`
    """

    def __init__(
        self,
        *,
        node_id: int,
        roster,
        codec,
        identity,
        link: Link,
        peers: tuple[int, ...],
        timeouts: Timeouts,
        spec,
        max_entries: int,
        params_digest: int,
        launch: bytes = b"",
        clock: Clock | None = None,
        progress: Callable[[str, int, int], None] | None = None,
        parent_pid: int | None = None,
    ) -> None:
        self.node_id = node_id
        self.roster = roster
        self.run_id = roster.run_id
        self.codec = codec
        self.link = link
        self.timeouts = timeouts
        self.spec = spec
        self.launch = launch
        self.progress = progress
        self.parent_pid = parent_pid
        self.clock: Clock = loop_clock if clock is None else clock
        self.has_server = spec.server_aggregation(roster.topology(), 0) is not None
        self.neighbours: tuple[int, ...] = tuple(peers)
        self._nbr_set = frozenset(self.neighbours)
        self.counters: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self.timings: dict[str, float] = {}
        #: CPU seconds spent checking messages of the protocol and handling control messages
        #: (their checks, the signatures, the final comparison): the price of this runtime's
        #: defences, printed by ``sim/bench_deploy.py``.
        self.costs: dict[str, float] = {"validate_s": 0.0, "control_s": 0.0}
        n = roster.n_nodes
        self.n_nodes = n
        self._tick = min(0.2, timeouts.heartbeat_s / 2)
        keys = roster.public_keys()
        self.handshake = Handshake(node_id, roster.digest(), params_digest, self.counters, peers_of=self.peers_of, tick=self._tick)
        self.admission = Admission(self.run_id, codec, node_id, kinds=spec.message_kinds, max_entries=max_entries, max_fields=n + 16)
        self.outbox = Outbox(link, codec, self.run_id, node_id, self.clock, timeouts.reconnect_s, self.counters)
        self.signer = Signer(identity, keys, self.run_id, launch)
        n_edges = sum(len(nbrs) for nbrs in roster.neighbours) // 2
        self.budget = StatementBudget(statement_limit(n, n_edges))
        self.watchdog = Watchdog(node_id, timeouts)
        self.logs = LogLimiter()
        self.started = False
        self.status = "created"
        self.error: P2pemError | None = None
        self.dropped: dict[int, dict[str, Any]] = {}
        self._byes: set[int] = set()
        self._next_check = -math.inf
        self._t0 = 0.0

    # ------------------------------------------------------------------ what subclasses provide

    def peers_of(self, j: int) -> frozenset[int]:
        """The parties node ``j`` exchanges messages with (a status naming others is a violation)."""
        if j == SERVER:
            return frozenset(range(self.n_nodes))
        return frozenset(self.roster.neighbours[j]) | ({SERVER} if self.has_server else frozenset())

    def where(self) -> str:
        raise NotImplementedError

    def status_fields(self) -> tuple[int, ...]:
        """``(phase, iteration, round, *awaited)`` for this party's heartbeat."""
        raise NotImplementedError

    @property
    def iteration(self) -> int:
        """The EM iteration this party is in (admission's window)."""
        raise NotImplementedError

    async def work(self) -> None:
        """The party's job between meeting its peers and saying bye."""
        raise NotImplementedError

    async def on_start(self) -> None:
        """Every peer is online: begin."""
        raise NotImplementedError

    async def on_timers(self, now: float) -> None:
        """The party's own timers, once started."""

    async def on_control(self, msg: Message) -> None:
        """A control message of a kind other than hello, bye and abort."""
        raise violation(msg, "kind", "unknown control message")

    async def deliver(self, msg: Message) -> None:
        """A protocol message, admitted."""
        raise NotImplementedError

    def report(self) -> dict[str, Any]:
        raise NotImplementedError

    def write_result(self) -> Path:
        """Write :meth:`report` to the configured result file (atomically) and return its path."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the run

    def _elapsed(self) -> float:
        return self.clock() - self._t0

    async def run(self) -> dict[str, Any]:
        """Connect, meet the peers, do the work, linger until they are done; the report.

        Raises
        ------
        NodeFailure, TransportError, ProtocolError
            With a one-line message naming this party, the culprit and where.
        """
        if self.clock is loop_clock:  # the same clock, one call less on every message
            self.clock = self.outbox.clock = asyncio.get_running_loop().time
        self._t0 = self.clock()
        self.timings["started_unix"] = time.time()
        try:
            await connect(self.link, self.node_id, getattr(self, "username", None), self.timeouts.startup_timeout, self.clock)
            self.timings["connected_s"] = self._elapsed()
            log.info("node %d connected to %s, waiting for %s", self.node_id, self.link.address, nodes_text(self.neighbours))
            await self._send_hello()
            await self.work()
            self.status = "finished"
            self.timings["agreed_s"] = self._elapsed()
            await self._linger()
            self.timings["total_s"] = self._elapsed()
            return self.report()
        except asyncio.CancelledError:
            self.status = "failed"
            await self._abort(Reason.INTERRUPTED, ())
            raise
        except Exception as exc:  # noqa: BLE001 - no exception escapes a party: it is reported and told
            if isinstance(exc, P2pemError):
                err: P2pemError = exc
            else:
                log.debug("node %d: internal error", self.node_id, exc_info=exc)  # the traceback only with -vv
                err = NodeFailure(Reason.INTERNAL, self.node_id, f"internal error in {self.where()}: {type(exc).__name__}: {exc}")
            self.fail(err)
            await self.tell(err)
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
        await self.on_timers(now)

    async def _start(self) -> None:
        self.started = True
        self.timings["online_s"] = self._elapsed()
        # CPU spent on imports, keys, data and start-up, apart from the consensus phase's
        self.timings["online_cpu_s"] = time.process_time()
        self.watchdog.restart(self.neighbours, self.clock())
        log.info("node %d: every neighbour is online, starting the protocol", self.node_id)
        await self.on_start()

    async def _linger(self) -> None:
        """Say bye; stay (answering hellos, re-publishing) until every peer said bye."""
        await self.send([bye_message(self.node_id, self.neighbours)])
        deadline = self.clock() + self.timeouts.timeout
        try:
            while not self._nbr_set <= self._byes and self.clock() < deadline:
                await self._step()
        except P2pemError as exc:
            log.warning("node %d: finished and agreed with every node, but afterwards %s", self.node_id, exc)
            return
        await self.outbox.drain(min(5.0, self.timeouts.timeout))
        missing = sorted(self._nbr_set - self._byes)
        if missing:
            log.warning("node %d: finished, but %s did not say bye within %g s", self.node_id, nodes_text(missing), self.timeouts.timeout)

    # ------------------------------------------------------------------ receiving

    async def _handle(self, incoming: Incoming) -> None:
        verdict = self.admission.admit(incoming, self._nbr_set, self.iteration)
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
        await self.deliver(msg)

    def _not_admitted(self, verdict: Ignored | Rejected | Convicted) -> None:
        if isinstance(verdict, Ignored):
            self.counters[verdict.counter] += 1
            msg = verdict.msg
            if msg is not None and 0 <= msg.iteration < self.iteration and self.logs.allow(("late", msg.sender)):
                log.info(
                    "node %d: ignored a replayed or late %s message from node %d (EM iteration %d, round %d; %d so far from it)",
                    self.node_id, msg.kind, msg.sender, msg.iteration, msg.round, self.logs.count(("late", msg.sender)),
                )
        elif isinstance(verdict, Rejected):
            self.reject(verdict.reason, verdict.detail)
            if verdict.reason in ("ForgedMessage", "TopicMismatch") and verdict.sender is not None:
                # messages on a peer's topics that do not authenticate: it, or the path, garbles them
                self.watchdog.garbled[verdict.sender] = self.clock()
        else:
            if verdict.check in _AHEAD and self.fresh_incarnation():
                raise self._behind(verdict.culprit, verdict.detail)
            raise NodeFailure(Reason.VIOLATION, self.node_id, f"in {self.where()}: {verdict.detail}", (verdict.culprit,))

    def reject(self, reason: str, detail: str) -> None:
        """Count a refused message; log it, a few times per reason and claimed sender."""
        self.rejected[reason] += 1
        key = ("rejected", reason, detail.split(",")[0][:60])
        if self.logs.allow(key):
            log.warning("node %d: rejected a message (%s, %d so far): %s", self.node_id, reason, self.logs.count(key), detail)

    def violated(self, exc: ProtocolViolation) -> NodeFailure:
        if exc.check in _AHEAD and self.fresh_incarnation():
            return self._behind(exc.sender, str(exc))
        return NodeFailure(Reason.VIOLATION, self.node_id, f"in {self.where()}: {exc}", (exc.sender,))

    def fresh_incarnation(self) -> bool:
        """Whether this party has not yet done anything a restarted process would not have done
        (then a neighbour's message far ahead may mean that this party restarted: evidence,
        not proof against the neighbour).  Subclasses say when."""
        return False

    def _behind(self, j: int, detail: str) -> NodeFailure:
        return NodeFailure(
            Reason.RESTARTED, self.node_id,
            f"in {self.where()}: node {j} is further ahead than an honest neighbour can be ({detail}): this node restarted "
            f"(or started late), or node {j} broke the protocol; the run stops (unattributable)",
            (j,),
        )

    def plausible(self, msg: Message) -> bool:
        full = sorted(self.peers_of(msg.sender)) if msg.sender == SERVER else self.roster.neighbours[msg.sender]
        return plausible_receivers(full, [r for r in msg.receivers if r != SERVER] if msg.sender != SERVER else msg.receivers, self.dropped)

    async def _control(self, msg: Message) -> None:
        """Hello, bye and abort here; the subclass's kinds in :meth:`on_control`."""
        j = msg.sender
        try:
            if msg.kind in _STATEMENTS:
                self.budget.spend(msg, self.iteration)
            if msg.kind == HELLO:
                status = self.handshake.receive(msg, self.plausible(msg), self.neighbours, self.started, self.clock())
                if status is not None:
                    self._incarnation(j, self.watchdog.status.get(j), status)
                    self.watchdog.reported(j, status)
            elif msg.kind == BYE:
                check_bye(msg)
                self._byes.add(j)
            elif msg.kind == ABORT:
                abort = self.check_abort(msg)
                if abort.origin == self.node_id:
                    return  # our own abort, relayed back
                # the origin's claim: whatever proof it holds was shown to it, not to this node,
                # so the origin and those it names are suspects here, none a culprit
                suspects = (abort.origin, *abort.culprits)
                text = (f"run stopped in {self.where()}: {describe_abort(abort.reason, abort.iteration, abort.round, abort.origin, abort.culprits, abort.evidence)}; "
                        f"relayed by node {j} (its word, unattributable here: suspects {nodes_text(suspects)})")
                raise NodeFailure(Reason.ABORTED, self.node_id, text, suspects, relay=abort)
            else:
                await self.on_control(msg)
        except ProtocolViolation as exc:
            raise self.violated(exc) from None

    def _incarnation(self, j: int, previous: Status | None, status: Status) -> None:
        """Stop with :attr:`~Reason.RESTARTED` when node ``j`` or this node restarted mid-run.

        A neighbour whose newer hello says it is starting again after it said it was running
        is a new incarnation under the same key and launch nonce (a crash-restart): it lost
        its state, and nobody can resume it.  A neighbour that says it is more than one EM
        iteration ahead of this node (honest neighbours stay within one) means this node is
        the new incarnation, or that the neighbour lies.  Either way nobody is proved guilty:
        the failure names ``j`` as a suspect, never a third node.
        """
        if j == SERVER or self.node_id == SERVER:
            return
        if previous is not None and previous.phase != STARTING and status.phase == STARTING:
            raise NodeFailure(
                Reason.RESTARTED, self.node_id,
                f"node {j} restarted in {self.where()} (a new incarnation under its key and this launch: its hellos start again); "
                f"its state is lost and the run stops (unattributable)",
                (j,),
            )
        if status.phase != STARTING and status.iteration > self.iteration + 1:
            raise NodeFailure(
                Reason.RESTARTED, self.node_id,
                f"neighbour node {j} says it is in EM iteration {status.iteration}, while this node is in {self.where()}: this node restarted "
                f"(or started late), or node {j} lies; the run stops (unattributable)",
                (j,),
            )

    def check_abort(self, msg: Message) -> Abort:
        """The abort ``msg`` relays, checked: form, the origin's signature, plausibility.

        Raises
        ------
        ProtocolViolation
            Naming the sender (which signed it or relayed it unchecked).
        """
        abort = parse_abort(msg, self.n_nodes, self.has_server)
        self.signer.check(msg, ABORT, abort.origin, abort.fields(), abort.signature)
        why = implausible(abort, self.peers_of, self.iteration, lambda v, a, b: separates(self.roster.neighbours, v, a, b))
        if why is not None:
            raise violation(msg, "abort", f"node {abort.origin}'s signed abort is implausible: {why}")
        if abort.reason == Reason.STOP:
            attempt, at, stop = abort.evidence
            self.signer.check(msg, STOP, abort.culprits[0], (abort.iteration, attempt, abort.culprits[0], at, stop), abort.extra_signature)
        return abort

    # ------------------------------------------------------------------ sending

    async def send(self, msgs: Sequence[Message]) -> None:
        secret = self.spec.secret_kinds
        for m in msgs:
            if m.kind in secret and not m.encrypted:
                raise ProtocolError(f"node {self.node_id}: refusing to publish a {m.kind} message in clear (its payload is secret)")
        await self.outbox.send(msgs, len(self.neighbours))

    async def _send_hello(self) -> None:
        await self.send([self._reconnect_hello()])

    def _reconnect_hello(self) -> Message:
        return self.handshake.hello(self.neighbours, self.outbox.epoch, self.status_fields())

    async def tell(self, exc: BaseException) -> None:
        """Tell the neighbours why this party stops: the relayed abort, or its own signed one."""
        if isinstance(exc, NodeFailure) and exc.relay is not None:  # relay what we were told, signed by its origin
            await self.outbox.publish_retained(abort_message(self.node_id, self.neighbours, exc.relay), ABORT_PUBLISH_S)
        elif isinstance(exc, NodeFailure):
            if exc.reason != Reason.EVICTED:  # the others no longer listen to an evicted node
                await self._abort(exc.reason, exc.named, exc.evidence, exc.extra_signature)
        else:
            await self._abort(Reason.PROTOCOL if isinstance(exc, ProtocolError) else Reason.BROKER, ())

    async def _abort(self, reason: Reason, culprits: Sequence[int], evidence: Sequence[int] = (), extra_signature: Sequence[int] = ()) -> None:
        """Tell the neighbours (retained) that the run stops, signed by this party."""
        if self.link.connected:
            round_ = FINAL_PHASE if reason == Reason.DISAGREE else self.abort_round()
            abort = make_abort(self.signer, reason, self.iteration, round_, self.node_id, culprits, evidence, extra_signature)
            await self.outbox.publish_retained(abort_message(self.node_id, self.neighbours, abort), ABORT_PUBLISH_S)

    def abort_round(self) -> int:
        """The protocol round an abort of this party names."""
        return 0
