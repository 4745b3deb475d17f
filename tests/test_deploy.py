"""Deployments of real node processes against a real Mosquitto (marked ``mqtt``).

Every test starts its own broker from the kit that ``p2pem deploy`` writes (password file
and ACL included) and one OS process per node, so what is tested is what a user runs.  EM
settings are small (a few iterations) to keep the whole file around a minute on two cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import unavailable  # the tests folder is on sys.path (pytest's rootdir import mode)

from p2pem.deploy.broker import find_mosquitto, free_port
from p2pem.deploy.codec import Codec
from p2pem.deploy.crypto import Identity
from p2pem.deploy.config import Timeouts
from p2pem.deploy.roster import Roster
from p2pem.deploy.kit import prepare_kit, start_kit_broker
from p2pem.deploy.launcher import run_deployment
from p2pem.deploy.results import collect_results
from p2pem.deploy.supervise import Deployment, DeploymentFailed
from p2pem.errors import TransportError
from p2pem.messages import Message
from p2pem.builders import build_graph, em_settings, build_protocols as protocols
from p2pem.builders import load_data
from p2pem.scenario import load_scenario
from p2pem.simulate import run_protocol
from p2pem.deploy.transports.mqtt import LinkTimeout, MqttLink, topic_for

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "parkinsons-20.toml"

pytestmark = [
    pytest.mark.mqtt,
    pytest.mark.skipif(find_mosquitto() is None, reason="mosquitto is not installed (apt-get install mosquitto)"),
]


def scenario_file(tmp_path: Path, *, n_nodes: int, max_iter: int, timeout: float = 10.0, name: str = "scenario") -> Path:
    """scenarios/parkinsons-20.toml with fewer nodes, fewer EM iterations and a shorter timeout."""
    text = SCENARIO.read_text()
    text = text.replace('"../data/parkinsons.data"', json.dumps(str(ROOT / "data" / "parkinsons.data")))
    text = re.sub(r"(?m)^n_nodes = \d+", f"n_nodes = {n_nodes}", text)
    text = re.sub(r"(?m)^max_iter = \d+", f"max_iter = {max_iter}", text)
    text = re.sub(r"(?m)^timeout = [\d.]+", f"timeout = {timeout}", text)
    text = re.sub(r"(?m)^heartbeat = [\d.]+", f"heartbeat = {min(1.0, timeout / 4)}", text)
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def simulate(path: Path, *, record: bool = False):
    scenario = load_scenario(path)
    return run_protocol(
        load_data(scenario),
        build_graph(scenario),
        protocols(scenario)[0],
        em_settings(scenario),
        seed=scenario.streams()["protocol"],
        record_trace=record,
    )


def max_rel_diff(run: dict, sim) -> float:
    err = 0.0
    for key, ref in (("weights", sim.weights), ("means", sim.means), ("covariances", sim.covariances)):
        err = max(err, float(np.max(np.abs(np.asarray(run[key]) - ref)) / np.max(np.abs(ref))))
    return err


def node_reports(kit) -> list[dict]:
    return [json.loads(kit.result_path(i).read_text()) for i in range(kit.n_nodes)]


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Capture:
    """A broker client subscribed to ``#`` in a thread of its own, recording every message."""

    def __init__(self, host: str, port: int, username: str, password: str) -> None:
        self.args = (host, port, username, password)
        self.items: list[tuple[str, bytes]] = []
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="capture", daemon=True)

    def __enter__(self) -> Capture:
        self.thread.start()
        assert self.ready.wait(10), "capture client did not connect"
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        async def main() -> None:
            host, port, user, password = self.args
            async with MqttLink(host, port, username=user, password=password, subscriptions=["#"], timeout=5) as link:
                self.ready.set()
                while not self.stop.is_set():
                    try:
                        self.items.append(tuple(await link.receive(timeout=0.1)))
                    except LinkTimeout:
                        pass

        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            self.error = exc
            self.ready.set()


def contains_any(blob: bytes, values: np.ndarray) -> np.ndarray:
    """For each float64 value: does its 8-byte pattern (either byte order) occur anywhere in ``blob``?"""
    windows = []
    for offset in range(8):
        usable = (len(blob) - offset) // 8 * 8
        windows.append(np.frombuffer(blob[offset : offset + usable], dtype="<u8"))
    windows = np.concatenate(windows)
    little = np.ascontiguousarray(values, dtype="<f8").view("<u8")
    big = np.ascontiguousarray(values, dtype=">f8").view(">u8").astype("<u8")
    return np.isin(little, windows) | np.isin(big, windows)


