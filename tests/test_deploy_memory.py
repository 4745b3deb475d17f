"""The whole node runtime in one process over the in-memory link, with an insider and faults.

Every node of a small deployment kit runs its real :class:`~p2pem.deploy.runtime.NodeRuntime`
(hello, replay guard, validation, signed aborts, final agreement) in one event loop, talking
through :class:`~p2pem.deploy.transports.memory.MemoryBroker`.  Node ``INSIDER`` holds valid keys and
rewrites what it publishes.  The property every test checks: each honest node either ends with
the exact model of ``p2pem simulate`` or exits non-zero with a result.json that says why, and no
honest node exits 0 with a model another honest node does not hold.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2pem.deploy.broker import find_mosquitto
from p2pem.deploy.codec import Codec
from p2pem.deploy.crypto import Identity
from p2pem.deploy.config import NodeConfig, Roster, Timeouts
from p2pem.deploy.kit import prepare_kit
from p2pem.deploy.runtime import NodeRuntime, run_reported
from p2pem.messages import Message
from p2pem.protocols.pdmm import NEVER
from p2pem.runner import build_graph, em_settings, protocols
from p2pem.scenario import load_data, load_scenario
from p2pem.simulate import run_protocol
from p2pem.deploy.transports.base import subscriptions_for, topic_for
from p2pem.deploy.transports.memory import Faults, MemoryBroker

ROOT = Path(__file__).resolve().parents[1]
INSIDER = 1
LAUNCH = b"\x01" * 16

pytestmark = pytest.mark.skipif(find_mosquitto("mosquitto_passwd") is None, reason="prepare_kit needs mosquitto_passwd")


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kit")
    text = (ROOT / "scenarios" / "parkinsons-20.toml").read_text()
    text = text.replace('"../data/parkinsons.data"', json.dumps(str(ROOT / "data" / "parkinsons.data")))
    text = re.sub(r"(?m)^n_nodes = \d+", "n_nodes = 5", text)
    text = re.sub(r"(?m)^max_iter = \d+", "max_iter = 2", text)
    path = tmp / "scenario.toml"
    path.write_text(text)
    scenario = load_scenario(path)
    kit = prepare_kit(scenario, tmp / "kit", broker=("127.0.0.1", 1), seeded=True)
    sim = run_protocol(load_data(scenario), build_graph(scenario), protocols(scenario)[0], em_settings(scenario), seed=scenario.streams()["protocol"])
    return kit, sim


def run_in_memory(kit, out: Path, intercept=None, *, timeout: float = 0.4, on_dropout: str = "stop", kill: tuple[int, int] | None = None) -> list[tuple[int, dict]]:
    """Run every node of ``kit`` in this process; return (exit code, result.json) per node.

    ``kill = (node, n)``: that node dies (silently, like SIGKILL) after publishing n envelopes.
    """
    out.mkdir(parents=True, exist_ok=True)
    broker = MemoryBroker(intercept)
    roster = Roster.load(kit.roster_path)
    runtimes, links = [], []
    for i in range(kit.n_nodes):
        config = NodeConfig.load(kit.config_path(i))
        config = replace(
            config, result=out / f"result{i}.json", on_dropout=on_dropout, timeouts=Timeouts(timeout=timeout, startup_timeout=2.0, heartbeat=timeout / 4)
        )
        links.append(broker.link(subscriptions_for(roster.run_id, i, roster.neighbours[i]), name=f"node{i}"))
        runtimes.append(NodeRuntime(config, link=links[-1], launch=LAUNCH))

    async def reaper(node: int, n: int) -> None:
        prefix = f"p2pem/{roster.run_id}/from/{node}/"
        while sum(t.startswith(prefix) for t, _ in broker.published) < n:
            await asyncio.sleep(0.001)
        links[node].kill()

    async def main():
        if kill is not None:
            asyncio.get_running_loop().create_task(reaper(*kill))
        return await asyncio.gather(*(run_reported(rt) for rt in runtimes))

    codes = asyncio.run(main())
    return [(code, json.loads((out / f"result{i}.json").read_text(), parse_constant=_no_nan)) for i, code in enumerate(codes)]


def _no_nan(token: str):
    raise AssertionError(f"result.json holds {token}, which is not JSON")


def model(report: dict) -> np.ndarray:
    return np.concatenate([np.ravel(report["weights"]), np.ravel(report["means"]), np.ravel(report["covariances"])])


def exact(report: dict, sim) -> bool:
    ref = np.concatenate([np.ravel(sim.weights), np.ravel(sim.means), np.ravel(sim.covariances)])
    return float(np.max(np.abs(model(report) - ref)) / np.max(np.abs(ref))) <= 1e-9


def assert_honest_outcome(results, sim, culprit: int | None) -> None:
    """Exact model, or a non-zero exit with a result.json naming the culprit; never a split."""
    finished = []
    for i, (code, rep) in enumerate(results):
        if i == culprit:
            continue
        if code == 0:
            assert rep["status"] == "finished" and rep["error"] is None
            assert exact(rep, sim), f"node {i} exited 0 with a model that is not the simulation's"
            finished.append(i)
        else:
            assert rep["status"] == "failed" and rep["error"], f"node {i} exited {code} without a reason"
            assert "weights" not in rep
            if culprit is not None:
                assert f"node {culprit}" in rep["error"] or f"nodes {culprit}," in rep["error"] or re.search(rf"nodes [\d, ]*\b{culprit}\b", rep["error"]), rep["error"]


def test_honest_run_in_memory_equals_simulate(kit, tmp_path):
    kit, sim = kit
    results = run_in_memory(kit, tmp_path)
    assert [code for code, _ in results] == [0] * kit.n_nodes
    assert all(exact(rep, sim) for _, rep in results)


def test_duplicates_delays_and_reordering_change_nothing(kit, tmp_path):
    kit, sim = kit
    faults = Faults(np.random.default_rng(5), duplicate=0.2, delay=0.2, max_delay=0.002)
    results = run_in_memory(kit, tmp_path, faults)
    assert [code for code, _ in results] == [0] * kit.n_nodes
    assert all(exact(rep, sim) for _, rep in results)


class Insider:
    """Node INSIDER's own codec, rewriting the ``nth`` message of ``kind`` it publishes."""

    def __init__(self, kit, nth: int, kind: str, change, *, launch: bytes = LAUNCH) -> None:
        roster = Roster.load(kit.roster_path)
        self.roster = roster
        identity = Identity.load(kit.node_dir(INSIDER) / "node.key")
        self.codec = Codec(roster.run_id, roster.public_keys(), identity=identity, node_id=INSIDER, launch=launch)
        self.observer = Codec(roster.run_id, roster.public_keys())
        self.nth, self.kind, self.change = nth, kind, change
        # Read the message as its receiver does: a rewrite keeps the true payload unless it
        # changes it on purpose (a different valid value is a lie about the insider's own
        # data, which nobody can detect, see nodes/README.md).
        self.receiver = {
            j: Codec(roster.run_id, roster.public_keys(), identity=Identity.load(kit.node_dir(j) / "node.key"), node_id=j, launch=launch)
            for j in roster.neighbours[INSIDER]
        }
        self.seen = 0
        self.fired = False

    def __call__(self, topic: str, payload: bytes):
        if not topic.startswith(f"p2pem/{self.roster.run_id}/from/{INSIDER}/") or self.fired:
            return None
        env = self.observer.parse(payload)
        if env.kind != self.kind:
            return None
        self.seen += 1
        if self.seen < self.nth:
            return None
        self.fired = True
        msg = self.receiver[env.receivers[0]].decode(payload)
        forged = self.change(msg)
        return [(topic_for(self.roster.run_id, forged), self.codec.encode(forged))]


