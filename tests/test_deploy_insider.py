"""Real-broker deployments (Mosquitto from the kit, one OS process per node) against a member.

The insider is node ``INSIDER`` with its genuine keys and broker password: the test runs its
unchanged :class:`~p2pem.deploy.runtime.NodeRuntime` in this process over an MQTT link that
rewrites chosen publishes, while every other node is a real ``p2pem node`` process.  Also here:
what a broker observer who holds the scenario file learns, a second launch of the same kit, a
data file of the wrong width and SIGKILL of the launcher.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

from p2pem.deploy.broker import find_mosquitto, free_port
from p2pem.deploy.codec import Codec
from p2pem.deploy.config import NodeConfig, Timeouts
from p2pem.deploy.roster import Roster
from p2pem.deploy.kit import prepare_kit, start_kit_broker
from p2pem.deploy.launcher import run_deployment
from p2pem.deploy.results import collect_results
from p2pem.deploy.supervise import Deployment, DeploymentFailed
from p2pem.deploy.failures import Reason
from p2pem.deploy.process import run_reported
from p2pem.deploy.runtime import NodeRuntime
from p2pem.messages import Message
from p2pem.scenario import load_scenario
from p2pem.deploy.transports.base import subscriptions_for
from p2pem.deploy.transports.mqtt import MqttLink
from test_deploy import Capture, _processes_mentioning, max_rel_diff, scenario_file, simulate, wait_until
from test_deploy_memory import INSIDER, Insider

pytestmark = [
    pytest.mark.mqtt,
    pytest.mark.skipif(find_mosquitto() is None, reason="mosquitto is not installed (apt-get install mosquitto)"),
]


class RewritingLink(MqttLink):
    """An MQTT link whose publishes pass through ``rewrite(topic, payload)`` first."""

    def __init__(self, *args, rewrite, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.rewrite = rewrite

    async def publish(self, topic, payload, qos=None, *, timeout=None, retain=False):
        for t, p in self.rewrite(topic, payload) or [(topic, payload)]:
            await super().publish(t, p, qos, timeout=timeout, retain=retain)


def run_with_insider(kit, make_insider, link_class=None):
    """Every node but INSIDER as a process; INSIDER in a thread of this process, rewriting
    (``link_class``: another link for it, taking the same arguments as :class:`RewritingLink`)."""
    dep = Deployment(kit, nodes=[i for i in range(kit.n_nodes) if i != INSIDER])
    insider = make_insider(dep.launch)
    config = NodeConfig.load(kit.config_path(INSIDER))
    roster = Roster.load(kit.roster_path)
    link = (link_class or RewritingLink)(
        config.broker.host,
        config.broker.port,
        subscriptions=subscriptions_for(roster.run_id, INSIDER, roster.neighbours[INSIDER]),
        username=config.broker.username,
        password=config.broker.password(),
        identifier=f"{roster.run_id}-node{INSIDER}",
        timeout=5.0,
        rewrite=insider,
    )
    runtime = NodeRuntime(config, link=link, launch=dep.launch)
    codes: dict[int, int] = {}
    thread = threading.Thread(target=lambda: codes.__setitem__(INSIDER, asyncio.run(run_reported(runtime))), daemon=True)
    dep.start()
    thread.start()
    try:
        codes.update(zip(dep.nodes, dep.wait(watchdog=60), strict=True))
    finally:
        dep.terminate()
        thread.join(30)
    reports = [json.loads(kit.result_path(i).read_text()) for i in range(kit.n_nodes)]
    return codes, reports, insider


def honest_outcome(codes, reports, sim) -> list[int]:
    """No honest node exits 0 with a model that is not exact; each failed one says why. Returns the failed."""
    failed = []
    for i, rep in enumerate(reports):
        if i == INSIDER:
            continue
        if codes[i] == 0:
            assert max_rel_diff(rep, sim) <= 1e-9, f"node {i} exited 0 with a wrong model"
        else:
            assert rep["status"] == "failed" and rep["error"] and "weights" not in rep
            failed.append(i)
    return failed


@pytest.fixture
def small_kit(tmp_path):
    path = scenario_file(tmp_path, n_nodes=5, max_iter=2, timeout=1.5)
    kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=("127.0.0.1", free_port()), seeded=True)
    broker = start_kit_broker(kit)
    yield kit, simulate(path)
    broker.stop()


def test_forged_abort_naming_another_node_is_rejected_and_its_sender_named(small_kit):
    kit, sim = small_kit
    roster = Roster.load(kit.roster_path)
    origin = roster.neighbours[INSIDER][0]
    framed = next(j for j in range(kit.n_nodes) if j not in (INSIDER, origin))

    def forge(m: Message) -> Message:
        # "node <framed> fell silent", in the name of node <origin>, with a made-up signature
        return Message(INSIDER, m.receivers, -1, origin, "abort", (1, 2), False, (int(Reason.SILENT), m.iteration, m.round, origin, 1, framed))

    codes, reports, insider = run_with_insider(kit, lambda launch: Insider(kit, 3, "primal", forge, launch=launch))
    assert insider.fired
    failed = honest_outcome(codes, reports, sim)
    assert failed == [i for i in range(kit.n_nodes) if i != INSIDER]
    for i in roster.neighbours[INSIDER]:
        assert f"protocol violation by node {INSIDER}" in reports[i]["error"] and "not signed by node" in reports[i]["error"]
    for i in failed:
        assert re.search(rf"\bnode {INSIDER}\b", reports[i]["error"]) and "fell silent" not in reports[i]["error"], reports[i]["error"]
    with pytest.raises(DeploymentFailed, match=rf"violation by node {INSIDER}|caught node {INSIDER}"):
        collect_results(kit, [codes[i] for i in range(kit.n_nodes)], 0.0)


@pytest.mark.parametrize("stop", ["forged", "early"])
def test_forged_or_early_stop_round_never_splits_the_outcome(small_kit, stop):
    """An impossible stop round names the insider; a plausible early one (undetectable alone)
    ends in a failure everywhere or the exact model, never in two different models."""
    kit, sim = small_kit

    def change(m: Message) -> Message:
        g, _ = m.meta
        stop_at = -(2**62) if stop == "forged" else m.round  # 'early': the earliest a sender may announce
        return Message(m.sender, m.receivers, m.iteration, m.round, m.kind, m.payload, m.encrypted, (g, stop_at))

    codes, reports, insider = run_with_insider(kit, lambda launch: Insider(kit, 12, "primal", change, launch=launch))
    assert insider.fired
    failed = honest_outcome(codes, reports, sim)
    finished = [i for i in range(kit.n_nodes) if i != INSIDER and i not in failed]
    models = {tuple(np.round(np.ravel(reports[i]["means"]), 9)) for i in finished}
    assert len(models) <= 1
    if stop == "forged":
        assert failed and all(f"node {INSIDER}" in reports[i]["error"] for i in failed)
        assert any("check 'meta'" in reports[i]["error"] for i in failed)


def test_observer_with_the_scenario_file_learns_nothing_from_the_traffic(tmp_path):
    """Default (OS entropy): the seeded simulation does not predict the duals, so the
    statistics an observer reconstructs from the first primals are off by the noise scale."""
    path = scenario_file(tmp_path, n_nodes=4, max_iter=1)
    sim = simulate(path, record=True)
    kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=("127.0.0.1", free_port()))
    roster = Roster.load(kit.roster_path)
    broker = start_kit_broker(kit)
    try:
        with Capture(broker.host, broker.port, "observer", kit.credentials()["observer"]) as spy:
            doc = run_deployment(kit)
    finally:
        broker.stop()
    assert doc["deployment"]["seeded"] is False and doc["deployment"]["secrets"] == "OS entropy"
    assert all(not json.loads(kit.result_path(i).read_text())["insecure_reproducible_seed"] for i in range(kit.n_nodes))
    assert max_rel_diff(doc["protocols"][0], sim) <= 1e-6  # the average is the public output
    observer = Codec(roster.run_id, roster.public_keys())
    seen = {}
    for topic, data in spy.items:
        if "/from/" in topic and data:
            env = observer.parse(data)
            if env.kind == "primal" and env.iteration == 0 and env.round == 1:
                seen[env.sender] = np.frombuffer(env.body, dtype="<f8")
    predicted = {m.sender: np.asarray(m.payload) for m in sim.trace if m.kind == "primal" and m.iteration == 0 and m.round == 1}
    assert set(seen) == set(range(kit.n_nodes))
    from p2pem.protocols.pdmm import auto_c

    c = auto_c(roster.topology())
    for i, x in seen.items():
        # s_hat_i - s_i = (x_i - x_sim_i)(1 + c d_i): the observer's error on node i's statistics
        error = np.max(np.abs(x - predicted[i])) * (1 + c * len(roster.neighbours[i]))
        assert error > 1.0, f"node {i}'s statistics recovered to {error:.2g}"


def test_second_launch_of_a_kit_ignores_the_first_launchs_messages(tmp_path):
    path = scenario_file(tmp_path, n_nodes=4, max_iter=2, timeout=1.5)
    kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=("127.0.0.1", free_port()), seeded=True)
    broker = start_kit_broker(kit)
    try:
        first = Deployment(kit)
        first.start()
        try:
            wait_until(lambda: first.progress().online == kit.n_nodes, 60, "every node online")
            first.processes[2].send_signal(signal.SIGTERM)  # it and the others abort, retained on the broker
            first.wait(watchdog=30)
        finally:
            first.terminate()
        doc = run_deployment(kit)  # same kit, same run id, same broker: a new launch
    finally:
        broker.stop()
    assert max_rel_diff(doc["protocols"][0], simulate(path)) <= 1e-9
    reports = [json.loads(kit.result_path(i).read_text()) for i in range(kit.n_nodes)]
    assert sum(r["wire"]["rejected"].get("ForgedMessage", 0) for r in reports) >= 1  # the retained aborts


def test_data_file_of_the_wrong_width_stops_that_node_at_load(tmp_path):
    path = scenario_file(tmp_path, n_nodes=4, max_iter=2)
    kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=("127.0.0.1", free_port()), seeded=True, timeouts=Timeouts(timeout=2.0, startup_timeout=2.0))
    data = kit.node_dir(2) / "data.csv"
    lines = data.read_text().splitlines()
    data.write_text("\n".join([lines[0] + ",extra"] + [ln + ",1.0" for ln in lines[1:]]) + "\n")
    broker = start_kit_broker(kit)
    try:
        with pytest.raises(DeploymentFailed, match=r"node 2: .*data.csv has 3 columns, but the roster .* says every node's data has 2"):
            run_deployment(kit)
    finally:
        broker.stop()
    rep = json.loads(kit.result_path(2).read_text())
    assert rep["status"] == "failed" and rep["exit_code"] == 3 and "3 columns" in rep["error"]
    for i in (0, 1, 3):
        other = json.loads(kit.result_path(i).read_text())
        assert other["status"] == "failed"
    assert "Traceback" not in kit.log_path(2).read_text()


def test_sigkill_of_the_launcher_leaves_no_process_behind(tmp_path):
    path = scenario_file(tmp_path, n_nodes=4, max_iter=200)
    out = tmp_path / "dep"
    launcher = subprocess.Popen([sys.executable, "-m", "p2pem", "deploy", str(path), "--out", str(out), "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        logs = [out / "nodes" / f"node{i}" / "node.log" for i in range(4)]
        wait_until(lambda: all(p.exists() and "starting the protocol" in p.read_text() for p in logs), 90, "every node online")
        assert len(_processes_mentioning(str(out))) >= 5  # 4 nodes + the broker
        launcher.kill()
        launcher.wait(10)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait(10)
    wait_until(lambda: not _processes_mentioning(str(out)), 20, "every node and the broker to exit")
    for i in range(4):
        rep = json.loads((out / "nodes" / f"node{i}" / "result.json").read_text())
        assert rep["status"] == "failed" and rep["error"]
        assert "Traceback" not in logs[i].read_text()


def test_dropout_continue_with_a_killed_node_equals_the_simulation_of_that_schedule(tmp_path):
    # enough EM iterations that the kill after the first M-step lands mid-run on a loaded machine
    # too (with 3 the others could finish before it, leaving nobody to evict)
    path = scenario_file(tmp_path, n_nodes=6, max_iter=20, timeout=1.5)
    path.write_text(path.read_text().replace("[deploy]", '[deploy]\non_dropout = "continue"', 1))
    kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=("127.0.0.1", free_port()), seeded=True)
    roster = Roster.load(kit.roster_path)
    from p2pem.deploy.dropout import survivor_topology
    from p2pem.deploy.results import compare_with_simulate

    def droppable(k: int) -> bool:
        try:
            survivor_topology(roster.neighbours, {k})
        except Exception:  # noqa: BLE001 - ProtocolError: the rest would be disconnected
            return False
        return True

    victim = next(k for k in range(kit.n_nodes) if droppable(k))
    broker = start_kit_broker(kit)
    try:
        dep = Deployment(kit)
        dep.start()
        try:
            wait_until(lambda: dep.progress().min_iter >= 1, 120, "the first M-step")
            dep.processes[victim].send_signal(signal.SIGKILL)
            codes = dep.wait(watchdog=60)
        finally:
            dep.terminate()
    finally:
        broker.stop()
    doc = collect_results(kit, codes, 0.0)
    (left,) = doc["deployment"]["evicted"]
    assert left["node"] == victim and left["iteration"] >= 1 and len(left["witnesses"]) >= 2
    assert set(left["witnesses"]) <= set(roster.neighbours[victim])
    assert codes[victim] == -signal.SIGKILL and all(codes[i] == 0 for i in range(kit.n_nodes) if i != victim)
    assert compare_with_simulate(kit, doc) <= 1e-9


class HoldingLink(RewritingLink):
    """Node INSIDER's own link, holding each of its publishes from the ``rewrite``-th on for
    ``lag`` seconds (in order) while its unmodified runtime and watchdog go on."""

    lag = 3.5

    async def publish(self, topic, payload, qos=None, *, timeout=None, retain=False):
        if self.rewrite(topic, payload):
            await asyncio.sleep(self.lag)
        await MqttLink.publish(self, topic, payload, qos, timeout=timeout, retain=retain)


def test_a_member_whose_link_holds_its_messages_cannot_frame_its_neighbour(small_kit):
    """The third red team's shape: node INSIDER holds its messages back and lets its own
    watchdog compare its neighbours' "still waiting for you" with what it queued.  Before, it
    signed SLOW against a waiting neighbour and every honest node named that neighbour.  Now
    "sent" is what its link took, slowness is evidence, and the launcher reports the run as
    unattributable: no node is convicted."""
    kit, sim = small_kit
    count = {"n": 0}

    def hold(topic, payload):
        count["n"] += 1
        return count["n"] > 40  # once the EM iterations are under way

    codes, reports, _ = run_with_insider(kit, lambda launch: hold, link_class=HoldingLink)
    assert count["n"] > 40
    failed = honest_outcome(codes, reports, sim)
    assert failed, "a member that holds every message past the timeout went unnoticed"
    for i in range(kit.n_nodes):
        if i != INSIDER:
            assert reports[i]["culprits"] == [] and not reports[i]["attributable"], reports[i]["error"]
    with pytest.raises(DeploymentFailed, match=r"unattributable \(no node is proved to have broken the protocol\): suspects") as info:
        collect_results(kit, [codes[i] for i in range(kit.n_nodes)], 0.0)
    assert "proved: " not in str(info.value)