# ------------------------------------------------------------------------------------------


def test_ten_node_processes_equal_simulate_and_reject_attacks(tmp_path):
    """>= 10 processes == simulate; duals never in clear on the broker; forged, non-member,
    tampered and replayed messages are rejected and logged, and the model is still exact."""
    path = scenario_file(tmp_path, n_nodes=10, max_iter=5)  # attacks land mid-run
    sim = simulate(path, record=True)
    scenario = load_scenario(path)
    kit = prepare_kit(scenario, tmp_path / "out", broker=("127.0.0.1", free_port()), seeded=True)
    roster = Roster.load(kit.roster_path)
    run_id = roster.run_id
    observer_codec = Codec(run_id, roster.public_keys())
    broker = start_kit_broker(kit)
    creds = kit.credentials()
    injected: dict[str, int] = {}
    injected_data: list[bytes] = []
    try:
        with Capture(broker.host, broker.port, "observer", creds["observer"]) as spy:

            def attack(dep: Deployment) -> None:
                wait_until(lambda: dep.progress().min_iter >= 1, 120, "the first M-step")
                asyncio.run(inject(dep))

            async def inject(dep: Deployment) -> None:
                captured = list(spy.items)
                envs = [(topic, data, observer_codec.parse(data)) for topic, data in captured if "/from/" in topic and data]
                dual_topic, dual_env, _ = next(e for e in envs if e[2].kind == "dual-init")
                old_topic, old_env, _ = next(e for e in envs if e[2].kind == "primal" and e[2].iteration == 0)
                it = dep.progress().min_iter + 1
                victim = roster.neighbours[0][0]
                fake = Identity.generate()
                p = len(sim.means.ravel())
                public = roster.public_keys()

                async def publish(topic: str, data: bytes) -> None:
                    injected_data.append(data)
                    await admin.publish(topic, data)

                async with MqttLink(broker.host, broker.port, username="admin", password=creds["admin"], timeout=5) as admin:
                    # a message claiming to be node 0's, tagged with keys agreed from a key the roster does not pin
                    forged = Message(0, roster.neighbours[0], it, 1, "primal", np.zeros(p), False, (0, 0))
                    await publish(topic_for(run_id, forged), Codec(run_id, {**public, 0: fake.public}, identity=fake, node_id=0).encode(forged))
                    # a non-member (id 99) writing to a topic the victim reads
                    outsider = Message(99, (victim,), it, 1, "primal", np.zeros(p), False, (0, 0))
                    data = Codec(run_id, {**public, 99: fake.public}, identity=fake, node_id=99).encode(outsider)
                    await publish(f"p2pem/{run_id}/from/0/to/{victim}", data)
                    # a real dual-init with one ciphertext byte flipped
                    tampered = bytearray(dual_env)
                    tampered[-80] ^= 0x01
                    await publish(dual_topic, bytes(tampered))
                    # an old, genuine message played again two EM iterations later
                    await publish(old_topic, old_env)
                injected.update(forged=len(roster.neighbours[0]), outsider=1, tampered=1, replayed=1)

            doc = run_deployment(kit, on_start=attack)
    finally:
        broker.stop()

    # the deployment reproduces the simulator
    run = doc["protocols"][0]
    assert max_rel_diff(run, sim) <= 1e-9
    assert run["n_iter"] == sim.n_iter and run["messages"] == sim.messages and run["bytes"] == sim.bytes
    assert np.allclose(run["loglik"], sim.loglik, rtol=1e-9, atol=0)
    assert doc["deployment"]["n_processes"] == 10 and run["node_spread"] <= 1e-9

    # every attack was refused, logged, counted, and nothing else was
    assert injected
    rejected: dict[str, int] = {}
    for rep in node_reports(kit):
        for reason, count in rep["wire"]["rejected"].items():
            rejected[reason] = rejected.get(reason, 0) + count
    assert rejected.get("ForgedMessage", 0) == injected["forged"] + injected["tampered"]
    assert rejected.get("UnknownSender", 0) == 1
    # the replay: authentic but two EM iterations old, ignored by every node that got it
    assert sum(rep["wire"]["stale"] for rep in node_reports(kit)) >= 1
    assert set(rejected) <= {"ForgedMessage", "UnknownSender"}
    logs = "".join(kit.log_path(i).read_text() for i in range(kit.n_nodes))
    assert "rejected a message (ForgedMessage" in logs and "rejected a message (UnknownSender" in logs
    assert "ignored a replayed or late primal message" in logs

    # the eavesdropper on '#' never saw an initial dual in clear ...
    items = [(t, d) for t, d in spy.items if "/from/" in t and d]
    blob = b"".join(d for _, d in items)
    duals = [m for m in sim.trace if m.kind == "dual-init"]
    dual_values = np.concatenate([np.asarray(m.payload, dtype=float).ravel() for m in duals])
    assert not contains_any(blob, dual_values).any()
    assert not any(np.asarray(m.payload).tobytes() in blob for m in duals[:200])
    # ... although it saw the traffic (primal values do travel in clear, by design) ...
    primal_values = np.concatenate([np.asarray(m.payload).ravel() for m in sim.trace if m.kind == "primal"][:50])
    assert contains_any(blob, primal_values).all()
    # ... and the duals it could not read are exactly the simulator's (decrypted with node keys)
    # an observer can read headers but not authenticate them; leave out what the test injected
    genuine = [(t, d) for t, d in items if d not in injected_data]
    sealed = [(t, d) for t, d in genuine if observer_codec.parse(d).kind == "dual-init"]
    assert len(sealed) == len(duals)
    by_key = {(m.sender, m.receivers[0], m.iteration): m.payload for m in duals}
    receiver = int(sealed[0][0].rsplit("/", 1)[1])
    launch = bytes.fromhex(doc["deployment"]["launch"])
    codec = Codec(run_id, roster.public_keys(), identity=Identity.load(kit.node_dir(receiver) / "node.key"), node_id=receiver, launch=launch)
    opened = codec.decode(sealed[0][1])
    assert opened.encrypted and opened.payload.tobytes() == by_key[(opened.sender, receiver, opened.iteration)].tobytes()