BAD_VALUES = st.sampled_from([np.nan, np.inf, -np.inf, 1e300])


@st.composite
def rewrites(draw):
    """A change an insider makes to one message: payload, kind, meta or round."""
    what = draw(st.sampled_from(["value", "shape", "dtype", "kind", "meta", "round"]))
    if what == "value":
        bad, where = draw(BAD_VALUES), draw(st.integers(0, 10**6))

        def change(m):
            x = np.ones(m.payload.shape if isinstance(m.payload, np.ndarray) else 1)
            x[where % x.size] = bad
            return replace_payload(m, x)
    elif what == "shape":
        shape = draw(st.sampled_from([(0,), (1,), (3, 2), (400,)]))

        def change(m):
            return replace_payload(m, np.ones(shape))
    elif what == "dtype":
        ints = draw(st.lists(st.integers(0, 2**256 - 1), max_size=3))

        def change(m):
            return replace_payload(m, tuple(ints))
    elif what == "kind":
        kind = draw(st.sampled_from(["primal", "dual-init", "result", "ring", "bye", "x" * 40]))

        def change(m):
            other = kind if kind != m.kind else "result"
            return Message(m.sender, m.receivers, m.iteration, m.round, other, m.payload, m.encrypted, m.meta)
    elif what == "meta":
        # every entry is out of range for both fields of a primal's meta; a dual-init has none
        meta = draw(st.lists(st.sampled_from([-(2**62), -1, 10**9, NEVER + 1, 2**63 - 1]), min_size=1, max_size=3))

        def change(m):
            return Message(m.sender, m.receivers, m.iteration, m.round, m.kind, m.payload, m.encrypted, tuple(meta))
    else:
        shift = draw(st.sampled_from([-(2**40), -1, 2, 10**6]))

        def change(m):
            return Message(m.sender, m.receivers, m.iteration, m.round + shift, m.kind, m.payload, m.encrypted, m.meta)
    return what, change


