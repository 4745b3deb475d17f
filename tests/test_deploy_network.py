"""Deployments where the broker matters: every protocol over Mosquitto, TLS, two bridged sites,
and the node command's refusals (marked ``mqtt``; one OS process per party, as a user runs it).

Each deployment is small (4 nodes, 2 EM iterations) and compared with ``p2pem simulate`` of the
same scenario; the runtime's logic behind them is tested over the in-memory link
(test_deploy_protocols.py, test_deploy_memory.py, test_deploy_attacks.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from p2pem.builders import build_graph, build_protocols, em_settings, load_data
from p2pem.deploy.broker import find_mosquitto, free_port
from p2pem.deploy.config import Timeouts
from p2pem.deploy.crypto import write_tls_files
from p2pem.deploy.kit import prepare_kit, start_kit_broker
from p2pem.deploy.launcher import run_deployment
from p2pem.deploy.supervise import DeploymentFailed
from p2pem.scenario import load_scenario
from p2pem.simulate import run_protocol
from test_deploy import max_rel_diff, scenario_file

pytestmark = [
    pytest.mark.mqtt,
    pytest.mark.skipif(find_mosquitto() is None, reason="mosquitto is not installed (apt-get install mosquitto)"),
]


def simulated(path, position: int):
    scenario = load_scenario(path)
    spec = build_protocols(scenario)[position - 1]
    return run_protocol(load_data(scenario), build_graph(scenario), spec, em_settings(scenario), seed=scenario.streams()["protocol"])


@pytest.mark.parametrize("position, name", [(2, "secure-sum"), (3, "federated"), (4, "dp-central"), (7, "pdmm-sp")])
def test_every_protocol_deploys_over_mosquitto(tmp_path, position, name):
    """secure-sum's ring, federated's and dp-central's server process, asynchronous pdmm-sp: real
    processes and a real broker give the simulated model (the private one to the bit, async
    pdmm-sp to the consensus error of centralised EM)."""
    path = scenario_file(tmp_path, n_nodes=4, max_iter=2, timeout=5.0)
    kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=("127.0.0.1", free_port()), protocol=str(position), seeded=True)
    assert kit.protocol == name and kit.server == (name in ("federated", "dp-central"))
    broker = start_kit_broker(kit)
    try:
        doc = run_deployment(kit)
    finally:
        broker.stop()
    run = doc["protocols"][0]
    sim = simulated(path, position)
    if name == "dp-central":
        assert all(np.array_equal(np.asarray(run[k]), getattr(sim, k)) for k in ("weights", "means", "covariances"))
    elif name == "pdmm-sp":  # asynchronous: the hosts' own wake-up order
        from p2pem.em import fit_centralized

        scenario = load_scenario(path)
        central = fit_centralized(np.vstack(load_data(scenario)), em_settings(scenario))
        assert max_rel_diff(run, central.params()) <= 1e-8
    else:
        assert max_rel_diff(run, sim) <= 1e-9
    if kit.server:
        server = json.loads(kit.result_path(-1).read_text())
        # the init, one per M-step, and (federated only) the last log-likelihood's: a private
        # run stops after its last M-step, releasing no log-likelihood
        assert server["status"] == "finished" and server["aggregations"] == 1 + sim.n_iter + (name == "federated")
        assert doc["deployment"]["server"]["aggregations"] == server["aggregations"]


def test_cli_deploy_tls_starts_a_tls_broker_and_gives_the_simulated_model(tmp_path):
    path = scenario_file(tmp_path, n_nodes=4, max_iter=2)
    out = tmp_path / "dep"
    run = subprocess.run(
        [sys.executable, "-m", "p2pem", "deploy", str(path), "--out", str(out), "-q", "--tls", "--insecure-reproducible-seed"],
        capture_output=True, text=True, timeout=150,
    )
    assert run.returncode == 0, run.stderr
    conf = (out / "broker" / "mosquitto.conf").read_text()
    assert "certfile" in conf and "keyfile" in conf and (out / "broker" / "ca.crt").exists()
    node = (out / "nodes" / "node0" / "node.toml").read_text()
    assert "tls = true" in node and "ca_file" in node
    doc = json.loads((out / "result.json").read_text())
    assert max_rel_diff(doc["protocols"][0], simulated(path, 1)) <= 1e-9


def test_cli_deploy_of_a_private_protocol_says_it_released_no_log_likelihood(tmp_path):
    """dp-central through the command line: the summary says there is no log-likelihood (a
    private run releases none) instead of failing on the null in result.json."""
    path = scenario_file(tmp_path, n_nodes=4, max_iter=2)
    run = subprocess.run(
        [sys.executable, "-m", "p2pem", "deploy", str(path), "--out", str(tmp_path / "dep"), "-q", "--protocol", "4", "--insecure-reproducible-seed"],
        capture_output=True, text=True, timeout=150,
    )
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert "dp-central" in run.stdout and "no log-likelihood released (private)" in run.stdout


def test_a_certificate_that_does_not_verify_ends_the_node_at_once(tmp_path):
    """Node 2 trusts another CA: it stops within a second with one line saying so (no retrying
    for the start-up timeout), and its neighbours name it as never online."""
    path = scenario_file(tmp_path, n_nodes=4, max_iter=2, timeout=2.0)
    kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=("127.0.0.1", free_port()), seeded=True, tls=True,
                      timeouts=Timeouts(timeout=2.0, startup_timeout=4.0))
    other = tmp_path / "other-ca"
    other.mkdir()
    ca, _, _ = write_tls_files(other, ["127.0.0.1"])
    (kit.node_dir(2) / "ca.crt").write_bytes(ca.read_bytes())
    broker = start_kit_broker(kit)
    try:
        with pytest.raises(DeploymentFailed, match="node 2: TLS handshake"):
            run_deployment(kit)
    finally:
        broker.stop()
    rep = json.loads(kit.result_path(2).read_text())
    assert rep["status"] == "failed" and "TLS handshake" in rep["error"] and "CERTIFICATE_VERIFY_FAILED" in rep["error"] and "\n" not in rep["error"]
    assert rep["exit_code"] == 5
    assert "Traceback" not in kit.log_path(2).read_text() and rep["timings"].get("connected_s") is None
    for i in (1, 3):  # node 2's neighbours in the 4-node ring with a chord
        other_rep = json.loads(kit.result_path(i).read_text())
        assert other_rep["status"] == "failed" and "2" in str(other_rep["suspects"] + [other_rep["error"]])


def test_two_sites_joined_by_a_mosquitto_bridge_give_the_same_model(tmp_path):
    """`p2pem deploy --sites 2`: odd nodes connect to a second broker bridged to the first."""
    path = scenario_file(tmp_path, n_nodes=4, max_iter=2)
    out = tmp_path / "dep"
    run = subprocess.run(
        [sys.executable, "-m", "p2pem", "deploy", str(path), "--out", str(out), "-q", "--sites", "2", "--insecure-reproducible-seed"],
        capture_output=True, text=True, timeout=150,
    )
    assert run.returncode == 0, run.stderr
    site2 = (out / "broker-site2" / "mosquitto.conf").read_text()
    assert "connection " in site2 and "topic p2pem/" in site2 and "remote_username bridge" in site2
    assert "user bridge" in (out / "broker" / "acl").read_text()
    ports = {json.loads((out / "kit.json").read_text())[k] for k in ("broker_port", "bridge_port")}
    assert {int((out / "nodes" / f"node{i}" / "node.toml").read_text().split("port = ")[1].split()[0]) for i in range(4)} == ports
    doc = json.loads((out / "result.json").read_text())
    assert max_rel_diff(doc["protocols"][0], simulated(path, 1)) <= 1e-9


def test_node_refuses_to_start_without_a_launch_nonce(tmp_path):
    path = scenario_file(tmp_path, n_nodes=4, max_iter=2)
    kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=("127.0.0.1", free_port()))
    run = subprocess.run([sys.executable, "-m", "p2pem", "node", "--config", str(kit.config_path(0))], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin"})
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "no launch nonce" in run.stderr and "--insecure-no-launch-nonce" in run.stderr