def test_acl_refuses_publishing_as_another_node(tmp_path):
    path = scenario_file(tmp_path, n_nodes=4, max_iter=1)
    kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=("127.0.0.1", free_port()), seeded=True)
    run_id = kit.run_id
    password = {i: (kit.node_dir(i) / "broker.password").read_text().strip() for i in range(kit.n_nodes)}
    creds = kit.credentials()
    broker = start_kit_broker(kit)

    async def scenario() -> None:
        def link(user: str, secret: str, **kw) -> MqttLink:
            return MqttLink(broker.host, broker.port, username=user, password=secret, timeout=3, **kw)

        async with link("observer", creds["observer"], subscriptions=[f"p2pem/{run_id}/#"]) as observer:
            async with link("node1", password[1]) as node1:
                try:
                    await node1.publish(f"p2pem/{run_id}/from/2/all", b"node 1 pretending to be node 2")
                except TransportError:
                    pass  # Mosquitto may already have dropped the connection
                for _ in range(100):
                    if not node1.connected:
                        break
                    await asyncio.sleep(0.02)
                assert not node1.connected  # Mosquitto 2 disconnects a client that breaks its ACL
            async with link("node1", password[1]) as node1:
                await node1.publish(f"p2pem/{run_id}/from/1/all", b"node 1 as itself")
            async with link("observer", creds["observer"]) as other:
                try:
                    await other.publish(f"p2pem/{run_id}/from/1/all", b"the observer may only read")
                except TransportError:
                    pass
                for _ in range(100):
                    if not other.connected:
                        break
                    await asyncio.sleep(0.02)
            assert await observer.receive(timeout=3) == (f"p2pem/{run_id}/from/1/all", b"node 1 as itself")
            with pytest.raises(LinkTimeout):
                await observer.receive(timeout=0.5)
        for user, secret in (("node1", "wrong"), (None, None)):
            with pytest.raises(TransportError, match="Not authorized|not authori[sz]ed|refused"):
                async with MqttLink(broker.host, broker.port, username=user, password=secret, timeout=3):
                    pass

    try:
        asyncio.run(asyncio.wait_for(scenario(), 30))
    finally:
        broker.stop()


def test_kit_broker_on_a_taken_port_moves_the_kit_to_a_free_one(tmp_path):
    """The kit's port is taken after prepare_kit: PortInUse, or (as run_kit asks) another port
    that the kit and every node config then name."""
    import socket

    from p2pem.deploy.broker import PortInUse
    from p2pem.deploy.config import NodeConfig

    path = scenario_file(tmp_path, n_nodes=4, max_iter=1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=("127.0.0.1", taken), seeded=True)
        with pytest.raises(PortInUse, match="already in use"):
            start_kit_broker(kit)
        broker = start_kit_broker(kit, other_port_if_taken=True)
    try:
        assert broker.running and broker.port != taken
        moved = kit.set_broker(kit.broker_host, broker.port)
        assert type(kit).load(kit.root).broker_port == moved.broker_port == broker.port
        assert {NodeConfig.load(kit.config_path(i)).broker.port for i in range(kit.n_nodes)} == {broker.port}
    finally:
        broker.stop()


