"""One test per attack of issue 22's list, each with its own attacking client, over the in-memory
link in virtual time (the real node runtime of every party; only the broker is simulated).

Every test ends with the property of test_deploy_memory.assert_honest_outcome: every honest
node either holds the simulation's exact model or exits non-zero with a result.json that names
the member, never two models; some also check who is named and how.
"""

from __future__ import annotations

import json
import re
import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from p2pem.builders import build_graph, build_protocols, em_settings, load_data
from p2pem.deploy.codec import Codec
from p2pem.deploy.kit import prepare_kit
from p2pem.deploy.roster import Roster
from p2pem.deploy.transports.base import topic_for
from p2pem.deploy.transports.memory import Faults
from p2pem.messages import Message
from p2pem.scenario import load_scenario
from p2pem.simulate import run_protocol
from test_deploy_memory import INSIDER, ROOT, Insider, Statements, abort_naming, assert_honest_outcome, early_stop, run_in_memory, vote_against

BOWTIE = [[0, 1], [0, 2], [1, 2], [2, 3], [2, 4], [3, 4]]  # two triangles joined at node 2


def kit_for(tmp: Path, *, edges=None, n_nodes: int = 5, max_iter: int = 2, extra: str = "", on_dropout: str = "stop", protocol: str = "1"):
    text = (ROOT / "scenarios" / "parkinsons-20.toml").read_text()
    text = text.replace('"../data/parkinsons.data"', json.dumps(str(ROOT / "data" / "parkinsons.data")))
    text = re.sub(r"(?m)^max_iter = \d+", f"max_iter = {max_iter}", text)
    if edges is not None:
        text = re.sub(r"(?ms)^\[graph\].*?(?=^\[em\])", f"[graph]\nkind = \"edges\"\nedges = {json.dumps(edges)}\n\n", text)
    else:
        text = re.sub(r"(?m)^n_nodes = \d+", f"n_nodes = {n_nodes}", text)
    text = text.replace("[em]", f"{extra}\n[em]") if extra.startswith("#") else text.replace("tol = 0.0", f"tol = 0.0\n{extra}")
    path = tmp / "scenario.toml"
    path.write_text(text)
    scenario = load_scenario(path)
    kit = prepare_kit(scenario, tmp / "kit", broker=("127.0.0.1", 1), seeded=True, protocol=protocol, on_dropout=on_dropout)
    spec = build_protocols(scenario)[int(protocol) - 1]
    sim = run_protocol(load_data(scenario), build_graph(scenario), spec, em_settings(scenario), seed=scenario.streams()["protocol"])
    return kit, sim


@pytest.fixture(scope="module")
def five(tmp_path_factory):
    return kit_for(tmp_path_factory.mktemp("five"))


def failed_naming(results, culprit: int) -> list[int]:
    """The honest nodes that exited non-zero, each checked to name ``culprit`` (and list it)."""
    failed = [i for i, (code, _) in enumerate(results) if code != 0 and i != culprit]
    for i in failed:
        rep = results[i][1]
        assert f"node {culprit}" in rep["error"], rep["error"]
    return failed


# ----------------------------------------------------------------------------- stops


@pytest.mark.parametrize("nth", [3, 9, 15])
def test_an_early_stop_signed_by_a_member_is_named_by_the_counters_it_contradicts(five, tmp_path, nth):
    """A validly signed stop one round ahead, mid-aggregation: before, every honest node stalled
    naming honest neighbours; now the counters it contradicts name the insider as the
    proposal's origin (or its own neighbours convict it first)."""
    kit, sim = five
    insider = Statements(kit, nth, early_stop, keep=False)
    results = run_in_memory(kit, tmp_path, Faults(np.random.default_rng(0), rewrite=insider))
    assert insider.fired
    assert_honest_outcome(results, sim, INSIDER)
    failed = failed_naming(results, INSIDER)
    assert failed == [i for i in range(kit.n_nodes) if i != INSIDER]
    reasons = {results[i][1]["reason"] for i in failed}
    assert reasons <= {"stop", "violation", "aborted"}
    # convicted on proof (a violation it saw), or suspected (its stop contradicts counters a member can skew)
    assert all(INSIDER in results[i][1]["culprits"] + results[i][1]["suspects"] for i in failed)