def replace_payload(m: Message, payload) -> Message:
    return Message(m.sender, m.receivers, m.iteration, m.round, m.kind, payload, m.encrypted, m.meta)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rewrite=rewrites(), kind=st.sampled_from(["primal", "dual-init", "hello", "final", "bye"]), nth=st.integers(1, 300))
def test_insider_never_splits_or_silently_corrupts_the_outcome(kit, tmp_path_factory, rewrite, kind, nth):
    kit, sim = kit
    what, change = rewrite
    # the insider sends 12 dual-inits, hundreds of primals, a few hellos, one final and one bye
    insider = Insider(kit, {"primal": nth, "dual-init": 1 + nth % 12, "hello": 1 + nth % 3}.get(kind, 1), kind, change)
    faults = Faults(np.random.default_rng(nth), duplicate=0.05, delay=0.05, max_delay=0.002, rewrite=insider)
    results = run_in_memory(kit, tmp_path_factory.mktemp("run"), faults)
    assert_honest_outcome(results, sim, INSIDER if insider.fired else None)
    if insider.fired and kind in ("primal", "dual-init"):
        # every rewrite of these is out of range (a control message may be rewritten harmlessly,
        # e.g. a later hello sequence number)
        assert any(code != 0 for i, (code, _) in enumerate(results) if i != INSIDER), f"a {what} rewrite went unnoticed"


def test_forged_abort_is_pinned_on_its_sender(kit, tmp_path):
    """An abort in another node's name without its signature: its sender is the culprit."""
    kit, sim = kit
    roster = Roster.load(kit.roster_path)
    origin = roster.neighbours[INSIDER][0]
    framed = next(j for j in range(kit.n_nodes) if j not in (INSIDER, origin))

    def forge(m: Message) -> Message:
        return Message(INSIDER, m.receivers, -1, 0, "abort", (7, 7), False, (1, m.iteration, m.round, origin, framed))

    insider = Insider(kit, 5, "primal", forge)
    results = run_in_memory(kit, tmp_path, Faults(np.random.default_rng(0), rewrite=insider))
    assert insider.fired
    assert_honest_outcome(results, sim, INSIDER)
    for j in roster.neighbours[INSIDER]:
        assert f"protocol violation by node {INSIDER}" in results[j][1]["error"] and f"not signed by node {origin}" in results[j][1]["error"]
    assert all(f"node {framed} fell silent" not in rep["error"] for i, (_, rep) in enumerate(results) if i != INSIDER)


