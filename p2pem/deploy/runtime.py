"""One deployed node: the unchanged :class:`~p2pem.node.Node` driven over MQTT.

The simulator's message engine hands each :class:`~p2pem.messages.Message` straight to the
receiving Node; here the same messages are authenticated per receiver (and, for the initial
duals of pdmm-sp, sealed per edge) by :class:`~p2pem.deploy.codec.Codec`, published through
:class:`~p2pem.deploy.transports.mqtt.MqttLink` and checked on arrival.  Nothing else differs, so a
deployment reproduces ``p2pem simulate`` for the same seeds.

What arrives is accepted only if, in this order (each refusal is logged with its reason and
counted in the node's result, and the message is never folded in):

1. its topic is a topic of this run, and names the same sender (and receiver) as the header;
2. it is a well-formed envelope of this run that lists this node among its receivers, this
   node's tag verifies under the key of its edge with the claimed sender (derived from the
   pinned roster keys), and its sealed payload (if any) authenticates under the edge key
   (:meth:`Codec.decode`);
3. it comes from a neighbour;
4. :class:`~p2pem.deploy.codec.ReplayGuard` has not accepted it before (an identical copy, as MQTT
   QoS 1 may deliver, is silently dropped; a different message under the same identity is a
   replay or an equivocation and is refused);
5. an initial dual arrives encrypted, and the Node accepts it (a message for an EM iteration
   the node has already finished raises :class:`~p2pem.node.OutOfRound`).

Control messages (iteration -1, never seen by the Node), all authenticated like the rest:

``hello``   meta ``(epoch,)``, payload the roster digest and a digest of the public step
            parameters this node derived from the roster's graph (eigenvalues, so another
            host's linear algebra could differ in the last digits: nodes that disagree would
            converge to a wrong average together, so they refuse to start; after a dropout the
            survivors' parameters are bound into the tags instead).  Sent on start-up until every
            neighbour has answered (a node starts the protocol only once all its neighbours
            are subscribed, because a broker does not keep messages for absent clients), as a
            heartbeat when the node has published nothing for ``heartbeat`` seconds, and at
            once after a reconnection with a new epoch.  A neighbour's new epoch means it
            reconnected and may have missed messages: the node re-publishes its recent
            envelopes (byte-identical, so duplicates to the receiver's ReplayGuard).
``bye``     the node has finished; neighbours linger until they have heard every bye, so a
            broker restart in the last round can still be repaired.
``abort``   meta ``(reason, iteration, round, origin, *culprits)``: the run is stopped.  A node
            that gives up sends one, every node that receives one stops with an error naming
            the culprits and relays it, so all nodes exit promptly naming the same node.
            Aborts are published *retained*: the broker keeps the last one of each node and
            hands it to whoever subscribes later, so a neighbour that comes online after this
            node already stopped (e.g. after a start-up failure such as a roster mismatch)
            learns why at once instead of waiting out its start-up timeout.  A retained abort
            outlives the run on the broker, one more reason for a new run id per run.

Failures end in a :class:`~p2pem.errors.P2pemError` whose one-line message names this node,
the culprit node(s) and the EM iteration and protocol round (see :class:`Timeouts`).
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import logging
import math
import os
import signal
import struct
import sys
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from p2pem.deploy.codec import Codec, InconsistentMessage, InvalidMessage, NotAddressed, ReplayedMessage, ReplayGuard, TamperedMessage
from p2pem.deploy.crypto import CryptoError, Identity
from p2pem.deploy.config import NodeConfig, Roster, load_node_data
from p2pem.deploy.dropout import survivor_topology
from p2pem.errors import ConfigError, DataError, P2pemError, ProtocolError, TransportError
from p2pem.files import write_json
from p2pem.gmm import relative_error
from p2pem.messages import Message
from p2pem.node import MAX_AHEAD, EMFailed, Node, OutOfRound
from p2pem.protocols import NodeContext
from p2pem.protocols.base import ProtocolViolation, check_vector
from p2pem.deploy.transports.base import (
    ConnectionLost,
    Incoming,
    Link,
    LinkTimeout,
    parse_topic,
    subscriptions_for,
    topic_for,
)

log = logging.getLogger(__name__)

__all__ = [
    "AbortReason",
    "BrokerLost",
    "CannotContinue",
    "Disagreement",
    "DropoutMismatch",
    "InternalError",
    "Interrupted",
    "NeighbourSilent",
    "NeverOnline",
    "NodeRuntime",
    "PeerViolation",
    "RosterMismatch",
    "RunAborted",
    "Stalled",
    "Stop",
    "UnusableAverage",
    "run_node",
    "run_reported",
    "write_failure",
]

#: Iteration number of control messages (hello, final, bye, abort); the Node never sees them.
CONTROL = -1
HELLO, FINAL, BYE, ABORT, DROP = "hello", "final", "bye", "abort", "drop"
#: Largest relative difference between two neighbours' final models that counts as agreement
#: (consensus stops at a relative tolerance of 1e-10; EM amplifies it a little).
AGREEMENT_RTOL = 1e-6
_ABORT_DOMAIN = b"p2pem/abort/v1\x00"
_DROP_DOMAIN = b"p2pem/drop/v1\x00"
#: How many (iteration, round) groups of sent envelopes are kept for re-publishing.  A
#: neighbour is at most one round behind, so the last two suffice; one more for safety.
RECENT_GROUPS = 3



class AbortReason(enum.IntEnum):
    """Why a run stopped: the first meta field of an abort message."""

    SILENT = 1
    STALLED = 2
    OFFLINE = 3
    BROKER = 4
    PROTOCOL = 5
    INTERRUPTED = 6
    MISMATCH = 7
    VIOLATION = 8
    DISAGREE = 9
    INTERNAL = 10


SILENT, STALLED, OFFLINE, BROKER, PROTOCOL, INTERRUPTED, MISMATCH = (
    AbortReason.SILENT, AbortReason.STALLED, AbortReason.OFFLINE, AbortReason.BROKER,
    AbortReason.PROTOCOL, AbortReason.INTERRUPTED, AbortReason.MISMATCH,
)


class Stop:
    """Mixin of the failures a node tells its neighbours about: why (``reason``) and whom it blames.

    Parameters
    ----------
    text : str
        The one-line message.
    culprits : sequence of int
        Node ids blamed (empty: nobody in particular).
    """

    reason: AbortReason = AbortReason.PROTOCOL

    def __init__(self, text: str, culprits: Sequence[int] = ()) -> None:
        self.culprits = tuple(int(c) for c in culprits)
        super().__init__(text)  # type: ignore[call-arg]  # cooperative mixin: the exception class after Stop in the MRO takes the text


class NeighbourSilent(Stop, TransportError):
    """A neighbour this node waits for sent nothing (not even a heartbeat) for ``timeout`` seconds."""

    reason = AbortReason.SILENT


class NeverOnline(Stop, TransportError):
    """Neighbours did not come online within ``startup_timeout``."""

    reason = AbortReason.OFFLINE


class Stalled(Stop, TransportError):
    """Neighbours are alive but the run makes no progress."""

    reason = AbortReason.STALLED


class BrokerLost(Stop, TransportError):
    """The broker stayed unreachable for ``reconnect_timeout`` seconds."""

    reason = AbortReason.BROKER


class CannotContinue(Stop, TransportError):
    """A node dropped out and the run cannot go on without it (or this node was dropped)."""

    reason = AbortReason.SILENT


class DropoutMismatch(Stop, ConfigError):
    """A neighbour drops a node, but this node runs with ``on_dropout = "stop"``."""

    reason = AbortReason.SILENT


class RosterMismatch(Stop, ConfigError):
    """A neighbour runs with a different roster, or derived other public step parameters from it."""

    reason = AbortReason.MISMATCH


def public_parameters_digest(spec, topology) -> int:
    """SHA-256 (as an int) of ``spec.public_parameters(topology)``, every float in hex (exact)."""
    text = ",".join(float(v).hex() for v in spec.public_parameters(topology))
    return int.from_bytes(hashlib.sha256(text.encode("ascii")).digest(), "big")


class PeerViolation(Stop, ProtocolError):
    """An authenticated neighbour sent what no honest node sends; it is named as the culprit."""

    reason = AbortReason.VIOLATION

    def __init__(self, node_id: int, culprit: int, text: str) -> None:
        super().__init__(f"node {node_id}: {text}", (culprit,))


class Disagreement(Stop, ProtocolError):
    """Two neighbours finished with different models."""

    reason = AbortReason.DISAGREE

    def __init__(self, node_id: int, other: int, text: str) -> None:
        super().__init__(f"node {node_id}: {text}", (node_id, other))


class UnusableAverage(Stop, ProtocolError):
    """The network average of an aggregation is unusable (a member sent absurd but valid-looking values)."""


class InternalError(Stop, P2pemError):
    """A bug: an unexpected exception inside the node (reported, never a traceback)."""

    reason = AbortReason.INTERNAL
    exit_code = 70


class RunAborted(TransportError):
    """Another node stopped the run: its signed abort, to relay unchanged.

    Parameters
    ----------
    text : str
    meta : tuple of int
        ``(reason, iteration, round, origin, *culprits)`` as the origin signed it.
    signature : tuple of int
        The origin's Ed25519 signature (two 256-bit integers).
    """

    def __init__(self, text: str, meta: tuple[int, ...], signature: tuple[int, ...]) -> None:
        super().__init__(text)
        self.meta = meta
        self.signature = signature


class Interrupted(P2pemError):
    """The node was stopped by a signal (Ctrl-C, SIGTERM from the launcher) or lost its launcher."""

    def __init__(self, text: str, exit_code: int = 130) -> None:
        super().__init__(text)
        self.exit_code = exit_code


def _nodes(ids: Sequence[int]) -> str:
    ids = sorted(set(ids))
    return ("node " if len(ids) == 1 else "nodes ") + ", ".join(str(i) for i in ids)


def describe_abort(meta: Sequence[int]) -> str:
    """One line for the meta fields ``(reason, iteration, round, origin, *culprits)`` of an abort."""
    if len(meta) < 4:
        return "stopped (no reason given)"
    reason, it, rnd, origin, *culprits = (int(v) for v in meta)
    at = f"EM iteration {it}, protocol round {rnd}"
    if reason == SILENT:
        return f"{_nodes(culprits)} fell silent in {at} (detected by node {origin})"
    if reason == STALLED:
        return f"node {origin} made no progress in {at} waiting for {_nodes(culprits)}"
    if reason == OFFLINE:
        return f"{_nodes(culprits)} never came online (noticed by node {origin})"
    if reason == BROKER:
        return f"node {origin} lost the MQTT broker in {at}"
    if reason == INTERRUPTED:
        return f"node {origin} was interrupted in {at}"
    if reason == MISMATCH:
        verb = "runs" if len(set(culprits)) == 1 else "run"
        return f"{_nodes(culprits)} {verb} with a roster (or step parameters derived from it) that differs from node {origin}'s"
    if reason == AbortReason.VIOLATION:
        return f"node {origin} caught {_nodes(culprits)} violating the protocol in {at}"
    if reason == AbortReason.DISAGREE:
        return f"{_nodes(culprits)} finished with different models (found by node {origin})"
    if reason == AbortReason.INTERNAL:
        return f"node {origin} hit an internal error in {at}"
    blame = f" (message from {_nodes(culprits)})" if culprits else ""
    return f"node {origin} hit a protocol error in {at}{blame}"


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
    ) -> None:
        self.config = config
        self.launch = launch
        self.progress = progress
        self.parent_pid = parent_pid
        self.roster = roster = Roster.load(config.roster)
        self.node_id = i = config.node_id
        if not 0 <= i < roster.n_nodes:
            raise ConfigError(f"{config.path}: node_id {i} is not in the roster ({roster.n_nodes} nodes: 0..{roster.n_nodes - 1})")
        self.run_id = roster.run_id
        self.timeouts = config.timeouts
        spec = roster.protocol_spec()
        topology = roster.topology()
        settings = roster.em_settings()
        self.identity = identity = Identity.load(config.key_file)
        try:
            self.codec = Codec(self.run_id, roster.public_keys(), identity=identity, node_id=i, launch=launch)
        except ConfigError as exc:
            raise ConfigError(f"{config.path}: {exc}") from None
        X = load_node_data(config.data, config.columns)
        n_features = roster.n_features
        if n_features is None and settings.init is not None:
            n_features = int(settings.init.means.shape[1])
        if n_features is not None and X.shape[1] != n_features:
            raise DataError(
                f"node {i}: {config.data} has {X.shape[1]} columns, but the roster's model has {n_features} features "
                f"(every node's data must have the same columns)"
            )
        self.n_rows = int(X.shape[0])
        if config.seed is not None:
            log.warning(
                "node %d: INSECURE REPRODUCIBLE SEED: protocol noise drawn from a fixed seed, so the results "
                "are reproducible but the subspace perturbation hides nothing from whoever knows the seed",
                i,
            )
        self.node = Node.for_em(NodeContext(i, topology, config.protocol_rng()), X, settings, spec)
        self.node.validate = True
        self.max_iter = settings.max_iter
        self.neighbours: tuple[int, ...] = topology.neighbours[i]
        self._nbr_set = frozenset(self.neighbours)
        self.guard = ReplayGuard()
        if link is None:
            from p2pem.deploy.transports.mqtt import MqttLink

            broker = config.broker
            link = MqttLink(
                broker.host,
                broker.port,
                subscriptions=subscriptions_for(self.run_id, i, self.neighbours),
                username=broker.username,
                password=broker.password(),
                identifier=f"{self.run_id}-node{i}",
                tls_context=broker.tls_context(),
                timeout=min(10.0, max(2.0, self.timeouts.timeout)),
                keepalive=max(5, int(self.timeouts.timeout)),
                subscribe_qos=0,  # see MqttLink: with clean sessions QoS 1 adds nothing on this leg
            )
        self.link: Link = link
        self._digest = int.from_bytes(roster.digest(), "big")
        self._spec = spec
        self._params_digest = public_parameters_digest(spec, topology)
        self._tick = min(0.2, self.timeouts.heartbeat_s / 2)
        # state
        self.started = False
        self.status = "created"
        self.error: P2pemError | None = None
        self.epoch = 0
        self._hello_seq = 0
        self._hello_due = False
        self._republish_due = False
        self._start_due = False
        self._heard_epoch: dict[int, int] = {}
        self._hello_seen: dict[int, int] = {}
        self._last_heard: dict[int, float] = {}
        self._bye_from: set[int] = set()
        self.on_dropout = config.on_dropout
        self._dropped: dict[int, dict[str, int]] = {}
        # after a drop the Node runs on the survivors' graph, relabelled 0..n'-1
        self._global: list[int] | None = None
        self._local: dict[int, int] | None = None
        self._finals: dict[int, tuple[int, np.ndarray]] = {}
        self._final: np.ndarray | None = None
        self._agreed: set[int] = set()
        self._buffer: list[Message] = []
        self._seen: dict[tuple[int, int], set[int]] = defaultdict(set)
        self._recent: list[tuple[tuple[int, int], str, bytes]] = []
        self._recent_keys: deque[tuple[int, int]] = deque(maxlen=RECENT_GROUPS)
        self._last_broadcast = -np.inf
        self._inflight: dict[asyncio.Task[None], int] = {}
        self._publish_error: BaseException | None = None
        self._last_progress = 0.0
        self._next_check = 0.0
        self._reported_iter = -1
        self.counters: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self.timings: dict[str, float] = {}
        #: CPU seconds spent checking messages of the protocol and handling control messages
        #: (their checks, the abort signatures, the final comparison): the price of this
        #: runtime's defences, printed by ``sim/bench_deploy.py``.
        self.costs: dict[str, float] = {"validate_s": 0.0, "control_s": 0.0}
        self._t0 = time.monotonic()

    # ------------------------------------------------------------------ the run

    def where(self) -> str:
        """``EM iteration k, protocol round r`` (what the node is waiting for)."""
        if self.node.done:
            if self._final is not None and self.status != "finished":
                return f"the final agreement after EM iteration {self.node.iteration}"
            return f"EM iteration {self.node.iteration} (finished)"
        return f"EM iteration {self.node.iteration}, protocol round {self._round()}"

    def _round(self) -> int:
        return int(getattr(self.node.agg, "round", 0) or 0)

    async def run(self) -> dict[str, Any]:
        """Connect, run the protocol to the end, linger until the neighbours are done.

        Returns
        -------
        dict
            The node's report (see :meth:`report`).

        Raises
        ------
        NeighbourSilent, RunAborted, BrokerLost, TransportError, ProtocolError, RosterMismatch
            With a one-line message naming this node, the culprit and the round.
        """
        self._t0 = time.monotonic()
        self.timings["started_unix"] = time.time()
        try:
            await self._connect()
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
            await self._try_abort(INTERRUPTED, ())
            raise
        except Exception as exc:  # noqa: BLE001 - no exception escapes a node: it is reported and told
            err = exc if isinstance(exc, P2pemError) else InternalError(
                f"node {self.node_id}: internal error in {self.where()}: {type(exc).__name__}: {exc}"
            )
            if not isinstance(exc, P2pemError):
                log.debug("node %d: internal error", self.node_id, exc_info=exc)  # the traceback only with -vv
            self.status = "failed"
            self.error = err
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

    def _elapsed(self) -> float:
        return time.monotonic() - self._t0

    async def _connect(self) -> None:
        deadline = time.monotonic() + self.timeouts.startup_timeout
        last: TransportError | None = None
        while True:
            try:
                await self.link.connect()
                break
            except TransportError as exc:
                last = exc
                text = str(exc).lower()
                if "authori" in text or "user name or password" in text:
                    raise TransportError(
                        f"node {self.node_id}: the MQTT broker at {self.link.address} refused user "
                        f"{self.config.broker.username!r}: {exc}"
                    ) from None
                if time.monotonic() >= deadline:
                    raise TransportError(
                        f"node {self.node_id}: cannot reach the MQTT broker at {self.link.address} "
                        f"within {self.timeouts.startup_timeout:g} s: {last}"
                    ) from None
                await asyncio.sleep(0.25)
        self.timings["connected_s"] = self._elapsed()
        log.info("node %d connected to %s, waiting for %s", self.node_id, self.link.address, _nodes(self.neighbours))
        await self._send_hello()

    async def _step(self) -> None:
        """Check the timers, then wait (briefly) for one message and handle it."""
        if self._publish_error is not None:
            await self._check_publishing()
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + self._tick
            await self._timers(now)
        try:
            # A queued message needs no timer; arming one per message costs measurable CPU.
            incoming = await self.link.receive(timeout=math.inf if self.link.pending else self._tick)
        except LinkTimeout:
            return
        except ConnectionLost as exc:
            await self._recover(exc)
            return
        await self._handle(incoming)

    async def _timers(self, now: float) -> None:
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            raise Interrupted(f"node {self.node_id}: the launcher (pid {self.parent_pid}) exited; stopping in {self.where()}", 128 + signal.SIGTERM)
        # Start-up needs no fast periodic hellos: a node answers every neighbour's first hello
        # at once (_hello_due), and a hello is only sent after the node's own subscriptions
        # are acknowledged, so of any two neighbours the later one is always heard.
        if self._hello_due or now - self._last_broadcast >= self.timeouts.heartbeat_s:
            await self._send_hello()
        if self._republish_due:
            self._republish_due = False
            await self._republish()
        if not self.started:
            missing = [j for j in self.neighbours if j not in self._heard_epoch]
            if not missing:
                await self._start()
            elif now - self._t0 > self.timeouts.startup_timeout:
                raise NeverOnline(
                    f"node {self.node_id}: {_nodes(missing)} never came online "
                    f"(no hello within {self.timeouts.startup_timeout:g} s of start-up)",
                    missing,
                )
            return
        if self.node.done and (self._final is None or self.status == "finished"):
            return
        missing = self.missing()
        silent = [j for j in missing if now - self._last_heard.get(j, now) > self.timeouts.timeout]
        if silent and self.on_dropout == "continue" and not self.node.done:
            for j in silent:
                log.warning("node %d: neighbour node %d fell silent in %s; dropping it (on_dropout = continue)", self.node_id, j, self.where())
                await self._drop(j, self.node.iteration, self.node_id, None)
            return
        if silent:
            quiet = max(now - self._last_heard[j] for j in silent)
            raise NeighbourSilent(
                f"node {self.node_id}: neighbour {_nodes(silent)} fell silent in {self.where()}: "
                f"nothing received for {quiet:.1f} s (timeout {self.timeouts.timeout:g} s)",
                silent,
            )
        # Until the first aggregation has finished, the network may still be waiting for a
        # late node several hops away (alive neighbours, no progress); that node's
        # neighbours enforce the start-up timeout.  pdmm-sp cannot finish an aggregation
        # before every node took part, so afterwards everyone is known to be running.
        stall = self.timeouts.stall if self.node.rounds else self.timeouts.stall + self.timeouts.startup_timeout
        if now - self._last_progress > stall:
            raise Stalled(
                f"node {self.node_id}: no progress for {now - self._last_progress:.1f} s in {self.where()}, "
                f"waiting for {_nodes(missing) if missing else 'nothing?'} (alive but stuck)",
                missing,
            )

    def missing(self) -> list[int]:
        """Neighbours whose message for the current protocol round (or final model) has not arrived."""
        if not self.started:
            return []
        if self.node.done:
            return [j for j in self.neighbours if j not in self._agreed] if self._final is not None else []
        got = self._seen.get((self.node.iteration, self._round()), set())
        return [j for j in self.neighbours if j not in got]

    async def _start(self) -> None:
        self.started = True
        now = time.monotonic()
        self.timings["online_s"] = self._elapsed()
        # CPU spent on imports, keys, data and start-up, apart from the consensus phase's
        self.timings["online_cpu_s"] = time.process_time()
        self._last_progress = now
        for j in self.neighbours:
            self._last_heard[j] = max(self._last_heard.get(j, now), now)
        log.info("node %d: every neighbour is online, starting the protocol", self.node_id)
        if self.progress is not None:
            self.progress("online", 0, self.max_iter)
        await self._send(self.node.start())
        buffered, self._buffer = self._buffer, []
        for msg in buffered:
            await self._deliver(msg)
        self._after_progress()

    async def _agree(self) -> None:
        """Show every neighbour this node's final model and check theirs (no split outcome).

        Each node sends its fitted parameters (public output) to its neighbours and waits
        until each neighbour's model arrived and agrees within :data:`AGREEMENT_RTOL`
        (relative, infinity norm).  The graph is connected, so if every node passes, all
        honest nodes hold the same model; a node that finished differently (e.g. misled by
        a forged stop round) is found by a neighbour, and the run aborts everywhere naming
        the two.  Neighbours still computing keep the heartbeats going; the usual silence
        and stall timeouts apply.
        """
        self._final = self.node.task.summary()
        await self._send([Message(self.node_id, self.neighbours, CONTROL, 0, FINAL, self._final.copy(), False, (self.node.em.n_iter,))])
        for j in list(self._finals):
            self._compare_final(j)
        self._last_progress = time.monotonic()
        while not self._nbr_set <= self._agreed:
            await self._step()

    def _compare_final(self, j: int) -> None:
        n_iter, model = self._finals.pop(j)
        mine = self._final
        assert mine is not None
        if n_iter != self.node.em.n_iter:
            raise Disagreement(self.node_id, j, f"neighbour node {j} finished after {n_iter} EM iterations, this node after {self.node.em.n_iter}")
        diff = relative_error(model, mine)
        if not diff <= AGREEMENT_RTOL:
            raise Disagreement(self.node_id, j, f"neighbour node {j} finished with a different model (relative difference {diff:.3g} > {AGREEMENT_RTOL:g})")
        self._agreed.add(j)

    async def _linger(self) -> None:
        """Say bye; stay (answering hellos, re-publishing) until every neighbour said bye."""
        await self._send([Message(self.node_id, self.neighbours, CONTROL, 0, BYE, (), False)])
        deadline = time.monotonic() + self.timeouts.timeout
        try:
            while not self._nbr_set <= self._bye_from and time.monotonic() < deadline:
                await self._step()
        except RunAborted as exc:
            log.warning("node %d: finished and agreed with every neighbour, but afterwards %s", self.node_id, exc)
            return
        except P2pemError as exc:
            log.warning("node %d: finished and agreed with every neighbour; then %s", self.node_id, exc)
            return
        await self._drain(min(5.0, self.timeouts.timeout))
        missing = sorted(self._nbr_set - self._bye_from)
        if missing:
            log.warning("node %d: finished, but %s did not say bye within %g s", self.node_id, _nodes(missing), self.timeouts.timeout)

    # ------------------------------------------------------------------ receiving

    async def _handle(self, incoming: Incoming) -> None:
        if not incoming.payload:
            # What a broker delivers when someone clears a retained message (a zero-byte
            # retained publish); only the topic's owner or an admin can, and it carries nothing.
            self.counters["empty"] += 1
            return
        self.counters["received"] += 1
        try:
            t_sender, t_receiver = parse_topic(self.run_id, incoming.topic)
        except TransportError as exc:
            self._reject("BadTopic", str(exc))
            return
        try:
            msg = self.codec.decode(incoming.payload)
        except NotAddressed as exc:
            if t_receiver is None:  # a multicast on .../all for some of the sender's neighbours
                self.counters["not_addressed"] += 1
                return
            self._reject("NotAddressed", str(exc))
            return
        except (TamperedMessage, InconsistentMessage) as exc:
            # The tag verified, so the claimed sender wrote this (the tag covers every byte).
            sender = self.codec.parse(incoming.payload).sender
            raise PeerViolation(self.node_id, sender, f"in {self.where()}: {exc}") from None
        except InvalidMessage as exc:
            # No valid tag: anyone on the path (the broker, an outsider) may have made it.
            self._reject(type(exc).__name__, str(exc))
            return
        if msg.sender != t_sender or (t_receiver is not None and tuple(msg.receivers) != (t_receiver,)):
            self._reject("TopicMismatch", f"message authenticated as from node {msg.sender} arrived on topic {incoming.topic!r}")
            return
        if self.node_id not in msg.receivers:
            self.counters["not_addressed"] += 1
            return
        if msg.sender not in self._nbr_set:
            self._reject("NotNeighbour", f"message from node {msg.sender}, which is not a neighbour")
            return
        try:
            fresh = self.guard.admit(msg, incoming.payload)
        except ReplayedMessage as exc:
            # Only the authenticated sender can have written both: it equivocates.
            raise PeerViolation(self.node_id, msg.sender, f"in {self.where()}: {exc}") from None
        if not fresh:
            self.counters["duplicates"] += 1
            if 0 <= msg.iteration < self.node.iteration:
                log.info("node %d: ignored a replayed or late duplicate %s message from node %d (EM iteration %d, round %d)", self.node_id, msg.kind, msg.sender, msg.iteration, msg.round)
                return
            log.debug("node %d: ignored a duplicate %s message from node %d (iteration %d, round %d)", self.node_id, msg.kind, msg.sender, msg.iteration, msg.round)
            return
        if msg.iteration == CONTROL:
            t0 = time.thread_time()
            try:
                await self._control(msg)
            finally:
                self.costs["control_s"] += time.thread_time() - t0
            if self._start_due:
                self._start_due = False
                await self._start()
            return
        if msg.iteration < 0:
            raise PeerViolation(self.node_id, msg.sender, f"in {self.where()}: {msg.kind} message from node {msg.sender} for EM iteration {msg.iteration}")
        if not self.started:
            if msg.iteration > 1:
                self._reject("OutOfRound", f"{msg.kind} message from node {msg.sender} for EM iteration {msg.iteration} before start")
                return
            if sum(m.sender == msg.sender for m in self._buffer) >= MAX_AHEAD:
                raise PeerViolation(self.node_id, msg.sender, f"node {msg.sender} sent more than {MAX_AHEAD} messages before every neighbour was online")
            self._buffer.append(msg)
            return
        await self._deliver(msg)

    async def _deliver(self, msg: Message) -> None:
        local = msg
        if self._local is not None:
            ids = self._local
            if msg.sender not in ids or any(r not in ids for r in msg.receivers):
                raise PeerViolation(self.node_id, msg.sender, f"in {self.where()}: {msg.kind} message from node {msg.sender} addressed to a dropped node")
            local = Message(ids[msg.sender], tuple(ids[r] for r in msg.receivers), msg.iteration, msg.round, msg.kind, msg.payload, msg.encrypted, msg.meta)
        try:
            t0 = time.thread_time()
            self.node.check(local)
            self.costs["validate_s"] += time.thread_time() - t0
            out = self.node.receive(local)
        except OutOfRound as exc:
            self._reject("OutOfRound", str(exc))
            return
        except ProtocolViolation as exc:
            # Possibly about a queued message of another sender, checked as its aggregation began.
            if self._global is not None:
                exc = ProtocolViolation(self._global[exc.sender], exc.iteration, exc.round, exc.check, exc.detail)
            raise PeerViolation(self.node_id, exc.sender, f"in {self.where()}: {exc}") from None
        except EMFailed as exc:
            raise UnusableAverage(f"{exc} (a member sent values that are finite but absurd)") from None
        except ProtocolError as exc:
            # An authenticated, fresh, well-formed message the protocol state machine cannot
            # take (e.g. two rounds ahead): honest peers never send one.
            raise PeerViolation(self.node_id, msg.sender, f"in {self.where()}, after a {msg.kind} message from node {msg.sender}: {exc}") from None
        now = time.monotonic()
        self._last_heard[msg.sender] = now
        self._seen[(msg.iteration, msg.round)].add(msg.sender)
        self._last_progress = now
        if out:
            await self._send(out)
        self._after_progress()

    def _after_progress(self) -> None:
        n_iter = self.node.em.n_iter
        if n_iter != self._reported_iter:
            self._reported_iter = n_iter
            it = self.node.iteration
            # Keys of iterations before it - 1 cannot come back legitimately; a replay of one
            # is refused by the Node as out of round.  Control keys are guarded by sequence
            # numbers instead (see _control).
            self.guard.forget_before(it - 1)
            for key in [k for k in self._seen if k[0] < it - 1]:
                del self._seen[key]
            if self.progress is not None and n_iter > 0:
                self.progress("progress", n_iter, self.max_iter)

    def _violation(self, msg: Message, check: str, detail: str) -> PeerViolation:
        v = ProtocolViolation(msg.sender, msg.iteration, msg.round, check, f"{msg.kind} message: {detail}")
        return PeerViolation(self.node_id, msg.sender, f"in {self.where()}: {v}")

    async def _control(self, msg: Message) -> None:
        """Hello, final, bye and abort: each checked field by field before it counts."""
        j = msg.sender
        payload = msg.payload
        if msg.kind == HELLO:
            if not (isinstance(payload, tuple) and len(payload) == 2) or len(msg.meta) != 1 or msg.meta[0] < 0 or msg.round < 1:
                raise self._violation(msg, "hello", f"payload of {_describe(payload)}, meta {msg.meta}, sequence {msg.round}")
            if not self._plausible_receivers(j, msg.receivers):
                raise self._violation(msg, "hello", f"receivers {msg.receivers} are not the sender's neighbours")
            if payload[0] != self._digest:
                raise RosterMismatch(
                    f"node {self.node_id}: neighbour node {j} runs with a different roster "
                    f"(every node needs the same roster.toml)",
                    (j,),
                )
            if payload[1] != self._params_digest:
                raise RosterMismatch(
                    f"node {self.node_id}: neighbour node {j} derived other public step parameters from the same "
                    f"roster (the graph's eigenvalues differ in the last digits between its host's and this host's "
                    f"linear-algebra libraries); run every node with the same NumPy build, or give pdmm-sp's c and "
                    f"momentum as numbers in the scenario",
                    (j,),
                )
            if msg.round <= self._hello_seen.get(j, -1):
                self.counters["stale_hellos"] += 1
                return
            self._hello_seen[j] = msg.round
            self._last_heard[j] = time.monotonic()
            epoch, previous = int(msg.meta[0]), self._heard_epoch.get(j)
            if previous is None:
                self._heard_epoch[j] = epoch
                self._hello_due = True  # let it hear us soon
                if epoch > 0 and self.started:
                    self._republish_due = True
                if not self.started and all(k in self._heard_epoch for k in self.neighbours):
                    self._start_due = True  # started by _handle, outside the control messages' CPU account
            elif epoch > previous:
                self._heard_epoch[j] = epoch
                log.info("node %d: node %d reconnected (epoch %d); re-publishing recent messages", self.node_id, j, epoch)
                self._republish_due = True
                self._hello_due = True
        elif msg.kind == FINAL:
            if j in self._agreed or j in self._finals:
                return
            if msg.round != 0 or len(msg.meta) != 1 or not self._plausible_receivers(j, msg.receivers):
                raise self._violation(msg, "final", f"round {msg.round}, meta {msg.meta}, receivers {msg.receivers}")
            size = self.node.task.summary_size()
            try:
                check_vector(msg, size)
            except ProtocolViolation as exc:
                raise PeerViolation(self.node_id, j, f"in {self.where()}: {exc}") from None
            self._last_heard[j] = time.monotonic()
            self._finals[j] = (int(msg.meta[0]), np.asarray(payload))
            if self._final is not None:
                self._compare_final(j)
                self._last_progress = time.monotonic()
        elif msg.kind == BYE:
            if not isinstance(payload, tuple) or payload or msg.meta != () or msg.round != 0:
                raise self._violation(msg, "bye", f"payload of {_describe(payload)}, meta {msg.meta}")
            self._bye_from.add(j)
        elif msg.kind == ABORT:
            meta, signature = self._verify_abort(msg)
            if meta[3] == self.node_id:
                return  # our own abort, relayed back
            raise RunAborted(f"node {self.node_id}: run stopped in {self.where()}: {describe_abort(meta)}; relayed by node {j}", meta, signature)
        elif msg.kind == DROP:
            meta, signature = self._verify_drop(msg)
            k, it, origin = meta
            if self.on_dropout != "continue":
                raise DropoutMismatch(
                    f"node {self.node_id}: node {origin} drops node {k} (on_dropout = 'continue'), "
                    f"but this node runs with on_dropout = 'stop' (every node needs the same setting)",
                    (k,),
                )
            await self._drop(k, it, origin, signature)
        else:
            raise self._violation(msg, "kind", "unknown control message")

    def _verify_abort(self, msg: Message) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Check an abort's fields and its origin's Ed25519 signature; return (meta, signature)."""
        meta, payload, n = tuple(msg.meta), msg.payload, self.roster.n_nodes
        if len(meta) < 4 or len(meta) > 4 + n or meta[0] not in set(AbortReason.__members__.values()):
            raise self._violation(msg, "abort", f"meta {meta[:8]} is not (reason, iteration, round, origin, culprits...)")
        if not all(0 <= v < n for v in meta[3:]):
            raise self._violation(msg, "abort", f"origin or culprit outside 0..{n - 1}")
        if not (isinstance(payload, tuple) and len(payload) == 2):
            raise self._violation(msg, "abort", f"payload of {_describe(payload)} is not a signature")
        signature = b"".join(int(v).to_bytes(32, "big") for v in payload)
        try:
            self.roster.keys[meta[3]].verify(self._abort_statement(meta), signature)
        except CryptoError:
            raise self._violation(msg, "abort", f"abort in the name of node {meta[3]} is not signed by node {meta[3]} (forged)") from None
        return meta, tuple(int(v) for v in payload)

    def _abort_statement(self, meta: Sequence[int], domain: bytes = _ABORT_DOMAIN) -> bytes:
        run = self.run_id.encode("utf-8")
        return b"".join(
            [domain, bytes([len(run)]), run, bytes([len(self.launch)]), self.launch, struct.pack(f">{len(meta)}q", *meta)]
        )

    def _verify_drop(self, msg: Message) -> tuple[tuple[int, int, int], tuple[int, ...]]:
        """Check a drop ``(node, EM iteration, origin)`` and its origin's signature."""
        meta, payload, n = tuple(msg.meta), msg.payload, self.roster.n_nodes
        if len(meta) != 3 or not (0 <= meta[0] < n and 0 <= meta[2] < n and 0 <= meta[1] <= 2**31) or msg.round != meta[0]:
            raise self._violation(msg, "drop", f"meta {meta[:8]} is not (node, iteration, origin)")
        if meta[2] not in self.roster.neighbours[meta[0]]:
            raise self._violation(msg, "drop", f"node {meta[2]} cannot see node {meta[0]} fall silent: they are not neighbours")
        if not (isinstance(payload, tuple) and len(payload) == 2):
            raise self._violation(msg, "drop", f"payload of {_describe(payload)} is not a signature")
        signature = b"".join(int(v).to_bytes(32, "big") for v in payload)
        try:
            self.roster.keys[meta[2]].verify(self._abort_statement(meta, _DROP_DOMAIN), signature)
        except CryptoError:
            raise self._violation(msg, "drop", f"drop in the name of node {meta[2]} is not signed by node {meta[2]} (forged)") from None
        return (meta[0], meta[1], meta[2]), tuple(int(v) for v in payload)

    def _plausible_receivers(self, j: int, receivers: tuple[int, ...]) -> bool:
        """Neighbour j broadcasts to its roster neighbours, less those it dropped (it may not
        have heard of a drop this node knows yet)."""
        full = self.roster.neighbours[j]
        return list(receivers) == sorted(set(receivers)) and set(receivers) <= set(full) and all(
            k in receivers for k in full if k not in self._dropped
        )

    async def _drop(self, k: int, it: int, origin: int, signature: tuple[int, ...] | None) -> None:
        """Go on without node ``k``: tell the neighbours, re-run EM iteration ``it`` among the survivors.

        The drop ``(k, it, origin)`` is signed by the node that saw ``k`` fall silent and
        flooded unchanged, so every survivor drops the same node at the same iteration.  Each
        survivor checks that the graph without the dropped nodes is connected and has a
        cycle, relays the drop, binds the dropped set into the tags of protocol messages
        (messages of the abandoned attempt then no longer authenticate) and restarts the
        aggregation of iteration ``it`` over the survivors' graph.
        """
        if k in self._dropped:
            return
        me = self.node_id
        if k == me:
            raise CannotContinue(f"node {me}: node {origin} declared this node silent in EM iteration {it} and the others go on without it", (me,))
        if not self.started or self.node.done or self.node.iteration != it:
            raise CannotContinue(f"node {me}: cannot drop node {k} in EM iteration {it} (noticed by node {origin}): this node is in {self.where()}", (k,))
        dropped = {*self._dropped, k}
        try:
            survivors, topology = survivor_topology(self.roster.neighbours, dropped)
        except ProtocolError as exc:
            raise CannotContinue(f"node {me}: node {k} fell silent in {self.where()} (noticed by node {origin}) and the run cannot go on: {exc}", (k,)) from None
        meta = (k, it, origin)
        if signature is None:
            raw = self.identity.sign(self._abort_statement(meta, _DROP_DOMAIN))
            signature = (int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
        self._dropped[k] = {"node": k, "iteration": it, "detected_by": origin, "round": self._round()}
        self.neighbours = tuple(j for j in self.neighbours if j != k)
        self._nbr_set = frozenset(self.neighbours)
        # tell the neighbours before anything of the new attempt goes out (the broker keeps each
        # client's order), so none of them receives a message it cannot yet authenticate
        await self._send([Message(me, self.neighbours, CONTROL, k, DROP, signature, False, meta)])
        # the survivors' step parameters are bound too: one that derived other ones (another
        # host's eigenvalue rounding) cannot authenticate to its neighbours and the run stops,
        # where it would otherwise converge with them to a slightly wrong average
        digest = public_parameters_digest(self._spec, topology).to_bytes(32, "big")
        self.codec.set_generation(b"".join(struct.pack(">i", j) for j in sorted(dropped)) + digest)
        self.guard.forget_from(it)
        for key in [key for key in self._seen if key[0] >= it]:
            del self._seen[key]
        self._recent.clear()
        self._recent_keys.clear()
        self._global, self._local = survivors, {g: i for i, g in enumerate(survivors)}
        log.warning(
            "node %d: dropped node %d (noticed by node %d); re-running EM iteration %d over %d nodes", me, k, origin, it, len(survivors)
        )
        out = self.node.restart(NodeContext(self._local[me], topology, self.node.ctx.rng))
        now = time.monotonic()
        self._last_progress = now
        for j in self.neighbours:
            self._last_heard[j] = max(self._last_heard.get(j, now), now)
        await self._send(out)
        self._after_progress()

    def _reject(self, reason: str, detail: str) -> None:
        self.rejected[reason] += 1
        log.warning("node %d: rejected a message (%s): %s", self.node_id, reason, detail)

    # ------------------------------------------------------------------ sending

    async def _send(self, msgs: Sequence[Message]) -> None:
        items = []
        now = time.monotonic()
        g = self._global
        for m in msgs:
            if g is not None and m.iteration >= 0:
                m = Message(g[m.sender], tuple(g[r] for r in m.receivers), m.iteration, m.round, m.kind, m.payload, m.encrypted, m.meta)
            if m.kind == "dual-init" and not m.encrypted:
                raise ProtocolError(f"node {self.node_id}: refusing to publish an initial dual in clear")
            envelope = self.codec.encode(m)
            topic = topic_for(self.run_id, m)
            items.append((topic, envelope))
            if m.iteration >= 0:
                self._remember((m.iteration, m.round), topic, envelope)
            else:
                self.counters["control_sent"] += 1
            if len(m.receivers) == len(self.neighbours) and len(m.receivers) > 1 or len(self.neighbours) == 1:
                self._last_broadcast = now
        await self._publish(items)

    def _remember(self, key: tuple[int, int], topic: str, envelope: bytes) -> None:
        if not self._recent_keys or self._recent_keys[-1] != key:
            self._recent_keys.append(key)
            keep = set(self._recent_keys)
            self._recent = [r for r in self._recent if r[0] in keep]
        self._recent.append((key, topic, envelope))

    async def _publish(self, items: list[tuple[str, bytes]]) -> None:
        """Hand envelopes to the link without waiting for the broker's acknowledgements.

        Waiting for each PUBACK would put a broker round trip on the critical path of every
        consensus round.  The link publishes in call order; a failure is picked up by the
        next :meth:`_step`, which reconnects and re-publishes the recent envelopes (this one
        included, it was remembered before publishing).
        """
        if self._publish_error is not None:
            return  # the link is broken; _step will recover and re-publish
        self.counters["published"] += len(items)
        self.counters["wire_bytes"] += sum(len(e) for _, e in items)
        loop = asyncio.get_running_loop()
        for topic, envelope in items:
            task = loop.create_task(self.link.publish(topic, envelope), name=f"publish {topic}")
            self._inflight[task] = self.epoch
            task.add_done_callback(self._published)

    def _published(self, task: asyncio.Task[None]) -> None:
        epoch = self._inflight.pop(task, self.epoch)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and epoch == self.epoch and self._publish_error is None:
            self._publish_error = exc

    async def _check_publishing(self) -> None:
        exc, self._publish_error = self._publish_error, None
        if exc is None:
            return
        if isinstance(exc, (ConnectionLost, LinkTimeout)):
            await self._recover(exc)
            return
        raise exc

    async def _drain(self, timeout: float) -> None:
        """Wait (bounded) until every publish handed to the link was acknowledged."""
        pending = [task for task, epoch in self._inflight.items() if epoch == self.epoch]
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    async def _publish_raw(self, items: list[tuple[str, bytes]]) -> None:
        if not items:
            return
        self.counters["published"] += len(items)
        self.counters["wire_bytes"] += sum(len(e) for _, e in items)
        if len(items) == 1:
            await self.link.publish(*items[0])
            return
        results = await asyncio.gather(*(self.link.publish(t, e) for t, e in items), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r

    def _hello(self) -> Message:
        self._hello_seq += 1
        return Message(self.node_id, self.neighbours, CONTROL, self._hello_seq, HELLO, (self._digest, self._params_digest), False, (self.epoch,))

    async def _send_hello(self) -> None:
        self._hello_due = False
        await self._send([self._hello()])

    async def _republish(self) -> None:
        if self._recent:
            self.counters["republished"] += len(self._recent)
            await self._publish([(t, e) for _, t, e in self._recent])

    async def _recover(self, cause: TransportError) -> None:
        """Reconnect (re-subscribing), announce a new epoch and re-publish recent envelopes."""
        self.counters["connection_losses"] += 1
        log.warning("node %d: %s; reconnecting", self.node_id, cause)
        deadline = time.monotonic() + self.timeouts.reconnect_s
        while True:
            try:
                await self.link.reconnect(attempts=1)
                self.epoch += 1
                now = time.monotonic()
                for j in self.neighbours:
                    self._last_heard[j] = max(self._last_heard.get(j, now), now)
                self._last_progress = max(self._last_progress, now)
                hello = self._hello()
                items = [(topic_for(self.run_id, hello), self.codec.encode(hello))]
                items += [(t, e) for _, t, e in self._recent]
                self.counters["republished"] += len(self._recent)
                self.counters["control_sent"] += 1
                await self._publish_raw(items)
            except TransportError as exc:
                if time.monotonic() >= deadline:
                    raise BrokerLost(
                        f"node {self.node_id}: lost the MQTT broker at {self.link.address} in {self.where()} "
                        f"and could not reconnect within {self.timeouts.reconnect_timeout:g} s ({exc})"
                    ) from None
                await asyncio.sleep(0.2)
                continue
            self._publish_error = None
            for task, epoch in list(self._inflight.items()):
                if epoch < self.epoch:  # died with the old connection; re-published above
                    task.cancel()
            self.counters["reconnects"] += 1
            log.warning("node %d: reconnected to %s (epoch %d), re-published %d recent messages", self.node_id, self.link.address, self.epoch, len(self._recent))
            return

    async def _abort_for(self, exc: BaseException) -> None:
        if isinstance(exc, RunAborted):  # relay what we were told, signed by its origin
            await self._try_send_abort(exc.meta, exc.signature)
        elif isinstance(exc, Stop):
            await self._try_abort(exc.reason, exc.culprits)
        else:
            await self._try_abort(PROTOCOL if isinstance(exc, ProtocolError) else BROKER, ())

    async def _try_abort(self, reason: int, culprits: Sequence[int]) -> None:
        it = self.node.iteration
        meta = (int(reason), it, self._round(), self.node_id, *culprits)
        signature = self.identity.sign(self._abort_statement(meta))
        await self._try_send_abort(meta, (int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")))

    async def _try_send_abort(self, meta: tuple[int, ...], signature: tuple[int, ...]) -> None:
        """Publish an abort (retained): ``meta`` and its origin's signature, unchanged when relayed."""
        if not self.link.connected:
            return
        msg = Message(self.node_id, self.neighbours, CONTROL, 0, ABORT, signature, False, meta)
        try:
            publish = self.link.publish(topic_for(self.run_id, msg), self.codec.encode(msg), retain=True)
            await asyncio.wait_for(publish, 2.0)
            self.counters["control_sent"] += 1
        except (TransportError, TimeoutError) as exc:
            log.info("node %d: could not tell the neighbours that the run stops: %s", self.node_id, exc)

    # ------------------------------------------------------------------ report

    def report(self) -> dict[str, Any]:
        """The node's result: model, log-likelihoods, counts, timings, status and error."""
        em = self.node.em
        params, loglik = _node_model(em) if self.node.done and self.status == "finished" else (None, [])
        out: dict[str, Any] = {
            "node_id": self.node_id,
            "run_id": self.run_id,
            "launch": self.launch.hex(),
            "insecure_reproducible_seed": self.config.seed is not None,
            "on_dropout": self.on_dropout,
            "dropped": sorted(self._dropped.values(), key=lambda d: d["node"]),
            "status": self.status,
            "error": None if self.error is None else str(self.error),
            "exit_code": 0 if self.error is None else int(self.error.exit_code),
            "iteration": self.node.iteration,
            "round": self._round() if not self.node.done else None,
            "n_rows": self.n_rows,
            "n_iter": em.n_iter,
            "converged": bool(em.converged),
            "loglik": loglik,
            "rounds": {str(k): float(v) for k, v in self.node.rounds.items()},
            "unconverged_iterations": list(self.node.unconverged),
            "messages": self.node.sent_messages,
            "bytes": self.node.sent_bytes,
            "wire": {
                "published": self.counters["published"],
                "wire_bytes": self.counters["wire_bytes"],
                "control_sent": self.counters["control_sent"],
                "republished": self.counters["republished"],
                "received": self.counters["received"],
                "duplicates": self.counters["duplicates"],
                "not_addressed": self.counters["not_addressed"],
                "reconnects": self.counters["reconnects"],
                "rejected": dict(self.rejected),
            },
            "timings": {k: round(v, 6) for k, v in self.timings.items()},
            "costs": {k: round(v, 6) for k, v in self.costs.items()},
            "cpu_s": round(time.process_time(), 6),
            "rusage": _rusage(),
            # what a node process should never need to load (each costs start-up CPU on every node)
            "heavy_modules": sorted(m for m in ("scipy", "networkx") if m in sys.modules),
        }
        if params is not None:
            out.update(em.family.to_dict(params))
        return out

    def write_result(self) -> Path:
        """Write :meth:`report` to the configured result file (atomically) and return its path."""
        path = self.config.result
        try:
            write_json(path, _json_safe(self.report()), indent=1)
        except OSError as exc:
            raise ConfigError(f"cannot write the node result to {path}: {exc.strerror or exc}") from None
        return path


def _rusage() -> dict[str, float]:
    """User and system CPU seconds and context switches of this process so far (POSIX)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return {}
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"user_s": round(ru.ru_utime, 6), "system_s": round(ru.ru_stime, 6), "voluntary_switches": ru.ru_nvcsw, "involuntary_switches": ru.ru_nivcsw}


def _describe(payload: Any) -> str:
    if isinstance(payload, np.ndarray):
        return f"a {payload.dtype} array of shape {payload.shape}"
    return f"{len(payload)} integers"


def _json_safe(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None (JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _node_model(em: Any) -> tuple[Any, list[float]]:
    """This node's fitted parameters and log-likelihoods from its EM state.

    Accepts both shapes of :class:`~p2pem.em.EMState`: one node per state (``params`` an
    attribute, ``loglik`` floats) and a batch of nodes (``params(node)``, ``node_loglik(node)``).
    """
    params = em.params
    if callable(params):
        params = params(0)
    if hasattr(em, "node_loglik"):
        loglik = [float(v) for v in em.node_loglik(0)]
    else:
        loglik = [float(np.ravel(v)[0]) for v in em.loglik]
    return params, loglik


async def run_reported(runtime: NodeRuntime) -> int:
    """Run ``runtime`` to the end and write its result file; return the exit code, never raise.

    For running many nodes in one event loop (tests over :mod:`p2pem.deploy.transports.memory`);
    :func:`run_node` is the same with signal handling for a node process.
    """
    try:
        await runtime.run()
    except P2pemError as exc:
        runtime.status, runtime.error = "failed", exc
    except asyncio.CancelledError:
        runtime.status = "failed"
        runtime.error = Interrupted(f"node {runtime.node_id}: cancelled in {runtime.where()}")
    try:
        runtime.write_result()
    except ConfigError as exc:
        log.error("%s", exc)
        return int(ConfigError.exit_code)
    return 0 if runtime.error is None else int(runtime.error.exit_code)


def write_failure(config: NodeConfig, error: P2pemError) -> None:
    """Result file of a node that could not even start (bad data, wrong key file): ``status: failed``."""
    doc = {
        "node_id": config.node_id,
        "status": "failed",
        "error": str(error),
        "exit_code": int(error.exit_code),
    }
    path = config.result
    try:
        write_json(path, doc, indent=1)
    except OSError as exc:
        log.error("cannot write the node result to %s: %s", path, exc.strerror or exc)


def run_node(runtime: NodeRuntime) -> dict[str, Any]:
    """Run ``runtime`` in a fresh event loop with SIGTERM/SIGHUP handling; always write the result file.

    Returns the report on success; re-raises the node's error (a P2pemError, or
    :class:`Interrupted` after a signal) after writing the failed report.
    """

    async def main() -> dict[str, Any]:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        caught: list[int] = []

        def on_signal(sig: int) -> None:
            caught.append(sig)
            task.cancel()

        loop.set_exception_handler(_loop_error)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                loop.add_signal_handler(sig, on_signal, sig)
            except (NotImplementedError, RuntimeError):  # pragma: no cover - not the main thread / platform
                pass
        try:
            return await runtime.run()
        except asyncio.CancelledError:
            if caught:
                raise Interrupted(
                    f"node {runtime.node_id}: stopped by {signal.Signals(caught[0]).name} in {runtime.where()}", 128 + caught[0]
                ) from None
            raise

    try:
        report = asyncio.run(main())
    except P2pemError as exc:
        _finishing()
        runtime.status, runtime.error = "failed", exc
        runtime.write_result()
        raise
    except KeyboardInterrupt:
        _finishing()
        runtime.status = "failed"
        runtime.error = Interrupted(f"node {runtime.node_id}: interrupted in {runtime.where()}")
        runtime.write_result()
        raise
    except Exception as exc:  # noqa: BLE001 - a bug outside run(): still one line and a result file
        _finishing()
        log.debug("node %d: internal error", runtime.node_id, exc_info=exc)
        runtime.status = "failed"
        runtime.error = InternalError(f"node {runtime.node_id}: internal error: {type(exc).__name__}: {exc}")
        runtime.write_result()
        raise runtime.error from None
    _finishing()
    runtime.write_result()
    return report


def _loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Errors in callbacks nobody awaits (e.g. the MQTT client's socket callbacks racing a
    broker that just died): one log line, not a traceback; the runtime sees the lost link."""
    exc = context.get("exception")
    log.warning("event loop: %s%s", context.get("message", "error"), f" ({type(exc).__name__}: {exc})" if exc else "")


def _finishing() -> None:
    """The event loop is gone (and with it the signal handlers): a late SIGTERM (say, the
    kernel's parent-death signal right after the node stopped by itself) must not kill the
    process before its result file is written."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (ValueError, OSError):  # pragma: no cover - not the main thread
            pass