def test_a_stop_in_the_last_aggregation_never_yields_two_models_or_two_log_likelihoods(tmp_path):
    """The stop round D - 1 ahead in the last M-step, and in the flag aggregation: before, the
    honest nodes exited 0 with models 8.4e-7 apart (under the old 1e-6 agreement) and one
    with another log-likelihood.  Every stop the insider signs is checked against the
    counters, and the final agreement compares model and log-likelihood at 1e-8."""
    kit, sim = kit_for(tmp_path, n_nodes=8, max_iter=2)
    sent = {}
    for nth in range(1, 200):
        insider = Statements(kit, nth, early_stop, keep=False)
        out = tmp_path / f"run{nth}"
        results = run_in_memory(kit, out, Faults(np.random.default_rng(nth), rewrite=insider))
        if not insider.fired:
            break
        assert_honest_outcome(results, sim, INSIDER)
        sent[nth] = sum(code != 0 for code, _ in results)
    assert len(sent) > 20 and sum(v > 0 for v in sent.values()) > len(sent) / 2


# ----------------------------------------------------------------------------- drops


def test_one_signed_drop_cannot_evict_an_alive_honest_node(tmp_path):
    """on_dropout = "continue": the insider votes that its alive neighbour fell silent.  One
    vote is not evidence (two of the victim's neighbours, or all of two), the victim hears
    it and the others do not vote: the run ends with every node's rows in the model."""
    kit, sim = kit_for(tmp_path, n_nodes=6, on_dropout="continue")
    insider = Statements(kit, 8, vote_against(0))
    results = run_in_memory(kit, tmp_path / "out", Faults(np.random.default_rng(0), rewrite=insider), on_dropout="continue")
    assert insider.fired
    assert [code for code, _ in results] == [0] * kit.n_nodes, [rep["error"] for _, rep in results]
    assert_honest_outcome(results, sim, INSIDER)
    assert all(not rep["dropped"] for _, rep in results)


def test_a_drop_in_a_stop_run_convicts_its_signer_instead_of_framing_the_victim(tmp_path):
    """on_dropout = "stop" (the default): before, five honest nodes reported the victim fallen
    silent; now the vote itself convicts the insider."""
    kit, sim = kit_for(tmp_path, n_nodes=6)
    roster = Roster.load(kit.roster_path)
    victim = roster.neighbours[INSIDER][0]
    insider = Statements(kit, 8, vote_against(0))
    results = run_in_memory(kit, tmp_path / "out", Faults(np.random.default_rng(0), rewrite=insider))
    assert_honest_outcome(results, sim, INSIDER)
    failed = failed_naming(results, INSIDER)
    assert failed and all(f"node {victim} fell silent" not in results[i][1]["error"] for i in failed)
    assert any("on_dropout = 'stop'" in results[i][1]["error"] for i in failed)


def test_an_eviction_that_would_leave_a_node_one_neighbour_is_refused_with_the_reason(tmp_path):
    """Node 1 dies for real (its neighbours 0, 2 and 4 see it fall silent and vote); without it
    node 2 would keep node 3 as its only neighbour (and node 4 node 0), which would then read
    its statistics off the consensus: the survivors stop and say why."""
    edges = [[0, 1], [1, 2], [2, 3], [3, 0], [0, 4], [1, 4]]
    kit, _ = kit_for(tmp_path, edges=edges, on_dropout="continue")
    results = run_in_memory(kit, tmp_path / "out", on_dropout="continue", kill=(1, 30))
    for i, (code, rep) in enumerate(results):
        if i != 1:
            assert code != 0 and "node 1" in rep["error"], rep["error"]
    assert all("node 2 keeps a single neighbour, which would learn its statistics" in rep["error"]
               for i, (_, rep) in enumerate(results) if i != 1 and rep["reason"] == "cannot_continue")


