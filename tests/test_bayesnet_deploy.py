"""A Bayesian-network release deployed: the real node runtime of every party over the in-memory
broker (authenticated, sealed where the protocol asks, virtual time), the shared seed by
commit-and-reveal, and every node ends with the same network -- the one a simulation of the
same parties computes."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import unavailable  # the tests folder is on sys.path (pytest's rootdir import mode)

from p2pem.bayesnet import BayesNetSettings, BayesNetTask
from p2pem.deploy.clock import run_virtual
from p2pem.deploy.config import NodeConfig, Timeouts
from p2pem.deploy.broker import find_mosquitto, free_port
from p2pem.deploy.kit import prepare_kit, start_kit_broker
from p2pem.deploy.process import run_reported
from p2pem.deploy.roster import Roster
from p2pem.deploy.runtime import NodeRuntime
from p2pem.deploy.transports.base import subscriptions_for
from p2pem.deploy.transports.memory import MemoryBroker
from p2pem.errors import ConfigError
from p2pem.scenario import load_scenario
from p2pem.simulate import drive_messages
from p2pem.streams import protocol_streams
from p2pem.tabular import discretize, domain_sizes
from test_bayesnet_protocols import SCHEMA, make_table

ROOT = Path(__file__).resolve().parents[1]
N_NODES = 5


def kit_scenario(tmp: Path):
    """The Parkinsons scenario on 5 pdmm-sp nodes: its kit's roster, keys and broker credentials carry the release."""
    text = (ROOT / "scenarios" / "parkinsons-20.toml").read_text()
    text = text.replace('"../data/parkinsons.data"', json.dumps(str(ROOT / "data" / "parkinsons.data")))
    text = re.sub(r"(?m)^n_nodes = \d+", f"n_nodes = {N_NODES}", text)
    path = tmp / "scenario.toml"
    path.write_text(text)
    return load_scenario(path)


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """A deployment kit of 5 pdmm-sp nodes (keys, roster, broker credentials), reproducibly seeded."""
    tmp = tmp_path_factory.mktemp("bayeskit")
    return prepare_kit(kit_scenario(tmp), tmp / "kit", broker=("127.0.0.1", 1), seeded=True)


def tasks_for(settings: BayesNetSettings) -> list[BayesNetTask]:
    """Every party's task: its rows of one table, its own secret; no shared seed (commit-and-reveal)."""
    parts = np.array_split(discretize(make_table(900, seed=4)), N_NODES)
    return [BayesNetTask([p], domain_sizes(SCHEMA), settings, N_NODES, shared=None, secrets=[np.random.SeedSequence(100 + i)], node_ids=[i])
            for i, p in enumerate(parts)]


def deploy(kit, tasks, out: Path, *, mqtt: bool = False) -> list[tuple[int, dict]]:
    """Run every node's real runtime with its task in one process: over the in-memory broker in
    virtual time, or (``mqtt``) over the kit's MQTT broker, which must be running, in real time."""
    out.mkdir(parents=True, exist_ok=True)
    broker = MemoryBroker()
    roster = Roster.load(kit.roster_path)
    runtimes = []
    for i, task in enumerate(tasks):
        config = replace(NodeConfig.load(kit.config_path(i)), result=out / f"result{i}.json",
                         timeouts=Timeouts(timeout=10.0 if mqtt else 2.0, startup_timeout=20.0 if mqtt else 10.0, heartbeat=0.5))
        link = None if mqtt else broker.link(subscriptions_for(roster.run_id, i, roster.neighbours[i]), name=f"node{i}")
        runtimes.append(NodeRuntime(config, link=link, launch=b"\x02" * 16, task=task))

    async def main():
        return await asyncio.gather(*(run_reported(rt) for rt in runtimes))

    codes = asyncio.run(main()) if mqtt else run_virtual(main())
    return [(code, json.loads((out / f"result{i}.json").read_text())) for i, code in enumerate(codes)]


@pytest.mark.parametrize("settings", [BayesNetSettings(epsilon=1.0), BayesNetSettings(model="hmprivbayes", epsilon=1.0, noise="shares", eta=0.02)])
def test_every_deployed_node_holds_the_network_of_the_simulation(kit, tmp_path, settings):
    deployed = tasks_for(settings)
    results = deploy(kit, deployed, tmp_path)
    assert [code for code, _ in results] == [0] * N_NODES, [rep.get("error") for _, rep in results]
    reference = deployed[0]
    assert reference.finished and reference.iteration >= 4  # commit, reveal, totals and more
    for task, (_, report) in zip(deployed, results, strict=True):
        assert report["status"] == "finished" and report["summary"] == reference.summary().tolist()
        assert [(g.order, g.parents) for g in task.greedy] == [(g.order, g.parents) for g in reference.greedy]
        for a, b in zip(task.networks, reference.networks, strict=True):
            assert all(np.array_equal(x.probabilities, y.probabilities) for x, y in zip(a.conditionals, b.conditionals, strict=True))
    # the same parties simulated by the message-level engine: the same seed, the same release
    simulated = tasks_for(settings)
    roster = Roster.load(kit.roster_path)
    spec = roster.protocol_spec()
    drive_messages(simulated, spec, roster.topology(), protocol_streams(0, N_NODES))
    assert np.array_equal(simulated[0].summary(), reference.summary())


@pytest.mark.mqtt
def test_a_release_over_a_real_mosquitto_broker_is_the_simulations(tmp_path):
    """The same release with every node's runtime talking MQTT to Mosquitto (the kit's passwords and ACL)."""
    if find_mosquitto() is None:
        unavailable("mosquitto is not installed (apt-get install mosquitto); MQTT tests need a real broker")
    kit = prepare_kit(kit_scenario(tmp_path), tmp_path / "kit", broker=("127.0.0.1", free_port()), seeded=True)
    handle = start_kit_broker(kit)
    try:
        deployed = tasks_for(BayesNetSettings(epsilon=1.0))
        results = deploy(kit, deployed, tmp_path / "out", mqtt=True)
    finally:
        handle.stop()
    assert [code for code, _ in results] == [0] * N_NODES, [rep.get("error") for _, rep in results]
    simulated = tasks_for(BayesNetSettings(epsilon=1.0))
    roster = Roster.load(kit.roster_path)
    drive_messages(simulated, roster.protocol_spec(), roster.topology(), protocol_streams(0, N_NODES))
    for _, report in results:
        assert report["status"] == "finished" and report["summary"] == simulated[0].summary().tolist()
        assert report["wire"]["published"] >= report["messages"] > 0 and report["wire"]["rejected"] == {}  # over the broker


def test_a_task_of_its_own_on_a_private_protocols_roster_is_refused(tmp_path):
    """dp-distributed binds to an EM run (noise plan, clipping): a release's task cannot run on its roster."""
    kit = prepare_kit(kit_scenario(tmp_path), tmp_path / "kit", broker=("127.0.0.1", 1), protocol="5", seeded=True)
    assert Roster.load(kit.roster_path).protocol_spec().name == "dp-distributed"
    with pytest.raises(ConfigError, match=r"protocol 'dp-distributed' binds to an EM run; a task of its own needs an aggregation protocol"):
        NodeRuntime(NodeConfig.load(kit.config_path(0)), link=MemoryBroker().link(["#"], name="node0"), task=tasks_for(BayesNetSettings(epsilon=1.0))[0])