def test_messages_queued_ahead_are_bounded(kit, tmp_path):
    """A member cannot make a neighbour queue messages for later without limit."""
    kit, sim = kit
    roster = Roster.load(kit.roster_path)
    victim = roster.neighbours[INSIDER][0]

    ahead = [Message(INSIDER, (victim,), 1, r, "dual-init", np.zeros(23), True) for r in range(6)]

    class Flood(Insider):
        """Publishes its second primal unchanged, followed by six messages for the next EM iteration."""

        def __call__(self, topic, payload):
            if super().__call__(topic, payload) is None:
                return None
            return [(topic, payload)] + [(topic_for(self.roster.run_id, m), self.codec.encode(m)) for m in ahead]

    insider = Flood(kit, 2, "primal", lambda m: m)
    results = run_in_memory(kit, tmp_path, Faults(np.random.default_rng(0), rewrite=insider))
    assert_honest_outcome(results, sim, INSIDER)
    assert "check 'ahead'" in results[victim][1]["error"]


def test_dropout_continue_ends_with_the_simulation_of_the_same_schedule(kit, tmp_path):
    """A node killed mid-run: the survivors drop it, re-run that EM iteration without it and
    end with the model of the simulation with the same dropout schedule."""
    from p2pem.deploy.dropout import simulate_with_dropouts, survivor_topology
    from p2pem.simulate import protocol_streams

    kit, _ = kit
    roster = Roster.load(kit.roster_path)
    victim = next(k for k in range(kit.n_nodes) if _can_drop(roster, k, survivor_topology))
    # 30 envelopes: past the initialisation, before the end (pdmm-sp needs ~40 per EM iteration here)
    # timeout 1 s: an honest node descheduled that long on a loaded machine would be dropped too
    results = run_in_memory(kit, tmp_path, on_dropout="continue", kill=(victim, 30), timeout=1.0)
    survivors = [i for i in range(kit.n_nodes) if i != victim]
    assert results[victim][0] != 0
    assert all(results[i][0] == 0 for i in survivors), [results[i][1]["error"] for i in survivors]
    dropped = {tuple(sorted((d["node"], d["iteration"]) for d in results[i][1]["dropped"])) for i in survivors}
    assert len(dropped) == 1
    ((node, iteration),) = dropped.pop()
    assert node == victim and iteration >= 1
    scenario = load_scenario(kit.scenario_file)
    parts = load_data(scenario)
    params, n_iter = simulate_with_dropouts(
        parts, roster.neighbours, roster.protocol_spec(), em_settings(scenario), {victim: iteration},
        rngs=protocol_streams(scenario.streams()["protocol"], len(parts)),
    )
    ref = np.concatenate([np.ravel(params.weights), np.ravel(params.means), np.ravel(params.covariances)])
    for i in survivors:
        rep = results[i][1]
        assert rep["n_iter"] == n_iter
        assert float(np.max(np.abs(model(rep) - ref)) / np.max(np.abs(ref))) <= 1e-9


def test_dropout_stop_is_the_default(kit, tmp_path):
    kit, _ = kit
    results = run_in_memory(kit, tmp_path, kill=(2, 30))
    for i, (code, rep) in enumerate(results):
        if i != 2:
            assert code != 0 and "node 2" in rep["error"] and not rep["dropped"]


def _can_drop(roster, k, survivor_topology) -> bool:
    try:
        survivor_topology(roster.neighbours, {k})
    except Exception:  # noqa: BLE001 - ProtocolError: this node's loss would disconnect the graph
        return False
    return True


