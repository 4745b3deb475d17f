"""``p2pem deploy``: a whole deployment on one machine, one OS process per node.

Three steps, each usable on its own (the tests and ``sim/bench_deploy.py`` use them):

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

:func:`start_kit_broker`
    Mosquitto on the kit's address with its password file and ACL (and Nagle off).
:func:`run_deployment`
    Start ``p2pem node`` per node (own session, stdout for progress, stderr to its log),
    wait, collect the per-node results, check that all nodes agree and build the result
    in the schema of ``p2pem simulate`` plus a ``deployment`` section.

On any exception (Ctrl-C included) every node process still running is terminated.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from p2pem.deploy.config import (
    BrokerConfig,
    NodeConfig,
    Roster,
    Timeouts,
    check_deployable,
    toml_dumps,
    write_node_data,
)
from p2pem.errors import ConfigError, ProtocolError, TransportError

log = logging.getLogger(__name__)

__all__ = [
    "DeployProgress",
    "Deployment",
    "DeploymentFailed",
    "Kit",
    "collect_results",
    "deploy",
    "prepare_kit",
    "run_deployment",
    "start_kit_broker",
]

KIT_FORMAT = 1
#: Largest relative disagreement between the nodes' final models accepted by default.
MAX_NODE_SPREAD = 1e-6


class DeploymentFailed(TransportError):
    """At least one node process failed; the message quotes the node that saw the cause."""


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

    @property
    def roster_path(self) -> Path:
        return self.root / "roster.toml"

    @property
    def broker_dir(self) -> Path:
        return self.root / "broker"

    @property
    def password_file(self) -> Path:
        return self.broker_dir / "passwords"

    @property
    def acl_file(self) -> Path:
        return self.broker_dir / "acl"

    def node_dir(self, i: int) -> Path:
        return self.root / "nodes" / f"node{i}"

    def config_path(self, i: int) -> Path:
        return self.node_dir(i) / "node.toml"

    def result_path(self, i: int) -> Path:
        return self.node_dir(i) / "result.json"

    def log_path(self, i: int) -> Path:
        return self.node_dir(i) / "node.log"

    def credentials(self) -> dict[str, str]:
        """Broker passwords of the ``admin`` and ``observer`` users (for monitoring and tests)."""
        import tomllib

        with open(self.broker_dir / "credentials.toml", "rb") as handle:
            return dict(tomllib.load(handle))

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
        }
        (self.root / "kit.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")

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
        )

    def set_broker(self, host: str, port: int) -> Kit:
        """Point every node config (and the kit) at another broker address."""
        for i in range(self.n_nodes):
            NodeConfig.load(self.config_path(i)).with_broker(host, port).save(self.config_path(i))
        kit = Kit(self.root, self.run_id, self.n_nodes, self.scenario_file, self.protocol, host, int(port), self.max_node_spread, self.seeded)
        kit.save()
        return kit


def make_run_id(name: str) -> str:
    """``<scenario name>-<8 random hex digits>``, squeezed into the run-id alphabet."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-._")[:40] or "run"
    return f"{stem}-{secrets.token_hex(4)}"