@pytest.mark.parametrize("how", ["killed", "silent"])
def test_failed_node_stops_every_other_node_naming_it(tmp_path, how):
    """A node that dies (SIGKILL) or goes silent (SIGSTOP): every other node exits non-zero
    within the timeout (plus detection slack), naming it and the round."""
    timeout = 4.0
    path = scenario_file(tmp_path, n_nodes=8, max_iter=40, timeout=timeout)
    kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=("127.0.0.1", free_port()), seeded=True)
    broker = start_kit_broker(kit)
    victim = 3
    others = [i for i in range(kit.n_nodes) if i != victim]
    try:
        dep = Deployment(kit)
        dep.start()
        try:
            wait_until(lambda: dep.progress().min_iter >= 1, 120, "the first M-step")
            os.kill(dep.processes[victim].pid, signal.SIGKILL if how == "killed" else signal.SIGSTOP)
            if how == "silent":
                wait_until(lambda: all(dep.processes[i].poll() is not None for i in others), 30, "the other nodes to stop")
                os.kill(dep.processes[victim].pid, signal.SIGCONT)
            codes = dep.wait(watchdog=60)
        finally:
            dep.terminate()
    finally:
        broker.stop()
    if how == "killed":
        assert codes[victim] == -signal.SIGKILL
    else:
        assert codes[victim] == 5  # woken up, it finds its neighbours gone and stops too
    assert all(codes[i] != 0 for i in others)
    detectors = 0
    for i in others:
        rep = json.loads(kit.result_path(i).read_text())
        assert rep["status"] == "failed" and rep["exit_code"] == 5
        assert re.search(rf"node {victim} fell silent in EM iteration \d+, protocol round \d+", rep["error"]), rep["error"]
        assert f"node {i}" in rep["error"]
        # the silence timeout, not the stall limit (3 x timeout), stopped the run
        detectors += bool(re.search(rf"nothing received for [\d.]+ s \(timeout {timeout:g} s\)", rep["error"]))
        assert "no progress" not in rep["error"]
    assert detectors >= 1
    with pytest.raises(DeploymentFailed, match=rf"node {victim} fell silent"):
        collect_results(kit, codes, 0.0)


def test_broker_restart_is_survived_with_the_exact_model(tmp_path):
    path = scenario_file(tmp_path, n_nodes=8, max_iter=5, timeout=8.0)
    kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=("127.0.0.1", free_port()), seeded=True)
    broker = start_kit_broker(kit)
    try:

        def restart(dep: Deployment) -> None:
            wait_until(lambda: dep.progress().min_iter >= 2, 120, "two M-steps")
            broker.restart()

        doc = run_deployment(kit, on_start=restart)
    finally:
        broker.stop()
    assert doc["deployment"]["reconnects"] >= kit.n_nodes
    assert doc["deployment"]["duplicates"] > 0  # the re-published copies, dropped by the ReplayGuard
    assert max_rel_diff(doc["protocols"][0], simulate(path)) <= 1e-9


def test_broker_that_stays_down_ends_every_node_cleanly(tmp_path):
    path = scenario_file(tmp_path, n_nodes=4, max_iter=40, timeout=3.0)
    timeouts = Timeouts(timeout=3.0, reconnect_timeout=2.0)
    kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=("127.0.0.1", free_port()), seeded=True, timeouts=timeouts)
    broker = start_kit_broker(kit)
    dep = Deployment(kit)
    dep.start()
    try:
        wait_until(lambda: dep.progress().min_iter >= 1, 120, "the first M-step")
        broker.stop()
        codes = dep.wait(watchdog=60)
    finally:
        dep.terminate()
        broker.stop()
    assert codes == [5] * kit.n_nodes
    for i in range(kit.n_nodes):
        error = json.loads(kit.result_path(i).read_text())["error"]
        assert re.fullmatch(
            rf"node {i}: lost the MQTT broker at 127\.0\.0\.1:{kit.broker_port} in EM iteration \d+, protocol round \d+ "
            rf"and could not reconnect within 2 s \(.*\)",
            error,
        ), error