def test_an_eviction_is_witnessed_and_the_victim_is_told(tmp_path):
    """A node that really dies is evicted on the votes of its neighbours; result.json lists the
    witnesses, and a victim that is alive but cut off learns who declared it silent."""
    kit, _ = kit_for(tmp_path, n_nodes=6, on_dropout="continue")
    roster = Roster.load(kit.roster_path)
    from p2pem.deploy.dropout import survivor_topology

    def droppable(k):
        try:
            survivor_topology(roster.neighbours, {k})
        except Exception:  # noqa: BLE001 - ProtocolError: the others cannot go on without it
            return False
        return True

    victim = next(k for k in range(kit.n_nodes) if droppable(k))
    results = run_in_memory(kit, tmp_path / "out", on_dropout="continue", kill=(victim, 30))
    for i, (code, rep) in enumerate(results):
        if i != victim:
            assert code == 0, rep["error"]
            (d,) = rep["dropped"]
            assert d["node"] == victim and len(d["witnesses"]) >= 2 and set(d["witnesses"]) <= set(roster.neighbours[victim])


# ----------------------------------------------------------------------------- aborts


@pytest.mark.parametrize("how", ["implausible", "phase"])
def test_an_implausible_signed_abort_convicts_its_origin(five, tmp_path, how):
    """'Node 1 caught node 3 violating the protocol' where node 3 is not its neighbour (or a
    disagreement outside the final phase): signed, but no honest node signs it."""
    kit, sim = five
    insider = Statements(kit, 6, abort_naming(how))
    results = run_in_memory(kit, tmp_path, Faults(np.random.default_rng(0), rewrite=insider))
    assert_honest_outcome(results, sim, INSIDER)
    roster = Roster.load(kit.roster_path)
    for j in roster.neighbours[INSIDER]:
        rep = results[j][1]
        assert rep["reason"] == "violation" and rep["culprits"] == [INSIDER] and "implausible" in rep["error"]


def test_a_plausible_abort_is_relayed_as_its_origins_claim(five, tmp_path):
    """An abort nobody can disprove (the insider accuses its neighbour) stops the run, and every
    relay says who claims it: "node 1 reports that ..."."""
    kit, sim = five
    insider = Statements(kit, 6, abort_naming("frame"))
    results = run_in_memory(kit, tmp_path, Faults(np.random.default_rng(0), rewrite=insider))
    framed = Roster.load(kit.roster_path).neighbours[INSIDER][0]
    for i, (code, rep) in enumerate(results):
        if i != INSIDER:
            assert code != 0 and f"node {INSIDER} reports that" in rep["error"], rep["error"]
            # its word, not proof: before, the framed neighbour was listed as the culprit
            assert rep["culprits"] == [] and not rep["attributable"] and {INSIDER, framed} <= set(rep["suspects"]), rep


# ----------------------------------------------------------------------------- one model


class CutVertex:
    """Node 2 of the bowtie, relaying nothing between the two triangles in the final phase (no
    other node's final result, and no abort, its own included)."""

    def __init__(self, kit) -> None:
        roster = Roster.load(kit.roster_path)
        self.observer = Codec(roster.run_id, roster.public_keys())
        self.prefix = f"p2pem/{roster.run_id}/from/2/"
        self.fired = False

    def __call__(self, topic: str, payload: bytes):
        if topic.startswith(self.prefix):
            env = self.observer.parse(payload)
            if env.kind == "abort" or (env.kind == "final" and env.round != 2):  # any abort, another origin's final: withheld
                self.fired = True
                return []
        return [(topic, payload, 0.0)]


