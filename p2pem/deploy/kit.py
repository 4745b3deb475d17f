"""The deployment kit: what ``p2pem deploy`` prepares on disk before any process starts.

:func:`prepare_kit`
    From a scenario: split the data exactly as ``p2pem simulate`` does and write one file
    per node, generate every node's keys, write the roster, the broker's password file and
    ACL, and one ``node.toml`` per node.  Layout of the output folder::

        DIR/kit.json                  what was prepared (read by --kit)
        DIR/roster.toml               public, identical for every node
        DIR/broker/                   mosquitto.conf, passwords (hashed), acl, credentials.toml, log
        DIR/nodes/node<i>/            node.toml, node.key, node.pub, broker.password, data.csv,
                                      node.log and result.json once it ran
        DIR/result.json               written by the launcher on success

:class:`Kit`
    That folder once written: paths, run id, broker address (:meth:`Kit.load` reads it back).
:func:`start_kit_broker`
    Mosquitto on the kit's address with its password file and ACL (and Nagle off).

The processes are started by :mod:`p2pem.deploy.supervise`, the results merged by
:mod:`p2pem.deploy.results`, and :mod:`p2pem.deploy.launcher` chains the three.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from p2pem.deploy.config import BrokerConfig, NodeConfig, Timeouts, write_node_data
from p2pem.deploy.cuts import cut_warnings
from p2pem.deploy.keys import public_path, public_toml, write_broker_auth
from p2pem.deploy.roster import Roster, check_deployable
from p2pem.errors import ConfigError
from p2pem.files import atomic_write, write_json
from p2pem.messages import SERVER
from p2pem.streams import node_stream_key
from p2pem.tomltable import read_toml

log = logging.getLogger(__name__)

__all__ = [
    "KIT_FORMAT",
    "MAX_NODE_SPREAD",
    "Kit",
    "TaskKit",
    "deploy_settings",
    "make_run_id",
    "pick_protocol",
    "prepare_kit",
    "start_kit_broker",
    "write_kit_broker_config",
]

KIT_FORMAT = 1
#: Largest relative disagreement between the nodes' final models accepted by default.
MAX_NODE_SPREAD = 1e-6



@dataclass(frozen=True)
class Kit:
    """A prepared deployment folder (see the module docstring for its layout)."""

    root: Path
    run_id: str
    n_nodes: int
    scenario_file: Path | None
    protocol: str
    broker_host: str
    broker_port: int
    max_node_spread: float = MAX_NODE_SPREAD
    seeded: bool = False
    server: bool = False
    tls: bool = False
    #: with two sites: the second broker's port (bridged to the first); every odd node uses it
    bridge_port: int | None = None

    @property
    def parties(self) -> list[int]:
        """The processes of the run: every node, and the server (-1) where the protocol has one."""
        return list(range(self.n_nodes)) + ([SERVER] if self.server else [])

    def site(self, i: int) -> int:
        """0 or 1: which broker party ``i`` connects to (odd nodes to the second, with two sites)."""
        return 1 if self.bridge_port is not None and i % 2 == 1 else 0

    @property
    def roster_path(self) -> Path:
        return self.root / "roster.toml"

    @property
    def broker_dir(self) -> Path:
        return self.root / "broker"

    @property
    def bridge_dir(self) -> Path:
        """The second site's broker (two sites only)."""
        return self.root / "broker-site2"

    @property
    def password_file(self) -> Path:
        return self.broker_dir / "passwords"

    @property
    def acl_file(self) -> Path:
        return self.broker_dir / "acl"

    def node_dir(self, i: int) -> Path:
        return self.root / "server" if i == SERVER else self.root / "nodes" / f"node{i}"

    def config_path(self, i: int) -> Path:
        return self.node_dir(i) / "node.toml"

    def result_path(self, i: int) -> Path:
        return self.node_dir(i) / "result.json"

    def log_path(self, i: int) -> Path:
        return self.node_dir(i) / "node.log"

    def credentials(self) -> dict[str, str]:
        """Broker passwords of the ``admin`` and ``observer`` users (for monitoring and tests)."""
        return read_toml(self.broker_dir / "credentials.toml", "broker credentials")

    def save(self) -> None:
        doc = {
            "format": KIT_FORMAT,
            "run_id": self.run_id,
            "n_nodes": self.n_nodes,
            "scenario_file": None if self.scenario_file is None else str(self.scenario_file),
            "protocol": self.protocol,
            "broker_host": self.broker_host,
            "broker_port": self.broker_port,
            "max_node_spread": self.max_node_spread,
            "seeded": self.seeded,
            "server": self.server,
            "tls": self.tls,
            "bridge_port": self.bridge_port,
        }
        write_json(self.root / "kit.json", doc)

    @classmethod
    def load(cls, root: str | os.PathLike[str]) -> Kit:
        root = Path(root)
        try:
            doc = json.loads((root / "kit.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{root}: not a deployment kit (no kit.json; prepare one with `p2pem deploy SCENARIO --out {root} --prepare-only`)") from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{root}/kit.json: unreadable ({exc})") from None
        if doc.get("format") != KIT_FORMAT:
            raise ConfigError(f"{root}/kit.json: unknown kit format {doc.get('format')!r}")
        return cls(
            root=root,
            run_id=doc["run_id"],
            n_nodes=int(doc["n_nodes"]),
            scenario_file=None if doc.get("scenario_file") is None else Path(doc["scenario_file"]),
            protocol=doc["protocol"],
            broker_host=doc["broker_host"],
            broker_port=int(doc["broker_port"]),
            max_node_spread=float(doc.get("max_node_spread", MAX_NODE_SPREAD)),
            seeded=bool(doc.get("seeded", False)),
            server=bool(doc.get("server", False)),
            tls=bool(doc.get("tls", False)),
            bridge_port=None if doc.get("bridge_port") is None else int(doc["bridge_port"]),
        )

    def set_broker(self, host: str, port: int) -> Kit:
        """Point every party's config of the first site (and the kit) at another broker address."""
        for i in self.parties:
            if self.site(i) == 0:
                NodeConfig.load(self.config_path(i)).with_broker(host, port).save(self.config_path(i))
        kit = replace(self, broker_host=host, broker_port=int(port))
        kit.save()
        return kit



@dataclass(frozen=True)
class TaskKit:
    """What a kit needs for a computation other than the scenario's EM (e.g. a Bayesian-network release).

    Attributes
    ----------
    table : mapping
        The roster's public ``[task]`` table (:class:`~p2pem.deploy.roster.Roster`): every
        node builds its task from it and its own rows (:func:`p2pem.registry.make_task`).
    write_rows : callable(i, path)
        Writes node ``i``'s rows to ``path`` (its ``data.csv``), in the form its task reads.
    """

    table: Mapping[str, Any]
    write_rows: Callable[[int, Path], None]


def make_run_id(name: str) -> str:
    """``<scenario name>-<8 random hex digits>``, squeezed into the run-id alphabet."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-._")[:40] or "run"
    return f"{stem}-{secrets.token_hex(4)}"


def pick_protocol(scenario, protocol: str | None):
    """The scenario's protocol named ``protocol`` (its first of that name; default its first
    protocol), or at position ``protocol`` (1, 2, ...), checked to be deployable."""
    from p2pem.builders import build_protocols

    specs = build_protocols(scenario)
    listed = ", ".join(f"{k}: {s.name}" for k, s in enumerate(specs, 1))
    if protocol is None:
        spec = specs[0]
    elif protocol.isdigit():
        if not 1 <= int(protocol) <= len(specs):
            raise ConfigError(f"{scenario.path}: no protocol at position {protocol} (the scenario has {listed})")
        spec = specs[int(protocol) - 1]
    else:
        matches = [s for s in specs if s.name == protocol]
        if not matches:
            raise ConfigError(f"{scenario.path}: no protocol {protocol!r} in the scenario (it has {listed})")
        spec = matches[0]
    try:
        check_deployable(spec)
    except ConfigError as exc:
        raise ConfigError(f"{scenario.path}: {exc}") from None
    return spec


def deploy_settings(scenario, overrides: dict[str, float] | None = None) -> tuple[Timeouts, float, tuple[str, int] | None]:
    """Timeouts, max node spread and broker address from a scenario's ``[deploy]`` table.

    ``overrides`` (e.g. ``--timeout`` on the command line) replace keys of the table before
    the derived defaults (heartbeat, reconnect_timeout) are computed, and every key given
    reaches the node configs.
    """
    from p2pem.scenario import parse_broker_address

    table = {**dict(scenario.deploy), **(overrides or {})}
    timeouts = Timeouts.from_mapping(table, f"{scenario.path}: deploy")
    spread = float(table.get("max_node_spread", MAX_NODE_SPREAD))
    broker = None
    if "broker" in table:
        try:
            broker = parse_broker_address(table["broker"])
        except ConfigError as exc:
            raise ConfigError(f"{scenario.path}: deploy.broker: {exc}") from None
    return timeouts, spread, broker


def prepare_kit(
    scenario,
    out: str | os.PathLike[str],
    *,
    broker: tuple[str, int],
    protocol: str | None = None,
    run_id: str | None = None,
    seeded: bool = False,
    timeouts: Timeouts | None = None,
    max_node_spread: float | None = None,
    on_dropout: str | None = None,
    tls: bool = False,
    sites: int = 1,
    task: TaskKit | None = None,
    force: bool = False,
) -> Kit:
    """Write everything the node processes and the broker need into ``out``.

    Parameters
    ----------
    scenario : p2pem.scenario.Scenario
    out : path-like
        New (or empty) folder.
    broker : (host, port)
        Where the nodes will find the broker.
    protocol : str, optional
        Which of the scenario's protocols to deploy; default the first.
    run_id : str, optional
        Default ``<scenario name>-<random>``.
    seeded : bool, default False
        INSECURE, for tests and reproductions only: write the scenario seed into every node
        config so that the protocol noise (initial duals) equals ``p2pem simulate``'s;
        anyone holding the scenario file then recovers every node's statistics from the
        broker traffic.  By default every node draws its secrets from the OS's entropy.
    timeouts : Timeouts, optional
        Default: the scenario's ``[deploy]`` table.
    max_node_spread : float, optional
        Largest accepted relative disagreement between the nodes' models.
    on_dropout : {"stop", "continue"}, optional
        Default: the scenario's ``[deploy] on_dropout``, else "stop".
    tls : bool, default False
        Make a throw-away CA and a broker certificate for the broker's host
        (``broker/ca.crt``, ``broker.crt``, ``broker.key``); every party then connects with
        TLS and trusts that CA only.
    sites : {1, 2}
        Two sites: a second broker (``broker-site2/``, on the next free port) bridged to the
        first; every odd node connects to it.
    task : TaskKit, optional
        Every node computes this task instead of the scenario's EM: the roster carries its
        public table, each node's data file its own rows.
    force : bool, default False
        Write into a folder that is not empty (``p2pem deploy --force``): the kit's files
        replace those of the same names (an earlier kit's keys included).

    Returns
    -------
    Kit

    Raises
    ------
    ConfigError
        The folder is not empty, or the protocol cannot be deployed.
    """
    from p2pem.deploy.broker import free_port, username_for
    from p2pem.deploy.crypto import Identity, write_tls_files
    from p2pem.builders import build_graph, em_settings, feature_columns, load_data, validate_protocol

    root = Path(out)
    if root.exists() and (not root.is_dir() or (not force and any(root.iterdir()))):
        raise ConfigError(f"{root}: exists and is not an empty folder; choose a new output folder or pass --force")
    if not root.resolve().parent.exists():
        raise ConfigError(f"{root}: parent folder {root.resolve().parent} does not exist")
    scenario_timeouts, scenario_spread, _ = deploy_settings(scenario)
    timeouts = timeouts or scenario_timeouts
    spread = scenario_spread if max_node_spread is None else float(max_node_spread)
    spec = pick_protocol(scenario, protocol)
    parts = load_data(scenario) if task is None else None
    names = feature_columns(scenario)[1] if parts is not None else None
    graph = build_graph(scenario)
    validate_protocol(scenario, graph, spec)
    settings = em_settings(scenario)
    run_id = run_id or make_run_id(scenario.name)
    n = graph.number_of_nodes()

    if seeded:
        log.warning(
            "INSECURE REPRODUCIBLE SEED: the nodes' protocol noise is drawn from the scenario seed; "
            "whoever has the scenario file can undo the privacy noise (use only for tests)"
        )
    if sites not in (1, 2):
        raise ConfigError(f"sites must be 1 or 2, got {sites}")
    if sites == 2 and tls:
        raise ConfigError("two sites and TLS together are not supported by the kit; bridge TLS brokers by hand (nodes/README.md)")
    root.mkdir(exist_ok=True)
    (root / "nodes").mkdir(exist_ok=force)
    broker_dir = root / "broker"
    broker_dir.mkdir(exist_ok=force)
    identities = [Identity.generate() for _ in range(n)]
    has_server = spec.server_aggregation(spec.topology(graph), 0) is not None
    server_identity = Identity.generate() if has_server else None
    on_dropout = str(scenario.deploy.get("on_dropout", "stop")) if on_dropout is None else on_dropout
    roster = Roster.build(
        run_id, graph, settings, spec, [ident.public for ident in identities], n_features=None if parts is None else int(parts[0].shape[1]),
        columns=names,
        on_dropout=on_dropout, server_key=None if server_identity is None else server_identity.public,
        task=None if task is None else task.table, parties=scenario.parties,
    )
    roster.save(root / "roster.toml")
    for line in cut_warnings(roster.neighbours):
        log.warning("roster of run %s: %s", run_id, line)
    parties = list(range(n)) + ([SERVER] if has_server else [])
    peers = {i: tuple(range(n)) if i == SERVER else (*roster.neighbours[i], *((SERVER,) if has_server else ())) for i in parties}
    users = write_broker_auth(broker_dir, run_id, parties, bridge=sites == 2, peers=peers)
    host, port = broker
    bridge_port = free_port(host) if sites == 2 else None
    tls_files = write_tls_files(broker_dir, [host]) if tls else None
    protocol_stream = scenario.streams()["protocol"]
    for i in parties:
        d = root / "server" if i == SERVER else root / "nodes" / f"node{i}"
        d.mkdir(exist_ok=force)
        identity = server_identity if i == SERVER else identities[i]
        assert identity is not None
        identity.save(d / "node.key", overwrite=force)
        atomic_write(public_path(d / "node.key"), public_toml(identity.public, i))
        pw = d / "broker.password"
        os.replace(broker_dir / f"{username_for(i)}.password", pw)
        data = None
        if i != SERVER and parts is not None:
            data = write_node_data(d / "data.csv", parts[i], names)
        elif i != SERVER and task is not None:
            data = d / "data.csv"
            task.write_rows(i, data)
        ca = None
        if tls_files is not None:
            ca = d / "ca.crt"
            atomic_write(ca, tls_files[0].read_text())
        # a node's stream, or (the server) dp-central's aggregator stream: protocol stream n
        key = node_stream_key(protocol_stream, n if i == SERVER else i) if seeded else None
        site_port = bridge_port if bridge_port is not None and i % 2 == 1 else port
        config = NodeConfig(
            node_id=i,
            roster=root / "roster.toml",
            key_file=d / "node.key",
            data=data,
            result=d / "result.json",
            broker=BrokerConfig(host=host, port=int(site_port), username=username_for(i), password_file=pw, tls=tls, ca_file=ca),
            timeouts=timeouts,
            seed=key[0] if key is not None else None,
            spawn_key=key[1] if key is not None else (),
        )
        config.save(d / "node.toml")
    kit = Kit(
        root=root,
        run_id=run_id,
        n_nodes=n,
        scenario_file=Path(scenario.path).resolve(),
        protocol=spec.name,
        broker_host=host,
        broker_port=int(port),
        max_node_spread=spread,
        seeded=seeded,
        server=has_server,
        tls=tls,
        bridge_port=bridge_port,
    )
    if sites == 2:
        kit.bridge_dir.mkdir(exist_ok=force)
        atomic_write(kit.bridge_dir / "bridge.password", users["bridge"] + "\n", mode=0o600)
    kit.save()
    write_kit_broker_config(kit)
    return kit



def start_kit_broker(kit: Kit, *, timeout: float = 5.0, other_port_if_taken: bool = False):
    """Start Mosquitto with the kit's password file and ACL (and TLS) on the kit's address.

    Parameters
    ----------
    kit : Kit
    timeout : float, default 5.0
        Seconds to wait for it to listen.
    other_port_if_taken : bool, default False
        When the kit's port is taken, listen on a free one instead; the caller then points
        the kit at it (``kit.set_broker(kit.broker_host, handle.port)``).

    Returns
    -------
    p2pem.deploy.broker.BrokerHandle

    Raises
    ------
    ConfigError
        Mosquitto is not installed.
    TransportError
        It does not start (:class:`~p2pem.deploy.broker.PortInUse` when the port is taken).
    """
    handle = _start(kit, kit.broker_dir, kit.broker_port, timeout, other_port_if_taken=other_port_if_taken, tls=_tls_files(kit))
    log.info("mosquitto listening on %s for run %s%s", handle.address, kit.run_id, " (TLS)" if kit.tls else "")
    return handle


def start_bridge_broker(kit: Kit, *, timeout: float = 5.0):
    """Start the second site's Mosquitto (two-site kits), bridged to the first (which must run)."""
    if kit.bridge_port is None:
        raise ConfigError(f"{kit.root}: the kit has one site")
    handle = _start(kit, kit.bridge_dir, kit.bridge_port, timeout, bridge=_bridge(kit))
    log.info("mosquitto of the second site listening on %s, bridged to %s:%d", handle.address, kit.broker_host, kit.broker_port)
    return handle


#: Largest MQTT packet the kit's brokers accept (a member's oversized message ends its connection).
MAX_PACKET_SIZE = 16 * 2**20


def _start(kit: Kit, directory: Path, port: int, timeout: float, **extra):
    """Mosquitto in ``directory`` on ``port`` with the kit's users and ACL."""
    from p2pem.deploy.broker import start_broker

    return start_broker(
        directory, port=port, host=kit.broker_host, password_file=kit.password_file, acl_file=kit.acl_file,
        executable=_mosquitto(), timeout=timeout, max_packet_size=MAX_PACKET_SIZE, **extra,
    )


def _mosquitto():
    from p2pem.deploy.broker import find_mosquitto

    exe = find_mosquitto()
    if exe is None:
        raise ConfigError("mosquitto not found; install it (e.g. apt-get install mosquitto) or give --broker HOST:PORT")
    return exe


def _tls_files(kit: Kit):
    d = kit.broker_dir
    return (d / "ca.crt", d / "broker.crt", d / "broker.key") if kit.tls else None


def _bridge(kit: Kit):
    from p2pem.deploy.broker import Bridge

    password = (kit.bridge_dir / "bridge.password").read_text(encoding="utf-8").strip()
    return Bridge(f"p2pem-{kit.run_id}-site2"[:60], kit.broker_host, kit.broker_port, kit.run_id, "bridge", password)


def write_kit_broker_config(kit: Kit, *, host: str | None = None, port: int | None = None) -> Path:
    """``DIR/broker/mosquitto.conf`` for the kit: password file, ACL, TLS, and Nagle off (and the
    second site's, bridged to it) (see :func:`p2pem.deploy.broker.write_mosquitto_config`)."""
    from p2pem.deploy.broker import write_mosquitto_config

    if kit.bridge_port is not None:
        write_mosquitto_config(kit.bridge_dir, kit.bridge_port, kit.password_file, kit.acl_file, host=kit.broker_host, bridge=_bridge(kit), max_packet_size=MAX_PACKET_SIZE)
    return write_mosquitto_config(
        kit.broker_dir,
        kit.broker_port if port is None else port,
        kit.password_file,
        kit.acl_file,
        host=kit.broker_host if host is None else host,
        tls=_tls_files(kit),
        max_packet_size=MAX_PACKET_SIZE,
    )