def test_staggered_start_is_waited_for(tmp_path):
    """A node that starts long after the others (longer than the no-progress limit of the
    nodes two hops away) delays the run but does not fail it."""
    path = scenario_file(tmp_path, n_nodes=6, max_iter=2, timeout=2.0)
    text = re.sub(r"(?s)\[graph\].*?(?=\[em\])", '[graph]\nkind = "edges"\nedges = [[0, 1], [1, 2], [2, 3], [3, 4], [4, 5], [5, 0], [0, 3]]\n\n', path.read_text())
    path.write_text(text)
    kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=("127.0.0.1", free_port()), seeded=True, timeouts=Timeouts(timeout=2.0, startup_timeout=30.0))
    late = 2  # neighbours 1 and 3; nodes 0, 4, 5 wait for it through them
    delay = 3 * 2.0 + 2.0
    broker = start_kit_broker(kit)
    try:
        doc = run_deployment(kit, wrap=lambda i: ["sh", "-c", f'sleep {delay}; exec "$0" "$@"'] if i == late else [])
    finally:
        broker.stop()
    assert doc["deployment"]["startup_s"] >= delay
    assert max_rel_diff(doc["protocols"][0], simulate(path)) <= 1e-9


def test_nodes_refuse_a_neighbour_with_another_roster(tmp_path):
    """Node 0 runs with another roster.  The others start only after node 0 and a neighbour
    of it have already detected that and exited (the order that once left late nodes waiting
    out their start-up timeout); they must still stop at once, blaming the roster."""
    path = scenario_file(tmp_path, n_nodes=4, max_iter=2, timeout=3.0)
    startup = 30.0
    kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=("127.0.0.1", free_port()), seeded=True, timeouts=Timeouts(timeout=3.0, startup_timeout=startup))
    other = kit.root / "other-roster.toml"
    other.write_text(kit.roster_path.read_text().replace("max_iter = 2", "max_iter = 3", 1))
    config = kit.config_path(0)
    config.write_text(config.read_text().replace('roster = "../../roster.toml"', f'roster = "{other}"'))
    first = (0, Roster.load(kit.roster_path).neighbours[0][0])
    gone = " && ".join(f"[ -e {kit.result_path(i)} ]" for i in first)

    def wrap(i: int) -> list[str]:
        if i in first:
            return []
        # wait (at most 60 s) until both first nodes have written their result and exited
        return ["sh", "-c", f'for _ in $(seq 600); do {gone} && break; sleep 0.1; done; exec "$0" "$@"']

    broker = start_kit_broker(kit)
    try:
        dep = Deployment(kit, wrap=wrap)
        dep.start()
        try:
            codes = dep.wait(watchdog=90)
        finally:
            dep.terminate()
    finally:
        broker.stop()
    assert all(code != 0 for code in codes)
    reports = node_reports(kit)
    for rep in reports:
        assert rep["status"] == "failed" and "roster" in rep["error"], rep["error"]
    for i in range(kit.n_nodes):
        if i not in first:
            # no start-up timeout: a late node learns of the failure from the retained aborts
            assert "never came online" not in reports[i]["error"] and "differs from its own" in reports[i]["error"], reports[i]["error"]
    with pytest.raises(DeploymentFailed, match="roster"):
        collect_results(kit, codes, 0.0)


def test_node_whose_neighbours_never_come_online_stops_naming_them(tmp_path):
    path = scenario_file(tmp_path, n_nodes=4, max_iter=2)
    kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=("127.0.0.1", free_port()), seeded=True, timeouts=Timeouts(timeout=2.0, startup_timeout=2.0))
    broker = start_kit_broker(kit)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "p2pem", "node", "--config", str(kit.config_path(0)), "--launch", "ab" * 16], capture_output=True, text=True, timeout=60
        )
    finally:
        broker.stop()
    neighbours = Roster.load(kit.roster_path).neighbours[0]
    assert result.returncode == 5
    assert "never came online (no hello within 2 s of start-up)" in result.stderr and ", ".join(map(str, neighbours)) in result.stderr
    assert json.loads(kit.result_path(0).read_text())["status"] == "failed"