def test_a_bug_inside_a_node_is_reported_not_raised(kit, tmp_path, monkeypatch):
    """An unexpected exception: exit code 70, one line in result.json, the others told why."""
    from p2pem.node import Node

    kit, sim = kit
    original = Node.receive
    calls = {"n": 0}

    def broken(self, msg):
        if self.node_id == 3:
            calls["n"] += 1
            if calls["n"] == 30:
                raise KeyError("bug")
        return original(self, msg)

    monkeypatch.setattr(Node, "receive", broken)
    results = run_in_memory(kit, tmp_path)
    code, rep = results[3]
    assert code == 70 and rep["status"] == "failed" and "internal error" in rep["error"] and "KeyError" in rep["error"]
    assert all(c != 0 and "node 3 hit an internal error" in r["error"] for i, (c, r) in enumerate(results) if i != 3)


def test_nodes_refuse_a_neighbour_whose_step_parameters_differ(kit, tmp_path, monkeypatch):
    """Node 2's host computes the graph's eigenvalues a little differently (another LAPACK):
    the same roster, but other heavy-ball parameters.  Left alone, the nodes would agree on a
    wrong average; the hello compares the parameters, so no node starts and all say why."""
    from p2pem.protocols.pdmm import spectra

    kit, _ = kit
    original, calls = spectra.laplacian_extremes, {"n": 0}

    def other_host(topology, weights):
        calls["n"] += 1  # runtimes are built in node order, one topology (one computation) each
        lam2, lmax = original(topology, weights)
        return (lam2 * (1 + 1e-5), lmax) if calls["n"] == 3 else (lam2, lmax)

    monkeypatch.setattr(spectra, "laplacian_extremes", other_host)
    results = run_in_memory(kit, tmp_path)
    assert calls["n"] == kit.n_nodes
    roster = Roster.load(kit.roster_path)
    for i, (code, rep) in enumerate(results):
        assert code != 0 and rep["status"] == "failed" and "weights" not in rep
        if i in roster.neighbours[2]:
            assert "neighbour node 2 derived other public step parameters" in rep["error"], rep["error"]
    assert "derived other public step parameters" in results[2][1]["error"]


def test_survivors_with_different_step_parameters_stop_instead_of_agreeing_on_a_wrong_model(kit, tmp_path, monkeypatch):
    """After a dropout the survivors derive the step parameters of the smaller graph; one of
    them rounds the eigenvalues differently.  They are bound into the survivors' tags, so its
    messages no longer authenticate and the run stops, instead of converging to a slightly
    wrong model that the final agreement (relative 1e-6) might let through."""
    from p2pem.deploy.dropout import survivor_topology
    from p2pem.protocols.pdmm import spectra

    kit, _ = kit
    roster = Roster.load(kit.roster_path)
    victim = next(k for k in range(kit.n_nodes) if _can_drop(roster, k, survivor_topology))
    original, calls = spectra.laplacian_extremes, {"n": 0}
    odd = next(i for i in range(kit.n_nodes) if i != victim)

    def other_host(topology, weights):
        lam2, lmax = original(topology, weights)
        # the node whose runtime asks, read off the stack (all nodes share this process)
        asking = next(f.frame.f_locals["self"].node_id for f in inspect.stack() if isinstance(f.frame.f_locals.get("self"), NodeRuntime))
        if topology.n_nodes == kit.n_nodes - 1 and asking == odd:
            calls["n"] += 1
            return lam2 * (1 + 1e-5), lmax
        return lam2, lmax

    monkeypatch.setattr(spectra, "laplacian_extremes", other_host)
    results = run_in_memory(kit, tmp_path, on_dropout="continue", kill=(victim, 30), timeout=1.0)
    assert calls["n"] == 1  # the odd survivor restarted once, with its own parameters
    survivors = [i for i in range(kit.n_nodes) if i != victim]
    for i in survivors:
        code, rep = results[i]
        assert code != 0 and rep["status"] == "failed" and "weights" not in rep, (i, rep["error"])
    # its messages of the new attempt do not authenticate, so its neighbours wait for it and name it
    assert all(results[i][1]["wire"]["rejected"].get("ForgedMessage", 0) > 0 for i in roster.neighbours[odd] if i != victim)
    assert all(re.search(rf"waiting for node {odd}\b", results[i][1]["error"]) for i in survivors if i != odd and odd in roster.neighbours[i])
