"""Every protocol deployed: the unchanged node runtime (and, for ``federated`` and ``dp-central``,
the server runtime beside it) over the in-memory link, against ``p2pem simulate`` of the same
scenario.

Exact protocols end within 1e-9 of the simulation; the private ones, with the scenario's seed
written into the configs (``--insecure-reproducible-seed``), with the very same bits (the noise
shares, the ring masks and the server's noise are drawn from the streams the simulator uses);
asynchronous pdmm-sp, whose wake-up order is the hosts' own, within 1e-8 of centralised EM.  The
real-broker deployments of each are in test_deploy.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from p2pem.builders import build_graph, build_protocols, em_settings, load_data
from p2pem.deploy.kit import prepare_kit
from p2pem.em import fit_centralized
from p2pem.scenario import load_scenario
from p2pem.simulate import run_protocol
from test_deploy_memory import ROOT, run_in_memory

#: positions in scenarios/parkinsons-20.toml
SECURE_SUM, FEDERATED, DP_CENTRAL, DP_RING, DP_PDMM, ASYNC = 2, 3, 4, 5, 6, 7


def scenario_path(tmp: Path, n_nodes: int = 6, max_iter: int = 3) -> Path:
    text = (ROOT / "scenarios" / "parkinsons-20.toml").read_text()
    text = text.replace('"../data/parkinsons.data"', json.dumps(str(ROOT / "data" / "parkinsons.data")))
    text = re.sub(r"(?m)^n_nodes = \d+", f"n_nodes = {n_nodes}", text)
    text = re.sub(r"(?m)^max_iter = \d+", f"max_iter = {max_iter}", text)
    path = tmp / "scenario.toml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    return load_scenario(scenario_path(tmp_path_factory.mktemp("protocols")))


def deploy(scenario, position: int, tmp: Path, **kwargs):
    kit = prepare_kit(scenario, tmp / "kit", broker=("127.0.0.1", 1), protocol=str(position), seeded=True)
    server: list = []
    results = run_in_memory(kit, tmp / "out", server=server, timeout=5.0, **kwargs)
    return kit, results, server


def simulated(scenario, position: int):
    spec = build_protocols(scenario)[position - 1]
    return run_protocol(load_data(scenario), build_graph(scenario), spec, em_settings(scenario), seed=scenario.streams()["protocol"])


def model(rep: dict) -> np.ndarray:
    return np.concatenate([np.ravel(rep["weights"]), np.ravel(rep["means"]), np.ravel(rep["covariances"])])


def reference(sim) -> np.ndarray:
    return np.concatenate([np.ravel(sim.weights), np.ravel(sim.means), np.ravel(sim.covariances)])


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("position", [SECURE_SUM, FEDERATED])
def test_exact_protocols_deploy_to_the_simulated_model(scenario, tmp_path, position):
    kit, results, server = deploy(scenario, position, tmp_path)
    assert [code for code, _ in results] == [0] * kit.n_nodes, [rep["error"] for _, rep in results]
    sim = simulated(scenario, position)
    assert all(rel(model(rep), reference(sim)) <= 1e-9 for _, rep in results)
    assert all(rep["loglik"][-1] == pytest.approx(sim.loglik[-1], rel=1e-9) for _, rep in results)
    if position == FEDERATED:
        (code, rep), = server
        assert code == 0 and rep["status"] == "finished" and rep["aggregations"] == 1 + len(sim.loglik)  # the init, then one per loglik
    else:
        assert not server and not kit.server


@pytest.mark.parametrize("position", [DP_CENTRAL, DP_RING, DP_PDMM])
def test_private_protocols_deploy_to_the_same_bits_with_the_scenario_seed(scenario, tmp_path, position):
    """The noise shares and masks (nodes) and the noise (dp-central's server) come from the
    simulator's streams, so the released model is bit for bit the simulation's."""
    kit, results, server = deploy(scenario, position, tmp_path)
    assert [code for code, _ in results] == [0] * kit.n_nodes, [rep["error"] for _, rep in results]
    sim = simulated(scenario, position)
    if position == DP_PDMM:  # consensus leaves each node its own average: equal to the simulated node's bits
        assert all(rel(model(rep), reference(sim)) <= 1e-9 for _, rep in results)
    else:
        assert all(np.array_equal(model(rep), reference(sim)) for _, rep in results)
    assert all(rep["loglik"][-1] is None for _, rep in results)  # a private run releases none
    assert bool(server) == (position == DP_CENTRAL) and all(code == 0 for code, _ in server)


def test_shares_calibrated_for_the_worst_placement_deploy_to_the_same_bits(tmp_path):
    """With calibrate = "worst-placement" each node sizes its share from the roster's ring (one
    share makes the calibrated noise on a ring), as the simulation does: the same bits."""
    path = scenario_path(tmp_path)
    text = path.read_text().replace('aggregation = "secure-sum"\nbound = 4.0\n', 'aggregation = "secure-sum"\nbound = 4.0\ncalibrate = "worst-placement"\n')
    assert 'calibrate = "worst-placement"' in text
    path.write_text(text)
    scenario = load_scenario(path)
    kit, results, _ = deploy(scenario, DP_RING, tmp_path)
    assert [code for code, _ in results] == [0] * kit.n_nodes, [rep["error"] for _, rep in results]
    sim = simulated(scenario, DP_RING)
    assert sim.protocol_params["privacy"]["worst_placement"]["shares_per_draw"] == 1
    assert all(np.array_equal(model(rep), reference(sim)) for _, rep in results)


def test_asynchronous_pdmm_sp_deploys_to_centralised_em(scenario, tmp_path):
    """Wake-ups follow the messages (each node wakes when its inbox runs dry), not the
    simulator's schedule: the model is not the simulation's bits but centralised EM's, to the
    consensus error."""
    kit, results, _ = deploy(scenario, ASYNC, tmp_path)
    assert [code for code, _ in results] == [0] * kit.n_nodes, [rep["error"] for _, rep in results]
    central = fit_centralized(np.vstack(load_data(scenario)), em_settings(scenario))
    ref = np.concatenate([np.ravel(v) for v in (central.params().weights, central.params().means, central.params().covariances)])
    assert max(rel(model(rep), ref) for _, rep in results) <= 1e-8


def test_a_node_still_taking_in_the_last_private_aggregation_is_not_a_disagreement(scenario, tmp_path, monkeypatch):
    """A private run ends with its last M-step, without a final aggregation: the nodes that have
    it are one EM iteration ahead of a neighbour whose copy of the server's last broadcast is
    still on its way, and that neighbour's heartbeat says so.  That is the lag of an honest
    node, not a split: every node ends with the simulated bits (found on 20 processes, where
    the server's broadcast reached node 15 late)."""
    import asyncio

    from p2pem.deploy.codec import Codec
    from p2pem.deploy.roster import Roster
    from p2pem.deploy.transports.memory import MemoryLink
    from p2pem.messages import SERVER

    kit = prepare_kit(scenario, tmp_path / "kit", broker=("127.0.0.1", 1), protocol=str(DP_CENTRAL), seeded=True)
    roster = Roster.load(kit.roster_path)
    observer = Codec(roster.run_id, roster.public_keys())
    last = scenario.em.max_iter  # the init is aggregation 0, the M-steps 1..max_iter
    deliver, held = MemoryLink._deliver, []

    def late_for_node1(self, item):
        if self.name == "node1" and f"/from/{SERVER}/" in item.topic and observer.parse(item.payload).iteration == last:
            held.append(item)
            asyncio.get_running_loop().call_later(2.5, deliver, self, item)  # two heartbeats of node 1 meanwhile
            return
        deliver(self, item)

    monkeypatch.setattr(MemoryLink, "_deliver", late_for_node1)
    server: list = []
    results = run_in_memory(kit, tmp_path / "out", server=server, timeout=5.0)
    assert held, "the server's last broadcast was not delayed"
    assert [code for code, _ in results] == [0] * kit.n_nodes, [rep["error"] for _, rep in results]
    sim = simulated(scenario, DP_CENTRAL)
    assert all(np.array_equal(model(rep), reference(sim)) for _, rep in results)