def test_cli_deploy_writes_the_simulate_schema(tmp_path):
    path = scenario_file(tmp_path, n_nodes=4, max_iter=2)
    run = subprocess.run(
        [sys.executable, "-m", "p2pem", "deploy", str(path), "--out", str(tmp_path / "dep"), "-q", "--check", "--insecure-reproducible-seed"],
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert run.returncode == 0, run.stderr
    assert "largest relative difference to `p2pem simulate`" in run.stdout
    sim = subprocess.run(
        [sys.executable, "-m", "p2pem", "simulate", str(path), "--out", str(tmp_path / "sim"), "-q"], capture_output=True, text=True, timeout=120
    )
    assert sim.returncode == 0, sim.stderr
    dep_doc = json.loads((tmp_path / "dep" / "result.json").read_text())
    sim_doc = json.loads((tmp_path / "sim" / "result.json").read_text())
    assert set(sim_doc) <= set(dep_doc) and "deployment" in dep_doc
    from test_schemas import validate

    validate(dep_doc)
    validate(sim_doc)
    assert set(sim_doc["protocols"][0]) == set(dep_doc["protocols"][0])
    assert dep_doc["graph"] == sim_doc["graph"] and dep_doc["n_rows"] == sim_doc["n_rows"]
    a, b = dep_doc["protocols"][0], sim_doc["protocols"][0]
    for key in ("weights", "means", "covariances"):
        assert np.allclose(a[key], b[key], rtol=1e-9, atol=0)
    assert (a["messages"], a["bytes"], a["consensus_iterations"]) == (b["messages"], b["bytes"], b["consensus_iterations"])
    assert a["resolved_params"] == b["resolved_params"] and a["resolved_params"]["accel"] == "heavy-ball"  # 4 nodes: too few to deflate
    nodes = dep_doc["deployment"]["nodes"]
    assert len(nodes) == 4 and all(n["messages"] > 0 and n["run_s"] > 0 for n in nodes)
    # a node process ran start to end (step parameters, final agreement) without SciPy or networkx
    assert all(n["heavy_modules"] == [] for n in nodes), [n["heavy_modules"] for n in nodes]


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read().decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry))
    return found


def test_ctrl_c_stops_every_node_and_the_broker(tmp_path):
    path = scenario_file(tmp_path, n_nodes=4, max_iter=200)
    out = tmp_path / "dep"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "p2pem", "deploy", str(path), "--out", str(out), "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        logs = [out / "nodes" / f"node{i}" / "node.log" for i in range(4)]
        wait_until(lambda: all(p.exists() and "starting the protocol" in p.read_text() for p in logs), 90, "every node online")
        assert len(_processes_mentioning(str(out))) >= 5  # 4 nodes + the broker
        launcher.send_signal(signal.SIGINT)
        _, err = launcher.communicate(timeout=60)  # an upper bound for a loaded machine; it takes about a second
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.communicate(timeout=10)  # reap it and close its pipes
    assert launcher.returncode == 130 and "interrupted" in err
    wait_until(lambda: not _processes_mentioning(str(out)), 30, "all processes of the deployment to exit")
    assert not (out / "result.json").exists()


# ------------------------------------------------------------------------ network namespaces


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)


def _netns_unavailable() -> str | None:
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    probe = f"p2pem-probe-{os.getpid()}"
    try:
        added = _ip("netns", "add", probe)
    except FileNotFoundError:
        return "the `ip` command (iproute2) is not installed"
    if added.returncode != 0:
        return f"`ip netns add` failed: {added.stderr.strip()}"
    _ip("netns", "del", probe)
    return None