@pytest.mark.parametrize("split", [False, True])
def test_a_cut_vertex_cannot_split_the_outcome(tmp_path, split, monkeypatch):
    """Between two triangles, node 2 withholds each side's final results from the other (and
    with ``split`` one triangle really ends with another model, as if node 2 had shown it
    other numbers).  Before, both sides exited 0 with models 21 % apart; now no node exits 0
    before it holds every node's signed final, and each names node 2."""
    kit, sim = kit_for(tmp_path, edges=BOWTIE)
    assert any("node 2 is a cut vertex" in w for w in __import__("p2pem.deploy.cuts", fromlist=["x"]).cut_warnings(Roster.load(kit.roster_path).neighbours))
    if split:
        from p2pem.deploy.runtime import NodeRuntime
        from p2pem.em import EMState

        original = EMState.summary

        def shifted(self, part=0):
            out = original(self, part)
            return out * (1 + 1e-4) if getattr(self, "_side_b", False) else out

        monkeypatch.setattr(EMState, "summary", shifted)
        init = NodeRuntime.__init__

        def mark(self, config, **kw):
            init(self, config, **kw)
            self.node.task._side_b = config.node_id in (3, 4)

        monkeypatch.setattr(NodeRuntime, "__init__", mark)
    cut = CutVertex(kit)
    results = run_in_memory(kit, tmp_path / "out", cut)
    assert cut.fired
    for i, (code, rep) in enumerate(results):
        if i != 2:
            assert code != 0 and "node 2" in rep["error"] and 2 in rep["suspects"], (i, rep["error"], rep["suspects"])


# ----------------------------------------------------------------------------- model errors


def test_a_component_that_collapses_stops_the_run_without_a_culprit(tmp_path):
    """150 components on 195 rows in two dimensions, no covariance floor: a component
    collapses in an M-step.  A model error, not a violation: the nodes exit 6 (or stop, told
    by one that did), naming nobody."""
    path = tmp_path / "scenario.toml"
    (tmp_path / "base").mkdir()
    kit_for(tmp_path / "base", n_nodes=5, max_iter=30)  # writes the scenario it uses
    text = (tmp_path / "base" / "scenario.toml").read_text().replace("n_components = 3", "n_components = 150")
    path.write_text(text.replace("tol = 0.0", "tol = 0.0\nreg_covar = 0.0", 1))
    kit = prepare_kit(load_scenario(path), tmp_path / "kit", broker=("127.0.0.1", 1), seeded=True)
    results = run_in_memory(kit, tmp_path / "out")
    for code, rep in results:
        assert (code, rep["reason"]) in ((6, "model"), (5, "aborted")), rep["error"]
        assert rep["culprits"] == [] and "weights" not in rep
    assert any(rep["reason"] == "model" and ("collapsed" in rep["error"] or "positive definite" in rep["error"]) for _, rep in results)


def test_absurd_initial_duals_convict_their_sender(five, tmp_path):
    """Initial duals scaled by 1e80 (inside the 1e100 bound of every payload): before, the M-step
    failed and the last neighbour whose message came in was convicted.  An honest dual is a
    normal draw of the public perturbation_std, so one beyond 64 of them is provably absurd."""
    kit, sim = five
    insider = Insider(kit, 1, "dual-init", lambda m: replace(m, payload=np.asarray(m.payload) * 1e80))
    results = run_in_memory(kit, tmp_path, Faults(np.random.default_rng(0), rewrite=insider))
    assert insider.fired
    assert_honest_outcome(results, sim, INSIDER)
    receiver = Roster.load(kit.roster_path).neighbours[INSIDER][0]  # its first dual-init goes to its first neighbour
    assert "check 'range'" in results[receiver][1]["error"] and results[receiver][1]["culprits"] == [INSIDER]


def test_an_average_the_model_cannot_use_stops_the_run_without_blaming_a_neighbour(five, tmp_path):
    """Broadcasts scaled by 1e80 (finite, inside the bound; nothing proves them dishonest): the
    average breaks the M-step.  A model error names nobody, or the insider once a check
    catches it; never the neighbour whose message happened to come last."""
    kit, sim = five
    insider = Insider(kit, 3, "primal", lambda m: replace(m, payload=np.asarray(m.payload) * 1e80))
    results = run_in_memory(kit, tmp_path, Faults(np.random.default_rng(0), rewrite=insider))
    assert insider.fired
    assert_honest_outcome(results, sim, INSIDER)
    assert all(rep["culprits"] in ([], [INSIDER]) for i, (code, rep) in enumerate(results) if i != INSIDER)


# ----------------------------------------------------------------------------- resources and slowness


