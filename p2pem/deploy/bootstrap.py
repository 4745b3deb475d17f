"""Start-up of a deployed node: load its files, connect, and meet its neighbours.

:func:`load_node` reads what a node needs before it talks to anyone (roster, keys, data) and
builds its Node, codec and link; every problem is a one-line ConfigError or DataError naming
the file.  :func:`connect` reaches the broker, retrying until the start-up timeout unless the
broker refused the node's credentials.  :class:`Handshake` is the hello exchange:

``hello``   meta ``(epoch, phase, iteration, round, *awaited)``, payload the roster digest
            and a digest of the public step parameters this node derived from the roster's graph (eigenvalues, so another
            host's linear algebra could differ in the last digits: nodes that disagree would
            converge to a wrong average together, so they refuse to start; after a dropout the
            survivors' parameters are bound into the tags instead).  Sent on start-up until
            every neighbour has answered (a node starts the protocol only once all its
            neighbours are subscribed, because a broker does not keep messages for absent
            clients), as a heartbeat when the node has published nothing for ``heartbeat``
            seconds, and at once after a reconnection with a new epoch.  A neighbour's new
            epoch means it reconnected and may have missed messages: the node re-publishes its
            recent envelopes (byte-identical, so duplicates to the receiver's ReplayGuard).
            The rest of the meta is the sender's :class:`~p2pem.deploy.watchdog.Status`: its
            phase (starting, running, final agreement), EM iteration, protocol round and the
            nodes it waits for.  Hellos are rate-limited per sender (a
            :class:`~p2pem.deploy.limits.TokenBucket`): one that sends more floods, a
            violation.

Start-up needs no fast periodic hellos: a node answers every neighbour's first hello at
once, and a hello is only sent after the node's own subscriptions are acknowledged, so of any
two neighbours the later one is always heard.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter

import numpy as np
from dataclasses import dataclass
from typing import Any

from p2pem.deploy.clock import Clock
from p2pem.deploy.codec import Codec
from p2pem.deploy.config import NodeConfig, load_node_data
from p2pem.deploy.control import HELLO, describe_payload, violation
from p2pem.deploy.admission import CONTROL
from p2pem.deploy.crypto import Identity
from p2pem.deploy.failures import NodeFailure, Reason, nodes_text
from p2pem.deploy.limits import TokenBucket
from p2pem.deploy.watchdog import Status
from p2pem.deploy.roster import Roster
from p2pem.deploy.transports.base import AccessRefused, CertificateRefused, Link, subscriptions_for
from p2pem.errors import ConfigError, DataError, TransportError
from p2pem.messages import Message
from p2pem.messages import SERVER
from p2pem.node import Node, Server
from p2pem.protocols import NodeContext, ProtocolSpec
from p2pem.registry import make_task
from p2pem.task import Task

log = logging.getLogger(__name__)

__all__ = ["Handshake", "NodeSetup", "ServerSetup", "connect", "load_node", "load_server", "own_rows", "peers_for", "public_parameters_digest"]

#: Pause between attempts to reach the broker at start-up, in seconds.
CONNECT_PAUSE = 0.25


def public_parameters_digest(spec, topology) -> int:
    """SHA-256 (as an int) of ``spec.public_parameters(topology)``, every float in hex (exact)."""
    text = ",".join(float(v).hex() for v in spec.public_parameters(topology))
    return int.from_bytes(hashlib.sha256(text.encode("ascii")).digest(), "big")


@dataclass
class NodeSetup:
    """What a node builds from its files before it talks to anyone (see :func:`load_node`)."""

    config: NodeConfig
    roster: Roster
    identity: Identity
    codec: Codec
    node: Node
    spec: Any
    link: Link
    n_rows: int


def _common(config: NodeConfig, launch: bytes, roster: Roster):
    """The spec, settings, identity and codec every party loads, checked against the config."""
    i = config.node_id
    if config.on_dropout is not None and config.on_dropout != roster.on_dropout:
        raise ConfigError(f"{config.path}: on_dropout is {config.on_dropout!r} but the roster says {roster.on_dropout!r} (every node runs with the roster's)")
    spec = roster.protocol_spec()
    settings = roster.em_settings()
    identity = Identity.load(config.key_file)
    try:
        codec = Codec(roster.run_id, roster.public_keys(), identity=identity, node_id=i, launch=launch)
    except ConfigError as exc:
        raise ConfigError(f"{config.path}: {exc}") from None
    if config.seed is not None:
        log.warning(
            "node %d: INSECURE REPRODUCIBLE SEED: protocol noise drawn from a fixed seed, so the results "
            "are reproducible but the subspace perturbation hides nothing from whoever knows the seed",
            i,
        )
    return spec, settings, identity, codec


def load_node(config: NodeConfig, *, link: Link | None = None, launch: bytes = b"", task: Task | None = None) -> NodeSetup:
    """Load the roster, the key file and the data of ``config`` and build the node's parts.

    A protocol that binds to the run (the private ones: clipping to the public box, the noise
    plan, the EM hook) is bound here with this node's rows and the roster's node count.

    Parameters
    ----------
    config : NodeConfig
    link : Link, optional
        The transport; default an :class:`~p2pem.deploy.transports.mqtt.MqttLink` to the
        configured broker.
    launch : bytes
        Nonce of this launch, bound into every envelope.
    task : Task, optional
        What the node computes instead of the roster's EM on its data file: a task the
        roster does not describe (e.g. a Bayesian-network release, :mod:`p2pem.bayesnet`),
        built by the caller from this node's rows; the data file is not read then.  Default:
        the task the roster's ``[task]`` table names, built by
        :func:`p2pem.registry.make_task` from the table and this node's data file (with
        the config's reproducible seed, if any), else the EM.

    Raises
    ------
    ConfigError, DataError
        A file is missing or invalid, the key file does not match the roster entry, the
        protocol cannot be deployed, or the data does not fit the EM settings.
    """
    roster = Roster.load(config.roster)
    i = config.node_id
    if not 0 <= i < roster.n_nodes or config.data is None:
        raise ConfigError(f"{config.path}: node_id {i} is not a node of the roster ({roster.n_nodes} nodes: 0..{roster.n_nodes - 1}) with a data file")
    spec, settings, identity, codec = _common(config, launch, roster)
    topology = roster.topology()
    if task is None and roster.task is not None:
        task = make_task(roster.task, config.data, node_id=i, n_nodes=roster.n_nodes, seed=config.seed, where=roster.where)
    if link is None:
        link = mqtt_link(config, roster)
    if task is not None:
        if type(spec).bind is not ProtocolSpec.bind:  # a private protocol binds to an EM run
            raise ConfigError(f"{config.path}: protocol {spec.name!r} binds to an EM run; a task of its own needs an aggregation protocol")
        node = Node(NodeContext(i, topology, config.protocol_rng()), task, spec)
        node.validate = True
        rows = int(sum(len(part) for part in getattr(task, "parts", ())))
        return NodeSetup(config, roster, identity, codec, node, spec, link, rows)
    X = own_rows(config, roster)
    # the other parts are empty: binding reads only the node count and the public bound from them
    spec, settings, parts = spec.bind(settings, [X] + [X[:0]] * (roster.n_nodes - 1), seed=0)
    spec = spec.placed(topology)  # a private protocol's shares, sized for its colluders' worst placement
    node = Node.for_em(NodeContext(i, topology, config.protocol_rng()), parts[0], settings, spec)
    node.validate = True
    return NodeSetup(config, roster, identity, codec, node, spec, link, int(X.shape[0]))


def own_rows(config: NodeConfig, roster: Roster) -> np.ndarray:
    """This node's rows, checked against the roster's public schema before the node goes online.

    The roster records the width of every node's data (``em.n_features``) and, where the
    rows have them, the column names (``em.columns``).  A data file that does not fit is this
    node's own mistake: the node stops before it connects, with one line naming its file,
    so that no peer's correct messages are ever taken for a peer's fault.  Without
    ``columns`` in the node config, the roster's columns are read by name (a file may hold
    more, in any order); with them, the chosen columns must be the roster's, in its order.

    Raises
    ------
    DataError
        Naming this node and its file: a column the roster names is missing, the chosen
        columns are not the roster's, or the width differs from the roster's.
    """
    from p2pem.data import read_header

    i, path, expected = config.node_id, config.data, roster.columns
    assert path is not None
    columns = config.columns
    if expected is not None:
        if columns is None:
            have = read_header(path)
            missing = [c for c in expected if c not in have]
            if missing:
                raise DataError(
                    f"node {i}: {path} has no column(s) {', '.join(map(repr, missing))} of the run's public schema "
                    f"(the roster {roster.where} names {len(expected)}: {', '.join(map(repr, expected))}); fix this node's data file"
                )
            columns = expected
        elif tuple(columns) != expected:
            raise DataError(
                f"node {i}: {config.path} reads columns {', '.join(map(repr, columns))} of {path}, but the run's public schema "
                f"(roster {roster.where}) is {', '.join(map(repr, expected))} in this order; fix 'columns' in {config.path}"
            )
    X = load_node_data(path, columns)
    width = roster.n_features
    if width is not None and X.shape[1] != width:
        raise DataError(
            f"node {i}: {path} has {X.shape[1]} columns, but the roster {roster.where} says every node's data has {width} "
            "(this node's data file is wrong, not its peers' messages)"
        )
    return X


@dataclass
class ServerSetup:
    """What the server of ``federated`` or ``dp-central`` builds before it talks to anyone."""

    config: NodeConfig
    roster: Roster
    identity: Identity
    codec: Codec
    server: Server
    spec: Any
    settings: Any
    link: Link


def load_server(config: NodeConfig, *, link: Link | None = None, launch: bytes = b"") -> ServerSetup:
    """Load the roster and key file of the server process (node id -1) and build its parts.

    dp-central's server draws its noise from the config's reproducibility seed, or from the
    operating system's entropy (the default, and what privacy requires).

    Raises
    ------
    ConfigError
        A file is missing or invalid, or the roster's protocol has no server.
    """
    from dataclasses import replace

    roster = Roster.load(config.roster)
    spec, settings, identity, codec = _common(config, launch, roster)
    topology = roster.topology()
    if spec.server_aggregation(topology, 0) is None:
        raise ConfigError(f"{config.path}: node_id -1 is the server, but protocol {spec.name!r} has none")
    d = roster.n_features
    if d is None:
        raise ConfigError(f"{roster.where}: em.n_features is needed by the server")
    spec, settings, _ = spec.bind(settings, [np.zeros((0, d))] * roster.n_nodes, seed=0)
    plan = getattr(spec, "plan", None)
    if plan is not None:  # dp-central: its own noise, not a seed's
        spec = replace(spec, plan=replace(plan, aggregator_rng=config.protocol_rng()))
    if link is None:
        link = mqtt_link(config, roster)
    return ServerSetup(config, roster, identity, codec, Server(spec, topology), spec, settings, link)


def mqtt_link(config: NodeConfig, roster: Roster) -> Link:
    """The party's link to its configured broker, subscribed to its peers' topics."""
    from p2pem.deploy.transports.mqtt import MqttLink  # aiomqtt: only a node process needs it

    broker, i, timeout = config.broker, config.node_id, config.timeouts.timeout
    return MqttLink(
        broker.host,
        broker.port,
        subscriptions=subscriptions_for(roster.run_id, i, peers_for(roster, i)),
        username=broker.username,
        password=broker.password(),
        identifier=f"{roster.run_id}-node{i}",
        tls_context=broker.tls_context(),
        timeout=min(10.0, max(2.0, timeout)),
        keepalive=max(5, int(timeout)),
        subscribe_qos=0,  # see MqttLink: with clean sessions QoS 1 adds nothing on this leg
    )


def peers_for(roster: Roster, i: int) -> tuple[int, ...]:
    """Whom party ``i`` exchanges messages with: its graph neighbours and the server (if any),
    or every node for the server."""
    if i == SERVER:
        return tuple(range(roster.n_nodes))
    return tuple(sorted((*roster.neighbours[i], *((SERVER,) if roster.server_key is not None else ()))))


async def connect(link: Link, node_id: int, username: str | None, startup_timeout: float, clock: Clock) -> None:
    """Connect ``link``, retrying until ``startup_timeout`` (the broker may start later).

    Raises
    ------
    TransportError
        The broker refused the credentials or its TLS certificate did not verify (at once:
        retrying cannot help), or it stayed unreachable for ``startup_timeout`` seconds.
    """
    deadline = clock() + startup_timeout
    while True:
        try:
            await link.connect()
            return
        except CertificateRefused as exc:
            raise TransportError(f"node {node_id}: {exc} (check broker.ca_file and broker.host in node.toml)") from None
        except AccessRefused as exc:
            raise TransportError(f"node {node_id}: the MQTT broker at {link.address} refused user {username!r}: {exc}") from None
        except TransportError as exc:
            if clock() >= deadline:
                raise TransportError(
                    f"node {node_id}: cannot reach the MQTT broker at {link.address} within {startup_timeout:g} s: {exc}"
                ) from None
            await asyncio.sleep(CONNECT_PAUSE)


class Handshake:
    """The hello exchange of one node: who is online, in which connection epoch, where it is.

    Parameters
    ----------
    node_id : int
    roster_digest : bytes
        :meth:`Roster.digest` of this node's roster.
    params_digest : int
        :func:`public_parameters_digest` of the protocol on the roster's graph.
    counters : collections.Counter, optional
    peers_of : callable(j) -> collection of int, optional
        The nodes sender j may wait for (its roster neighbours, and a server); a status
        naming anyone else is a violation.  Default: anyone.
    tick : float
        The runtime's timer period: an honest node sends at most one hello per tick.

    Attributes
    ----------
    heard : dict
        Neighbour id to the connection epoch of its last hello.
    hello_due, republish_due, start_due : bool
        Set when a hello should go out soon, the recent envelopes be re-published, the
        protocol start (every neighbour heard); the runtime clears them when it acts.
    """

    def __init__(
        self,
        node_id: int,
        roster_digest: bytes,
        params_digest: int,
        counters: Counter[str] | None = None,
        *,
        peers_of=None,
        tick: float = 0.2,
    ) -> None:
        self.node_id = node_id
        self.digest = int.from_bytes(roster_digest, "big")
        self.params_digest = params_digest
        self.counters: Counter[str] = Counter() if counters is None else counters
        self.peers_of = peers_of
        # a burst of a few dozen, then one per tick (answers, reconnections) and one per heartbeat
        self.capacity, self.rate = 30.0, 2.0 / tick + 1.0
        self.heard: dict[int, int] = {}
        # Sequence numbers start at the wall clock's microseconds, so a restarted process (the
        # same key and launch nonce: a supervisor's crash-restart) sends hellos newer than its
        # previous incarnation's instead of ones its neighbours drop as stale, and they learn
        # that it restarted (its status says it starts again, see Peer._incarnation).
        self._seq = time.time_ns() // 1000
        self._seen: dict[int, int] = {}
        self._buckets: dict[int, TokenBucket] = {}
        self.hello_due = False
        self.republish_due = False
        self.start_due = False

    def hello(self, neighbours: tuple[int, ...], epoch: int, status: tuple[int, ...] = (0, 0, 0)) -> Message:
        """This node's next hello (each has a larger sequence number, so a replay is stale).

        ``status`` is ``(phase, iteration, round, *awaited)``.
        """
        self._seq += 1
        self.hello_due = False
        return Message(self.node_id, neighbours, CONTROL, self._seq, HELLO, (self.digest, self.params_digest), False, (epoch, *status))

    def missing(self, neighbours: tuple[int, ...]) -> list[int]:
        """Neighbours not heard from yet."""
        return [j for j in neighbours if j not in self.heard]

    def receive(self, msg: Message, plausible: bool, neighbours: tuple[int, ...], started: bool, now: float = 0.0) -> Status | None:
        """Check a neighbour's hello; its status if it is new (not a stale sequence number).

        Raises
        ------
        ProtocolViolation
            A malformed hello, one to receivers that are not the sender's neighbours, a
            status naming nodes the sender cannot wait for, or one hello too many.
        NodeFailure
            :attr:`~p2pem.deploy.failures.Reason.MISMATCH`: the neighbour's roster or step
            parameters differ from this node's.
        """
        j, payload, meta = msg.sender, msg.payload, tuple(msg.meta)
        if not (isinstance(payload, tuple) and len(payload) == 2) or len(meta) < 4 or meta[0] < 0 or meta[1] not in (0, 1, 2) or min(meta[2], meta[3]) < 0 or msg.round < 1:
            raise violation(msg, "hello", f"payload of {describe_payload(payload)}, meta {meta[:8]}, sequence {msg.round}")
        if not plausible:
            raise violation(msg, "hello", f"receivers {msg.receivers} are not the sender's neighbours")
        awaited = frozenset(meta[4:])
        if self.peers_of is not None and not awaited <= set(self.peers_of(j)):
            raise violation(msg, "hello", f"its status says it waits for nodes {sorted(awaited)}, which are not all its neighbours")
        bucket = self._buckets.setdefault(j, TokenBucket(self.capacity, self.rate))
        if not bucket.take(now):
            raise violation(msg, "rate", f"more than {self.capacity:g} hellos at once or {self.rate:g} per second (a flood)")
        if payload[0] != self.digest:
            raise NodeFailure(Reason.MISMATCH, self.node_id, f"neighbour node {j} runs with a different roster (every node needs the same roster.toml)", (j,))
        if payload[1] != self.params_digest:
            raise NodeFailure(
                Reason.MISMATCH,
                self.node_id,
                f"neighbour node {j} derived other public step parameters from the same roster (the graph's eigenvalues "
                f"differ in the last digits between its host's and this host's linear-algebra libraries); run every node "
                f"with the same NumPy build, or give the protocol's step parameters as numbers in the scenario",
                (j,),
            )
        if msg.round <= self._seen.get(j, -1):
            self.counters["stale_hellos"] += 1
            return None
        self._seen[j] = msg.round
        epoch, previous = int(meta[0]), self.heard.get(j)
        if previous is None:
            self.heard[j] = epoch
            self.hello_due = True  # let it hear us soon
            if epoch > 0 and started:
                self.republish_due = True
            if not started and all(k in self.heard for k in neighbours):
                self.start_due = True
        elif epoch > previous:
            self.heard[j] = epoch
            log.info("node %d: node %d reconnected (epoch %d); re-publishing recent messages", self.node_id, j, epoch)
            self.republish_due = True
            self.hello_due = True
        return Status(int(meta[1]), int(meta[2]), int(meta[3]), awaited, now)

    def check_startup(self, neighbours: tuple[int, ...], waited: float, startup_timeout: float) -> None:
        """Raise :attr:`~p2pem.deploy.failures.Reason.OFFLINE` when neighbours are still unheard after the start-up timeout."""
        missing = self.missing(neighbours)
        if missing and waited > startup_timeout:
            raise NodeFailure(
                Reason.OFFLINE,
                self.node_id,
                f"{nodes_text(missing)} never came online (no hello within {startup_timeout:g} s of start-up)",
                missing,
            )