class Namespaces:
    """One namespace holding the broker on a bridge (10.77.0.1/24) and one per node, each
    linked to the bridge by a veth pair (node i at 10.77.0.(10 + i)).  Every address lives
    inside namespaces created here; deleting them removes all links."""

    def __init__(self, n_nodes: int) -> None:
        tag = os.getpid() % 10000
        self.broker = f"p2pem-br-{tag}"
        self.nodes = [f"p2pem-n{i}-{tag}" for i in range(n_nodes)]
        self.created: list[str] = []

    def run(self, *args: str) -> None:
        result = _ip(*args)
        if result.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")

    def __enter__(self) -> Namespaces:
        try:
            self.run("netns", "add", self.broker)
            self.created.append(self.broker)
            ns = ("-n", self.broker)
            self.run(*ns, "link", "set", "lo", "up")
            self.run(*ns, "link", "add", "br0", "type", "bridge")
            self.run(*ns, "addr", "add", "10.77.0.1/24", "dev", "br0")
            self.run(*ns, "link", "set", "br0", "up")
            for i, name in enumerate(self.nodes):
                self.run("netns", "add", name)
                self.created.append(name)
                self.run("-n", name, "link", "set", "lo", "up")
                self.run("-n", name, "link", "add", "eth0", "type", "veth", "peer", "name", f"v{i}", "netns", self.broker)
                self.run("-n", name, "addr", "add", f"10.77.0.{10 + i}/24", "dev", "eth0")
                self.run("-n", name, "link", "set", "eth0", "up")
                self.run(*ns, "link", "set", f"v{i}", "master", "br0")
                self.run(*ns, "link", "set", f"v{i}", "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for name in reversed(self.created):
            _ip("netns", "del", name)
        self.created.clear()


def test_nodes_in_separate_network_namespaces(tmp_path):
    reason = _netns_unavailable()
    if reason is not None:
        unavailable(reason)
    n = 4
    path = scenario_file(tmp_path, n_nodes=n, max_iter=2)
    with Namespaces(n) as nets:
        kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=("10.77.0.1", 1883), seeded=True)
        log = kit.broker_dir / "mosquitto.log"
        broker = subprocess.Popen(
            ["ip", "netns", "exec", nets.broker, str(find_mosquitto()), "-c", str(kit.broker_dir / "mosquitto.conf")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_until(lambda: log.exists() and " running" in log.read_text(), 10, "the broker in its namespace")
            # the nodes cannot reach the broker through loopback: only the veth links lead to it
            probe = subprocess.run(
                ["ip", "netns", "exec", nets.nodes[0], sys.executable, "-c", "import socket; socket.create_connection(('127.0.0.1', 1883), 1)"],
                capture_output=True,
                timeout=20,
            )
            assert probe.returncode != 0
            doc = run_deployment(kit, wrap=lambda i: ["ip", "netns", "exec", nets.nodes[i]])
        finally:
            broker.terminate()
            broker.wait(10)
    assert max_rel_diff(doc["protocols"][0], simulate(path)) <= 1e-9
    text = log.read_text()
    assert all(f"from 10.77.0.{10 + i}" in text for i in range(n))  # every node came over its veth


def deploy_small(tmp_path: Path, scenario: str, data_files: list[str]) -> tuple[Path, dict]:
    """A shipped scenario shrunk to 5 nodes and 4 fixed EM iterations, deployed over the test
    broker with the reproducible seed; its path and its schema-valid result.json."""
    text = (ROOT / "scenarios" / scenario).read_text()
    for name in data_files:
        text = text.replace(f'"../data/{name}"', json.dumps(str(ROOT / "data" / name)))
    text = re.sub(r"(?m)^n_nodes = \d+", "n_nodes = 5", text)
    text = re.sub(r"(?m)^max_iter = \d+", "max_iter = 4", text)
    text = re.sub(r"(?m)^tol = .*$", "tol = 0.0", text)
    text += "\n[deploy]\ntimeout = 10.0\nheartbeat = 1.0\n"
    path = tmp_path / scenario
    path.write_text(text)
    run = subprocess.run(
        [sys.executable, "-m", "p2pem", "deploy", str(path), "--out", str(tmp_path / "dep"), "-q", "--check", "--insecure-reproducible-seed"],
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert run.returncode == 0, run.stderr
    doc = json.loads((tmp_path / "dep" / "result.json").read_text())
    from test_schemas import validate

    validate(doc)
    return path, doc


def test_skew_normal_deployment_equals_simulate(tmp_path):
    """A skew-normal scenario (AIS BMI/Bfat, raw units) deployed as node processes over the
    test broker gives the simulator's model; the roster carries the family."""
    path, doc = deploy_small(tmp_path, "ais_skew.toml", ["ais.csv"])
    assert doc["family"] == {"name": "skew-normal"}
    sim = simulate(path)
    a = doc["protocols"][0]
    for key in ("weights", "locations", "scales", "shapes", "deltas", "means", "covariances"):
        ref = np.asarray(getattr(sim.params, key))
        assert np.max(np.abs(np.asarray(a[key]) - ref)) <= 1e-9 * np.max(np.abs(ref)), key
    assert (a["messages"], a["bytes"]) == (sim.messages, sim.bytes)
    from p2pem.deploy.roster import Roster

    assert Roster.load(tmp_path / "dep" / "roster.toml").em["family"] == {"name": "skew-normal"}


def test_mixed_type_deployment_equals_simulate(tmp_path):
    """A mixed-type scenario (AIS under its public schema, one mixture per sex) deployed as node
    processes over the test broker gives the simulator's model; the roster carries the family
    with its public column layout."""
    path, doc = deploy_small(tmp_path, "synth_ais.toml", ["ais.csv", "ais.schema.toml"])
    family = {"name": "mixed", "n_continuous": 11, "n_categories": [2, 10], "covariance": "diag", "stratify": 0, "strata_weights": None}
    assert doc["family"] == family
    sim = simulate(path)
    a = doc["protocols"][0]
    for key in ("weights", "means", "covariances", "probabilities"):
        ref = np.asarray(getattr(sim.params, key))
        assert np.max(np.abs(np.asarray(a[key]) - ref)) <= 1e-9 * np.max(np.abs(ref)), key
    assert (a["messages"], a["bytes"]) == (sim.messages, sim.bytes)
    from p2pem.deploy.roster import Roster

    assert Roster.load(tmp_path / "dep" / "roster.toml").em["family"] == family


def test_host_with_a_two_column_file_names_itself_and_no_honest_node_is_blamed(tmp_path):
    """The newcomer's misconfigured host: node 3's data.csv holds 2 of the run's 3 columns.
    The roster comes from `p2pem keys roster` (the multi-host path, which once recorded no
    feature count): it carries the public schema, node 3 stops before going online with one
    line naming its own file, and the others stop naming node 3 and nobody else.  Over the
    network-namespace hosts where they can be made, else over local processes."""
    n, victim = 4, 3
    path = scenario_file(tmp_path, n_nodes=n, max_iter=2, timeout=3.0)
    columns = ["MDVP:Fo(Hz)", "MDVP:Fhi(Hz)", "MDVP:Flo(Hz)"]
    data = f'[data]\nsource = "csv"\npath = {json.dumps(str(ROOT / "data" / "parkinsons.data"))}\ncolumns = {json.dumps(columns)}\nsplit = "even"\n\n'
    path.write_text(re.sub(r"(?s)\[data\].*?(?=\[graph\])", lambda _: data, path.read_text()))
    nets = Namespaces(n) if _netns_unavailable() is None else None
    host = "10.77.0.1" if nets is not None else "127.0.0.1"
    timeouts = Timeouts(timeout=3.0, startup_timeout=6.0)
    with nets if nets is not None else contextlib.nullcontext():
        kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=(host, 1883 if nets else free_port()), seeded=True, timeouts=timeouts)
        pubs = [str(kit.root / "nodes" / f"node{i}" / "node.pub") for i in range(n)]
        cli = subprocess.run(
            [sys.executable, "-m", "p2pem", "keys", "roster", str(path), "--public", *pubs, "--run-id", kit.run_id, "--out", str(tmp_path / "roster.toml")],
            capture_output=True, text=True, timeout=60,
        )
        assert cli.returncode == 0, cli.stderr
        os.replace(tmp_path / "roster.toml", kit.roster_path)
        roster = Roster.load(kit.roster_path)
        assert roster.n_features == 3 and roster.columns == tuple(columns)
        bad = kit.root / "nodes" / f"node{victim}" / "data.csv"
        lines = bad.read_text().splitlines()
        bad.write_text("\n".join(",".join(line.split(",")[:2]) for line in lines) + "\n")
        if nets is not None:
            broker = subprocess.Popen(["ip", "netns", "exec", nets.broker, str(find_mosquitto()), "-c", str(kit.broker_dir / "mosquitto.conf")],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            log = kit.broker_dir / "mosquitto.log"
            wait_until(lambda: log.exists() and " running" in log.read_text(), 10, "the broker in its namespace")

            def stop() -> None:
                broker.terminate()
                broker.wait(10)

        else:
            stop = start_kit_broker(kit).stop
        try:
            dep = Deployment(kit, wrap=None if nets is None else (lambda i: ["ip", "netns", "exec", nets.nodes[i]]))
            dep.start()
            try:
                codes = dep.wait(watchdog=60)
            finally:
                dep.terminate()
        finally:
            stop()
    reports = node_reports(kit)
    assert codes[victim] == 3 and reports[victim]["exit_code"] == 3
    own = reports[victim]["error"]
    assert f"node {victim}: {bad}" in own and "'MDVP:Flo(Hz)'" in own and "\n" not in own, own
    assert "never came online" not in own and not reports[victim].get("culprits")
    for i in range(n):
        if i != victim:
            assert codes[i] != 0 and set(reports[i].get("culprits") or []) <= {victim}, reports[i]
            assert "violation" not in reports[i]["error"], reports[i]["error"]