def test_messages_far_ahead_convict_their_sender_at_the_first_and_leave_no_trace(five, tmp_path):
    """Thousands of messages for EM iterations from 10^6 on: before, each stayed in the replay guard
    and the log (100 000 of them: 108 MB, 14.9 MB of log per neighbour, nobody blamed); now the
    first convicts the insider, and memory stays bounded."""
    kit, sim = five

    class Flood(Insider):
        def __call__(self, topic, payload):
            if super().__call__(topic, payload) is None:
                return None
            env = self.observer.parse(payload)
            far = [Message(INSIDER, env.receivers, 10**6 + k, 1, "primal", np.zeros(20), False, (0, 0)) for k in range(2000)]
            return [(topic, payload)] + [(topic_for(self.roster.run_id, m), self.codec.encode(m)) for m in far]

    tracemalloc.start()
    insider = Flood(kit, 4, "primal", lambda m: m)
    results = run_in_memory(kit, tmp_path, Faults(np.random.default_rng(0), rewrite=insider))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert_honest_outcome(results, sim, INSIDER)
    for j in Roster.load(kit.roster_path).neighbours[INSIDER]:
        assert "check 'window'" in results[j][1]["error"]
    assert peak < 200e6


def test_an_oversized_payload_is_refused_from_its_header_naming_its_sender(five, tmp_path):
    kit, sim = five
    insider = Insider(kit, 5, "primal", lambda m: replace(m, payload=np.zeros(2_000_000)))
    results = run_in_memory(kit, tmp_path, Faults(np.random.default_rng(0), rewrite=insider))
    assert_honest_outcome(results, sim, INSIDER)
    errors = [results[j][1]["error"] for j in Roster.load(kit.roster_path).neighbours[INSIDER]]
    assert all("announces 2000000 payload entries" in e for e in errors), errors


def test_a_member_that_holds_every_message_past_the_timeout_is_named_slow(five, tmp_path):
    """Before, heartbeats reset the silence clock: a 2 s run took 42 s and nobody was named.
    Now the awaited message itself has a deadline, and heartbeats say whom each node waits
    for: the insider waits for nobody, so its neighbours name it."""
    kit, sim = five
    roster = Roster.load(kit.roster_path)
    observer = Codec(roster.run_id, roster.public_keys())
    prefix = f"p2pem/{roster.run_id}/from/{INSIDER}/"
    seen = {"n": 0}

    def hold(topic, payload):
        env = observer.parse(payload)
        if topic.startswith(prefix) and env.iteration >= 1:  # protocol messages once the EM iterations begin
            seen["n"] += 1
            return [(topic, payload, 2.2)]  # just past the 2 s timeout
        return [(topic, payload, 0.0)]

    results = run_in_memory(kit, tmp_path, hold)
    assert seen["n"] > 0
    assert_honest_outcome(results, sim, INSIDER)
    reasons = {results[j][1]["reason"] for j in roster.neighbours[INSIDER]}
    assert "slow" in reasons and all(results[j][1]["suspects"] == [INSIDER] for j in roster.neighbours[INSIDER] if results[j][1]["reason"] == "slow")


def test_a_hello_flood_is_a_violation_naming_the_flooder(five, tmp_path):
    kit, sim = five
    roster = Roster.load(kit.roster_path)

    class Hellos(Insider):
        def __call__(self, topic, payload):
            if super().__call__(topic, payload) is None:
                return None
            msg = self.receiver[self.observer.parse(payload).receivers[0]].decode(payload)
            flood = [replace(msg, round=msg.round + k) for k in range(1, 200)]
            return [(topic, payload)] + [(topic_for(self.roster.run_id, m), self.codec.encode(m)) for m in flood]

    insider = Hellos(kit, 1, "hello", lambda m: m)
    results = run_in_memory(kit, tmp_path, Faults(np.random.default_rng(0), rewrite=insider))
    assert insider.fired
    assert_honest_outcome(results, sim, INSIDER)
    assert all("check 'rate'" in results[j][1]["error"] for j in roster.neighbours[INSIDER])