def _pick_protocol(scenario, protocol: str | None):
    from p2pem.runner import protocols

    specs = protocols(scenario)
    if protocol is None:
        spec = specs[0]
    else:
        matches = [s for s in specs if s.name == protocol]
        if not matches:
            raise ConfigError(f"{scenario.path}: no protocol {protocol!r} in the scenario (it has: {', '.join(s.name for s in specs)})")
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
    from p2pem.deploy.config import parse_broker_address

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

    Returns
    -------
    Kit

    Raises
    ------
    ConfigError
        The folder is not empty, the protocol cannot be deployed, or mosquitto_passwd is
        missing.
    """
    from p2pem.deploy.broker import find_mosquitto, username_for
    from p2pem.deploy.crypto import Identity
    from p2pem.runner import build_graph, em_settings
    from p2pem.scenario import load_data

    root = Path(out)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ConfigError(f"{root}: exists and is not an empty folder; choose a new output folder")
    if not root.resolve().parent.exists():
        raise ConfigError(f"{root}: parent folder {root.resolve().parent} does not exist")
    scenario_timeouts, scenario_spread, _ = deploy_settings(scenario)
    timeouts = timeouts or scenario_timeouts
    spread = scenario_spread if max_node_spread is None else float(max_node_spread)
    spec = _pick_protocol(scenario, protocol)
    parts = load_data(scenario)
    graph = build_graph(scenario)
    spec.validate(graph)
    settings = em_settings(scenario)
    run_id = run_id or make_run_id(scenario.name)
    n = graph.number_of_nodes()
    passwd = find_mosquitto("mosquitto_passwd")
    if passwd is None:
        raise ConfigError("mosquitto_passwd not found; install mosquitto (e.g. apt-get install mosquitto) to write the broker's password file")

    if seeded:
        log.warning(
            "INSECURE REPRODUCIBLE SEED: the nodes' protocol noise is drawn from the scenario seed; "
            "whoever has the scenario file can undo the privacy noise (use only for tests)"
        )
    root.mkdir(exist_ok=True)
    (root / "nodes").mkdir()
    broker_dir = root / "broker"
    broker_dir.mkdir()
    identities = [Identity.generate() for _ in range(n)]
    roster = Roster.build(run_id, graph, settings, spec, [ident.public for ident in identities], n_features=int(parts[0].shape[1]))
    roster.save(root / "roster.toml")
    write_broker_auth(broker_dir, run_id, n, executable=passwd)
    host, port = broker
    protocol_stream = scenario.streams()["protocol"]
    for i in range(n):
        d = root / "nodes" / f"node{i}"
        d.mkdir()
        identities[i].save(d / "node.key")
        public_path(d / "node.key").write_text(public_toml(identities[i].public, i), encoding="utf-8")
        pw = d / "broker.password"
        os.replace(broker_dir / f"node{i}.password", pw)
        write_node_data(d / "data.csv", parts[i])
        config = NodeConfig(
            node_id=i,
            roster=root / "roster.toml",
            key_file=d / "node.key",
            data=d / "data.csv",
            result=d / "result.json",
            broker=BrokerConfig(host=host, port=int(port), username=username_for(i), password_file=pw),
            timeouts=timeouts,
            seed=int(protocol_stream.entropy) if seeded else None,
            spawn_key=(*protocol_stream.spawn_key, i) if seeded else (),
            on_dropout=str(scenario.deploy.get("on_dropout", "stop")) if on_dropout is None else on_dropout,
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
    )
    kit.save()
    write_kit_broker_config(kit)
    return kit


def write_broker_auth(directory: Path, run_id: str, n_nodes: int, *, executable: Path | None = None) -> dict[str, str]:
    """Write the broker's hashed password file, ACL and the plain per-user passwords.

    Files in ``directory`` (all mode 0600): ``passwords`` (Mosquitto password file, hashed),
    ``acl`` (node ``i`` may publish only under ``p2pem/<run>/from/<i>/``), ``node<i>.password``
    (give it to node ``i``'s host) and ``credentials.toml`` (the ``admin`` and ``observer``
    users' passwords).

    Returns
    -------
    dict
        User name to password.
    """
    from p2pem.deploy.broker import acl_rules, username_for, write_password_file

    users = {username_for(i): secrets.token_urlsafe(18) for i in range(n_nodes)}
    users["admin"] = secrets.token_urlsafe(18)
    users["observer"] = secrets.token_urlsafe(18)
    write_password_file(directory / "passwords", users, executable=executable)
    _write_private(directory / "acl", acl_rules(run_id, range(n_nodes)))
    for i in range(n_nodes):
        _write_private(directory / f"node{i}.password", users[username_for(i)] + "\n")
    header = "broker users for monitoring (admin may publish, observer may only read); keep secret"
    _write_private(directory / "credentials.toml", toml_dumps({"admin": users["admin"], "observer": users["observer"]}, header=header))
    return users


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def public_path(key_file: Path) -> Path:
    """Where the public half of ``key_file`` goes: ``x.key`` -> ``x.pub``, else ``x`` + ``.pub``."""
    key_file = Path(key_file)
    return key_file.with_suffix(".pub") if key_file.suffix == ".key" else key_file.with_name(key_file.name + ".pub")


def public_toml(public, node_id: int | None = None) -> str:
    """The public identity as a small TOML document (``id`` when known, both keys, fingerprint)."""
    doc: dict[str, Any] = {}
    if node_id is not None:
        doc["id"] = node_id
    doc.update(public.to_dict())
    doc["fingerprint"] = public.fingerprint
    return toml_dumps(doc, header="p2pem public identity: send this file to whoever assembles the roster")


def start_kit_broker(kit: Kit, *, timeout: float = 5.0):
    """Start Mosquitto with the kit's password file and ACL on the kit's address.

    Returns
    -------
    p2pem.deploy.broker.BrokerHandle

    Raises
    ------
    ConfigError
        Mosquitto is not installed.
    TransportError
        It does not start (e.g. the port is taken).
    """
    from p2pem.deploy.broker import BrokerHandle, find_mosquitto

    exe = find_mosquitto()
    if exe is None:
        raise ConfigError("mosquitto not found; install it (e.g. apt-get install mosquitto) or give --broker HOST:PORT")
    config = write_kit_broker_config(kit)
    handle = BrokerHandle(exe, config, kit.broker_host, kit.broker_port)
    handle.start(timeout)
    log.info("mosquitto listening on %s for run %s", handle.address, kit.run_id)
    return handle


def write_kit_broker_config(kit: Kit, *, host: str | None = None, port: int | None = None) -> Path:
    """``DIR/broker/mosquitto.conf`` for the kit: password file, ACL, and Nagle off
    (see :func:`p2pem.deploy.broker.write_mosquitto_config`)."""
    from p2pem.deploy.broker import write_mosquitto_config

    return write_mosquitto_config(
        kit.broker_dir,
        kit.broker_port if port is None else port,
        kit.password_file,
        kit.acl_file,
        host=kit.broker_host if host is None else host,
    )


# ------------------------------------------------------------------------------ processes


@dataclass
class DeployProgress:
    """What the launcher knows while the nodes run."""

    n_nodes: int
    max_iter: int = 0
    online: int = 0
    min_iter: int = 0
    exited: int = 0
    failed: int = 0


@dataclass
class _NodeState:
    online: bool = False
    n_iter: int = 0
    max_iter: int = 0
    lines: list[str] = field(default_factory=list)


class Deployment:
    """The node processes of one kit.

    Parameters
    ----------
    kit : Kit
    wrap : callable(node_id) -> list of str, optional
        Command prefix per node, e.g. ``["ip", "netns", "exec", "ns3"]``.
    python : str
        Interpreter that runs ``-m p2pem node``.
    verbose : int
        ``-v`` flags passed to the nodes (their logs go to ``node.log``).
    nodes : sequence of int, optional
        Start only these nodes (default all; tests run the others themselves).
    """

    def __init__(
        self,
        kit: Kit,
        *,
        wrap: Callable[[int], Sequence[str]] | None = None,
        python: str = sys.executable,
        verbose: int = 1,
        nodes: Sequence[int] | None = None,
    ) -> None:
        self.kit = kit
        self.nodes = list(range(kit.n_nodes)) if nodes is None else list(nodes)
        self.wrap = wrap
        self.python = python
        self.verbose = verbose
        self.processes: list[subprocess.Popen[bytes]] = []
        self.states = [_NodeState() for _ in range(kit.n_nodes)]
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.last_event = time.monotonic()
        self.started_at = 0.0
        self.started_unix = 0.0
        self.exit_times: dict[int, float] = {}
        #: Fresh per launch and bound into every envelope, so a second launch of the same kit
        #: never accepts the first one's (e.g. retained) messages.
        self.launch = secrets.token_bytes(16)

    def command(self, i: int) -> list[str]:
        cmd = [self.python, "-m", "p2pem"]
        if self.verbose:
            cmd.append("-" + "v" * self.verbose)
        cmd += ["node", "--config", str(self.kit.config_path(i)), "--progress", "--exit-with-parent", "--launch", self.launch.hex()]
        return [*(self.wrap(i) if self.wrap is not None else ()), *cmd]

    def start(self) -> None:
        """Start every node process (each in its own session, so Ctrl-C reaches only the launcher)."""
        self.started_at = time.monotonic()
        self.started_unix = time.time()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        for i in self.nodes:
            self.kit.result_path(i).unlink(missing_ok=True)
            with open(self.kit.log_path(i), "ab") as logfile:
                try:
                    proc = subprocess.Popen(
                        self.command(i),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=logfile,
                        start_new_session=True,
                        env=env,
                    )
                except OSError as exc:
                    self.terminate()
                    raise TransportError(f"cannot start node {i}: {exc}") from None
            self.processes.append(proc)
            thread = threading.Thread(target=self._read, args=(i, proc), name=f"p2pem-node{i}-stdout", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _read(self, i: int, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").strip()
            words = line.split()
            with self._lock:
                state = self.states[i]
                if words[:1] == ["online"]:
                    state.online = True
                elif words[:1] == ["progress"] and len(words) == 3:
                    state.n_iter, state.max_iter = int(words[1]), int(words[2])
                else:
                    state.lines.append(line)
                self.last_event = time.monotonic()
        proc.stdout.close()

    def progress(self) -> DeployProgress:
        with self._lock:
            states = list(self.states)
            codes = [p.poll() for p in self.processes]
        return DeployProgress(
            n_nodes=self.kit.n_nodes,
            max_iter=max((s.max_iter for s in states), default=0),
            online=sum(s.online for s in states),
            min_iter=min((s.n_iter for s in states), default=0),
            exited=sum(c is not None for c in codes),
            failed=sum(c not in (None, 0) for c in codes),
        )

    def running(self) -> bool:
        return any(p.poll() is None for p in self.processes)

    def wait(self, *, progress: Callable[[DeployProgress], None] | None = None, watchdog: float = 600.0) -> list[int]:
        """Wait until every process exited; return the exit codes.

        Raises
        ------
        DeploymentFailed
            No node reported anything for ``watchdog`` seconds (the nodes' own timeouts should
            have fired long before; the processes are terminated).
        """
        while True:
            for i, p in zip(self.nodes, self.processes):
                if i not in self.exit_times and p.poll() is not None:
                    self.exit_times[i] = time.monotonic() - self.started_at
            if progress is not None:
                progress(self.progress())
            if len(self.exit_times) == len(self.processes):
                break
            if time.monotonic() - self.last_event > watchdog:
                self.terminate()
                raise DeploymentFailed(f"no node reported progress for {watchdog:g} s; terminated all node processes")
            time.sleep(0.05)
        for thread in self._threads:
            thread.join(timeout=2)
        return [int(p.returncode) for p in self.processes]

    def terminate(self, grace: float = 5.0) -> None:
        """SIGTERM every running node, then SIGKILL whatever still runs after ``grace`` seconds."""
        alive = [p for p in self.processes if p.poll() is None]
        for p in alive:
            try:
                p.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        for p in alive:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def run_deployment(
    kit: Kit,
    *,
    wrap: Callable[[int], Sequence[str]] | None = None,
    progress: Callable[[DeployProgress], None] | None = None,
    on_start: Callable[[Deployment], None] | None = None,
) -> dict[str, Any]:
    """Run the node processes of ``kit`` against its (running) broker and collect the result.

    Parameters
    ----------
    kit : Kit
    wrap : callable, optional
        Command prefix per node (see :class:`Deployment`).
    progress : callable(DeployProgress), optional
        Called about 20 times a second.
    on_start : callable(Deployment), optional
        Called once the processes are started (tests use it to inject faults).

    Returns
    -------
    dict
        The ``result.json`` document (not yet written).

    Raises
    ------
    DeploymentFailed
        A node failed; names it and quotes the error that explains the failure.
    ProtocolError
        The nodes finished but disagree on the model.
    """
    dep = Deployment(kit, wrap=wrap)
    timeouts = NodeConfig.load(kit.config_path(0)).timeouts
    t0 = time.perf_counter()
    dep.start()
    log.info("started %d node processes for run %s (broker %s:%d)", kit.n_nodes, kit.run_id, kit.broker_host, kit.broker_port)
    try:
        if on_start is not None:
            on_start(dep)
        codes = dep.wait(progress=progress, watchdog=timeouts.startup_timeout + 4 * timeouts.stall)
    finally:
        dep.terminate()
    wall = time.perf_counter() - t0
    doc = collect_results(kit, codes, wall, exit_times=dep.exit_times, launched_unix=dep.started_unix)
    doc["deployment"]["launch"] = dep.launch.hex()
    return doc


def collect_results(
    kit: Kit,
    codes: Sequence[int],
    wall: float,
    *,
    exit_times: dict[int, float] | None = None,
    launched_unix: float | None = None,
) -> dict[str, Any]:
    """Read every node's result file, check agreement and build the ``result.json`` document.

    ``exit_times`` (seconds after launch, per node) and ``launched_unix`` (when the first
    process was started) add launcher-relative timings to the per-node entries.
    """
    reports: list[dict[str, Any] | None] = []
    for i in range(kit.n_nodes):
        try:
            reports.append(json.loads(kit.result_path(i).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            reports.append(None)
    # nodes the others agreed to drop (on_dropout = "continue") are not failures of the run
    dropped: dict[int, dict[str, Any]] = {}
    for rep in reports:
        if rep is not None and rep.get("status") == "finished":
            for d in rep.get("dropped", []):
                dropped.setdefault(int(d["node"]), d)
    failed = [
        i for i, rep in enumerate(reports) if i not in dropped and (codes[i] != 0 or rep is None or rep.get("status") != "finished")
    ]
    if failed:
        raise DeploymentFailed(_failure_summary(kit, codes, reports, failed))
    survivors = [i for i in range(kit.n_nodes) if i not in dropped]
    ok: list[dict[str, Any]] = []
    for i in survivors:
        rep = reports[i]
        assert rep is not None  # a survivor without a report is in `failed` above
        ok.append(rep)
    sets = {tuple(sorted(int(d["node"]) for d in rep.get("dropped", []))) for rep in ok}
    if len(sets) > 1:
        raise DeploymentFailed(f"deployment failed: the surviving nodes disagree on who dropped out ({sorted(sets)})")
    doc = _combine(kit, ok, wall, exit_times or {}, launched_unix)
    doc["deployment"]["dropped"] = [
        {"node": k, "iteration": int(d["iteration"]), "detected_by": int(d["detected_by"])} for k, d in sorted(dropped.items())
    ]
    return doc


def _failure_summary(kit: Kit, codes: Sequence[int], reports: Sequence[dict | None], failed: list[int]) -> str:
    def reason(i: int) -> str:
        rep = reports[i]
        if rep is not None and rep.get("error"):
            return str(rep["error"])
        code = codes[i]
        if code < 0:
            return f"node {i} was killed by {signal.Signals(-code).name} (no result)"
        tail = _last_line(kit.log_path(i))
        return f"node {i} exited with code {code}" + (f": {tail}" if tail else "")

    reasons = {i: reason(i) for i in failed}
    # Prefer a node that failed by itself (bad data, a violation it caught) over one that only
    # noticed a neighbour's absence, and that over one told by a neighbour.
    def rank(i: int) -> int:
        text = reasons[i]
        if "run stopped" in text or "launcher" in text:
            return 2
        return 1 if any(w in text for w in ("never came online", "fell silent", "no progress", "was killed by")) else 0

    # Among nodes that noticed a silence, prefer one accusing the node most others accuse: a
    # node that was itself paused (SIGSTOP) wakes up to find every neighbour gone and accuses
    # them all, while its neighbours agree on it.
    accused = {i: re.findall(r"\bnode (\d+) fell silent", reasons[i]) for i in failed}
    votes = collections.Counter(a for names in accused.values() for a in set(names))
    primary = min(failed, key=lambda i: (rank(i), -max((votes[a] for a in accused[i]), default=0), i))
    others = len(failed) - 1
    more = f"; {others} other node{'s' if others != 1 else ''} stopped too" if others else ""
    return f"deployment failed: {reasons[primary]}{more} (logs: {kit.root / 'nodes'}/node*/node.log)"


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""


def _flat(rep: dict[str, Any]) -> np.ndarray:
    return np.concatenate([np.ravel(rep["weights"]), np.ravel(rep["means"]), np.ravel(rep["covariances"])])


def _combine(kit: Kit, reports: list[dict[str, Any]], wall: float, exit_times: dict[int, float], launched_unix: float | None) -> dict[str, Any]:
    from p2pem.simulate import RunResult, relative_error

    ref = reports[0]
    n_iters = {r["n_iter"] for r in reports}
    if len(n_iters) != 1:
        raise ProtocolError(f"nodes disagree on the number of EM iterations: {sorted(n_iters)}")
    flat0 = _flat(ref)
    spread = max((relative_error(_flat(r), flat0) for r in reports[1:]), default=0.0)
    if not spread <= kit.max_node_spread:
        raise ProtocolError(f"nodes ended with different models: relative spread {spread:.3g} > {kit.max_node_spread:g}")
    iterations = sorted({int(k) for r in reports for k in r["rounds"]})
    rounds = {it: float(np.mean([r["rounds"][str(it)] for r in reports])) for it in iterations}
    roster = Roster.load(kit.roster_path)
    spec = roster.protocol_spec()
    run = RunResult(
        protocol=getattr(spec, "label", spec.name),
        protocol_params=spec.params(),
        weights=np.asarray(ref["weights"]),
        means=np.asarray(ref["means"]),
        covariances=np.asarray(ref["covariances"]),
        loglik=list(ref["loglik"]),
        n_iter=int(ref["n_iter"]),
        converged=bool(ref["converged"]),
        consensus_iterations=[rounds[k] for k in iterations if k > 0],
        init_consensus_iterations=rounds.get(0),
        messages=int(sum(r["messages"] for r in reports)),
        bytes=int(sum(r["bytes"] for r in reports)),
        wall_s=wall,
        node_spread=spread,
        unconverged_iterations=sorted(set().union(*(r["unconverged_iterations"] for r in reports))),
    )
    nodes = []
    for r in reports:
        t = r["timings"]
        nodes.append(
            {
                "node_id": r["node_id"],
                "n_rows": r["n_rows"],
                "messages": r["messages"],
                "bytes": r["bytes"],
                **{k: v for k, v in r["wire"].items()},
                "connect_s": t.get("connected_s"),
                "online_s": t.get("online_s"),
                "online_after_launch_s": None
                if launched_unix is None or t.get("online_s") is None
                else t["started_unix"] + t["online_s"] - launched_unix,
                "run_s": None if t.get("finished_s") is None or t.get("online_s") is None else t["finished_s"] - t["online_s"],
                "agree_s": None if t.get("agreed_s") is None or t.get("finished_s") is None else t["agreed_s"] - t["finished_s"],
                **{k: v for k, v in r.get("costs", {}).items()},
                "total_s": t.get("total_s"),
                "cpu_s": r.get("cpu_s"),
                "online_cpu_s": t.get("online_cpu_s"),
                "rusage": r.get("rusage"),
                "exit_s": exit_times.get(r["node_id"]),
            }
        )
    from p2pem.runner import RESULT_FORMAT

    doc: dict[str, Any] = {"format": RESULT_FORMAT[0], "version": RESULT_FORMAT[1]}
    scenario = None
    if kit.scenario_file is not None and kit.scenario_file.exists():
        from p2pem.runner import build_graph, graph_summary
        from p2pem.scenario import load_scenario

        scenario = load_scenario(kit.scenario_file)
        doc.update(scenario=scenario.name, scenario_file=str(kit.scenario_file), seed=scenario.seed, graph=graph_summary(build_graph(scenario)))
    else:
        doc.update(scenario=None, scenario_file=None, seed=None, graph={"n_nodes": roster.n_nodes, "diameter": roster.diameter})
    doc["n_rows"] = int(sum(r["n_rows"] for r in reports))
    doc["protocols"] = [run.to_json()]
    run_s = [n["run_s"] for n in nodes if n["run_s"] is not None]
    online = [n["online_after_launch_s"] for n in nodes if n["online_after_launch_s"] is not None]
    doc["deployment"] = {
        "run_id": kit.run_id,
        "broker": f"{kit.broker_host}:{kit.broker_port}",
        "n_processes": kit.n_nodes,
        "seeded": kit.seeded,
        "secrets": "INSECURE: protocol noise from the scenario seed (reproducible, not private)" if kit.seeded else "OS entropy",
        "wall_s": wall,
        "startup_s": max(online) if online else None,  # launch -> last node online
        "run_s": max(run_s) if run_s else None,
        "envelopes_published": int(sum(n["published"] for n in nodes)),
        "wire_bytes": int(sum(n["wire_bytes"] for n in nodes)),
        "control_messages": int(sum(n["control_sent"] for n in nodes)),
        "deliveries": int(sum(n["received"] for n in nodes)),
        "duplicates": int(sum(n["duplicates"] for n in nodes)),
        "rejected": int(sum(sum(n["rejected"].values()) for n in nodes)),
        "reconnects": int(sum(n["reconnects"] for n in nodes)),
        "node_cpu_s": float(sum(n["cpu_s"] or 0.0 for n in nodes)),
        "nodes": nodes,
    }
    return doc


def write_result(kit: Kit, doc: dict[str, Any]) -> Path:
    """Write ``DIR/result.json`` atomically."""
    from p2pem.files import write_json

    return write_json(kit.root / "result.json", doc)


def compare_with_simulate(kit: Kit, doc: dict[str, Any]) -> float:
    """Largest relative difference of weights, means, covariances to ``p2pem simulate`` (vectorised)."""
    from p2pem.runner import build_graph, em_settings
    from p2pem.scenario import load_data, load_scenario
    from p2pem.simulate import relative_error, run_protocol

    if kit.scenario_file is None:
        raise ConfigError("the kit has no scenario to simulate")
    scenario = load_scenario(kit.scenario_file)
    roster = Roster.load(kit.roster_path)
    schedule = {int(d["node"]): int(d["iteration"]) for d in doc.get("deployment", {}).get("dropped", [])}
    if schedule:
        from p2pem.deploy.dropout import simulate_with_dropouts
        from p2pem.simulate import protocol_streams

        parts = load_data(scenario)
        sim: Any
        sim, _ = simulate_with_dropouts(
            parts, roster.neighbours, roster.protocol_spec(), em_settings(scenario), schedule,
            rngs=protocol_streams(scenario.streams()["protocol"], len(parts)),
        )
    else:
        sim = run_protocol(
            load_data(scenario), build_graph(scenario), roster.protocol_spec(), em_settings(scenario), seed=scenario.streams()["protocol"]
        )
    run = doc["protocols"][0]
    err = 0.0
    for key, ref in (("weights", sim.weights), ("means", sim.means), ("covariances", sim.covariances)):
        err = max(err, relative_error(run[key], ref))
    return err


def deploy(
    scenario,
    out: str | os.PathLike[str],
    *,
    protocol: str | None = None,
    broker: tuple[str, int] | None = None,
    listen: str = "127.0.0.1",
    run_id: str | None = None,
    seeded: bool = False,
    timeouts: Timeouts | None = None,
    progress: Callable[[DeployProgress], None] | None = None,
    on_broker: Callable[[Any], None] | None = None,
) -> tuple[Kit, dict[str, Any]]:
    """Prepare a kit in ``out``, start a broker (unless ``broker`` is given), run, collect.

    Writes ``out/result.json`` on success.  Node processes and the broker started here are
    stopped on return and on any exception, Ctrl-C included.

    Returns
    -------
    (Kit, dict)
        The kit and the ``result.json`` document.
    """
    from p2pem.deploy.broker import free_port

    if broker is None:
        _, _, broker = deploy_settings(scenario)
    address = broker if broker is not None else (listen, free_port(listen))
    kit = prepare_kit(scenario, out, broker=address, protocol=protocol, run_id=run_id, seeded=seeded, timeouts=timeouts)
    return kit, run_kit(kit, start_broker=broker is None, progress=progress, on_broker=on_broker)


def run_kit(
    kit: Kit,
    *,
    start_broker: bool,
    progress: Callable[[DeployProgress], None] | None = None,
    on_broker: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """Run a prepared kit (starting its broker if asked) and write ``result.json``."""
    handle = None
    try:
        if start_broker:
            from p2pem.deploy.broker import PortInUse, free_port

            try:
                handle = start_kit_broker(kit)
            except PortInUse:
                kit = kit.set_broker(kit.broker_host, free_port(kit.broker_host))
                handle = start_kit_broker(kit)
            if on_broker is not None:
                on_broker(handle)
        doc = run_deployment(kit, progress=progress)
        write_result(kit, doc)
        return doc
    finally:
        if handle is not None:
            handle.stop()


def assemble_roster(
    scenario_path: str | os.PathLike[str],
    public: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    run_id: str | None = None,
    protocol: str | None = None,
    broker_dir: str | os.PathLike[str] | None = None,
) -> tuple[Roster, Path | None]:
    """Build a roster from a scenario and the nodes' ``.pub`` files (multi-host set-up).

    Parameters
    ----------
    scenario_path : path-like
        Gives the graph, the EM settings and the protocol.
    public : list of path-like
        ``.pub`` files written by ``p2pem keys new --node-id I``, or folders holding them.
    out : path-like
        Roster file to write.
    run_id, protocol : str, optional
    broker_dir : path-like, optional
        Also write the broker's password file, ACL and per-node passwords there
        (see :func:`write_broker_auth`).

    Raises
    ------
    ConfigError
        A node id is missing, repeated or out of range, a file is not a public identity,
        or the protocol cannot be deployed.
    """
    import tomllib

    from p2pem.deploy.crypto import PublicIdentity
    from p2pem.runner import build_graph, em_settings
    from p2pem.scenario import load_scenario

    scenario = load_scenario(scenario_path)
    spec = _pick_protocol(scenario, protocol)
    graph = build_graph(scenario)
    spec.validate(graph)
    n = graph.number_of_nodes()
    files: list[Path] = []
    for item in public:
        p = Path(item)
        files += sorted(p.glob("*.pub")) if p.is_dir() else [p]
    keys: dict[int, Any] = {}
    for f in files:
        try:
            with open(f, "rb") as handle:
                doc = tomllib.load(handle)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{f}: not a readable public identity ({exc})") from None
        node_id = doc.pop("id", None)
        doc.pop("fingerprint", None)
        if not isinstance(node_id, int) or isinstance(node_id, bool):
            raise ConfigError(f"{f}: no node id (write it with `p2pem keys new --node-id I`, or add `id = I`)")
        if not 0 <= node_id < n:
            raise ConfigError(f"{f}: node id {node_id} outside 0..{n - 1} (the scenario's graph has {n} nodes)")
        if node_id in keys:
            raise ConfigError(f"{f}: a second public key for node {node_id}")
        try:
            keys[node_id] = PublicIdentity.from_dict(doc)
        except ConfigError as exc:
            raise ConfigError(f"{f}: {exc}") from None
    missing = [i for i in range(n) if i not in keys]
    if missing:
        raise ConfigError(f"no public key for node(s) {', '.join(map(str, missing[:20]))} (the graph has {n} nodes)")
    roster = Roster.build(run_id or make_run_id(scenario.name), graph, em_settings(scenario), spec, [keys[i] for i in range(n)])
    roster.save(Path(out))
    written = None
    if broker_dir is not None:
        written = Path(broker_dir)
        written.mkdir(parents=True, exist_ok=True)
        write_broker_auth(written, roster.run_id, n)
    return roster, written
