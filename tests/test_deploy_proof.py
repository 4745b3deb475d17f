"""Accusations only with proof (docs/threats.md): one attacking client per shape of the third red team.

Each member here (node INSIDER, valid keys, the real runtime) tries to get an honest node
convicted: it withholds its messages and lets its own watchdog accuse, perturbs one broadcast,
signs two final results, floods signed statements, colludes to evict, or restarts.  The
property every test checks: no honest node convicts an honest node (``culprits`` only ever
lists the member, and only on proof); each honest node ends with the exact model, names the
member on proof, or reports unattributable.  In-memory link, virtual time (see
test_deploy_memory.py); the launcher's verdict is checked on the same result files.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from p2pem.deploy.broker import acl_rules
from p2pem.deploy.control import StatementBudget, statement_limit
from p2pem.deploy.eviction import colluders, quorum
from p2pem.deploy.results import collect_results
from p2pem.deploy.roster import Roster
from p2pem.deploy.supervise import DeploymentFailed
from p2pem.deploy.transports.base import topic_for
from p2pem.deploy.transports.memory import Faults
from p2pem.messages import Message
from p2pem.protocols.base import ProtocolViolation
from test_deploy_attacks import kit_for
from test_deploy_memory import INSIDER, LAUNCH, Insider, Statements, TwoFinals, Withhold, assert_honest_outcome, exact, run_in_memory, run_with_restart, vote_against


@pytest.fixture(scope="module")
def six(tmp_path_factory):
    return kit_for(tmp_path_factory.mktemp("six"), n_nodes=6)


def no_honest_culprit(results, member: int | None = INSIDER) -> None:
    """Every node but ``member`` convicts at most ``member``; a node that names nobody on proof
    says so (``attributable`` false), and its suspects are where it saw the failure."""
    for i, (code, rep) in enumerate(results):
        if i == member:
            continue
        allowed = set() if member is None else {member}
        assert set(rep["culprits"]) <= allowed, (i, rep["error"], rep["culprits"])
        if code != 0:
            assert rep["attributable"] == bool(rep["culprits"]), rep


# ----------------------------------------------------------------------------- slowness


@pytest.mark.parametrize("lag", [2.5])
def test_a_member_that_withholds_its_messages_cannot_get_its_neighbour_convicted(six, tmp_path, lag):
    """Before, the withholding member's own watchdog signed SLOW against the neighbour that
    waited for it, and every honest node named that neighbour.  Slowness is evidence: the run
    stops unattributable, naming the edge; no honest node convicts anyone."""
    kit, sim = six
    withhold = Withhold(kit, lag)
    results = run_in_memory(kit, tmp_path, withhold)
    assert withhold.fired
    assert_honest_outcome(results, sim, INSIDER, unattributable=True)
    no_honest_culprit(results)
    failed = [i for i, (code, _) in enumerate(results) if code != 0 and i != INSIDER]
    assert failed, "a member that holds every message past the timeout went unnoticed"
    assert all(not results[i][1]["culprits"] for i in failed)  # nothing here is proof
    assert any(INSIDER in results[i][1]["suspects"] for i in failed)


# ----------------------------------------------------------------------------- disagreement


@pytest.mark.parametrize("nth, scale", [(4, 1 + 1e-3), (12, 1 + 1e-6)])
def test_a_perturbed_broadcast_never_convicts_an_honest_node(six, tmp_path, nth, scale):
    """One broadcast with the same perturbed bytes for every neighbour: before, honest nodes
    ended 5e-7..4e-5 apart and named each other.  A different final model is evidence: the run
    ends exact (the error died out), or stops unattributable; never an honest culprit."""
    kit, sim = six
    insider = Insider(kit, nth, "primal", lambda m: replace(m, payload=np.asarray(m.payload) * scale))
    results = run_in_memory(kit, tmp_path, Faults(np.random.default_rng(nth), rewrite=insider))
    assert insider.fired
    no_honest_culprit(results)
    finished = [i for i, (code, _) in enumerate(results) if code == 0 and i != INSIDER]
    models = {tuple(np.round(np.concatenate([np.ravel(results[i][1][k]) for k in ("weights", "means")]), 12)) for i in finished}
    assert len(models) <= 1  # never two models among honest nodes that exit 0


# ----------------------------------------------------------------------------- finals


@pytest.mark.parametrize("k", [1, 40])
def test_two_signed_final_results_convict_their_signer(six, tmp_path, k):
    """A second signed final (or a flood of them: before, ~3 s of CPU and honest nodes named
    honest nodes silent) is two signed values for one slot: proof, naming the member."""
    kit, sim = six
    insider = TwoFinals(kit, k)
    results = run_in_memory(kit, tmp_path, Faults(np.random.default_rng(0), rewrite=insider))
    assert insider.fired
    no_honest_culprit(results)
    roster = Roster.load(kit.roster_path)
    for j in roster.neighbours[INSIDER]:
        code, rep = results[j]
        assert code != 0 and rep["reason"] == "equivocation" and rep["culprits"] == [INSIDER], rep["error"]
        assert f"node {INSIDER} signed two different final results" in rep["error"]
    assert all(code != 0 for i, (code, _) in enumerate(results) if i != INSIDER)  # nobody finishes on a two-faced final


# ----------------------------------------------------------------------------- floods


def test_a_flood_of_signed_statements_convicts_its_sender(tmp_path):
    """Hundreds of copies of one signed vote (each a statement its receivers must check): past
    the per-sender budget of an EM iteration the flood itself is proof."""
    kit, sim = kit_for(tmp_path, n_nodes=6, on_dropout="continue")
    roster = Roster.load(kit.roster_path)
    limit = statement_limit(roster.n_nodes, sum(map(len, roster.neighbours)) // 2)

    def flood(ins, m):
        return vote_against(0)(ins, m) * (limit + 5)

    insider = Statements(kit, 8, flood)
    results = run_in_memory(kit, tmp_path / "out", Faults(np.random.default_rng(0), rewrite=insider), on_dropout="continue")
    assert insider.fired
    assert_honest_outcome(results, sim, INSIDER)
    no_honest_culprit(results)
    for j in roster.neighbours[INSIDER]:
        rep = results[j][1]
        assert rep["culprits"] == [INSIDER] and "check 'flood'" in rep["error"], rep["error"]


def test_the_statement_budget_counts_per_sender_and_per_iteration():
    budget = StatementBudget(3)
    vote = Message(4, (1, 2), -1, 0, "drop", (1, 2), False, (0, 0, 4))
    other = replace(vote, sender=2)
    for _ in range(3):
        budget.spend(vote, 7)
        budget.spend(other, 7)
    with pytest.raises(ProtocolViolation, match="more than 3 signed statements in EM iteration 7") as info:
        budget.spend(vote, 7)
    assert info.value.sender == 4
    budget.spend(vote, 8)  # a new EM iteration, a new budget
    # an honest relay never reaches the bound: every final, every stop of every attempt, every vote of three iterations
    n, e = 8, 16
    assert statement_limit(n, e) >= n + n * (n + 1) + 3 * 2 * e


# ----------------------------------------------------------------------------- evictions


def test_a_failure_without_witnesses_says_so():
    """Before, an unseconded vote stopped the run printing an empty witness list ("nodes )")."""
    from p2pem.deploy.failures import NodeFailure, Reason, nodes_text

    assert (nodes_text([]), nodes_text([3]), nodes_text([4, 1, 4])) == ("no node", "node 3", "nodes 1, 4")
    failure = NodeFailure(Reason.SILENT, 2, "x", (5,))
    assert (failure.culprits, failure.suspects, failure.attributable) == ((), (5,), False)
    proof = NodeFailure(Reason.VIOLATION, 2, "x", (5,))
    assert (proof.culprits, proof.suspects, proof.attributable) == ((5,), (), True)


def test_two_colluding_witnesses_cannot_evict_an_honest_node(tmp_path):
    """The member and a second key holder both sign that an alive, honest node fell silent:
    before, the victim was evicted and the launcher reported success 8.3e-2 off the model.
    An eviction needs more than ``tolerate`` witnesses or all the victim's neighbours."""
    kit, sim = kit_for(tmp_path, n_nodes=8, on_dropout="continue")
    roster = Roster.load(kit.roster_path)
    t = colluders(roster.protocol_spec(), roster.n_nodes)
    victim = max((k for k in roster.neighbours[INSIDER]), key=lambda k: len(roster.neighbours[k]))
    accomplice = next(j for j in roster.neighbours[victim] if j != INSIDER)
    assert quorum(roster.neighbours, victim, t) > 2, "the graph gives the victim too few neighbours for this test"
    from p2pem.deploy.codec import Codec
    from p2pem.deploy.control import Signer
    from p2pem.deploy.crypto import Identity

    key = Identity.load(kit.node_dir(accomplice) / "node.key")
    codec = Codec(roster.run_id, roster.public_keys(), identity=key, node_id=accomplice, launch=LAUNCH)
    signer = Signer(key, roster.public_keys(), roster.run_id, LAUNCH)

    def both(ins, m):
        at = roster.neighbours[INSIDER].index(victim)
        mine = vote_against(at)(ins, m)
        fields = (victim, m.iteration, accomplice)
        theirs = Message(accomplice, tuple(roster.neighbours[accomplice]), -1, victim * roster.n_nodes + accomplice, "drop",
                         signer.sign("drop", fields), False, fields)
        ins.extra = [(topic_for(roster.run_id, theirs), codec.encode(theirs))]
        return mine

    class Pair(Statements):
        def __call__(self, topic, payload):
            out = super().__call__(topic, payload)
            return None if out is None else out + self.extra

    insider = Pair(kit, 8, both)
    results = run_in_memory(kit, tmp_path / "out", Faults(np.random.default_rng(0), rewrite=insider), on_dropout="continue")
    assert insider.fired
    no_honest_culprit(results)
    assert all(not rep.get("dropped") for i, (_, rep) in enumerate(results) if i != INSIDER)
    assert all(code == 0 and exact(rep, sim) for i, (code, rep) in enumerate(results) if i not in (INSIDER, accomplice)), [r["error"] for _, r in results]


def test_the_launcher_refuses_an_eviction_below_the_quorum_and_prints_its_witnesses(tmp_path):
    """Result files in which the survivors dropped a node on two witnesses where the quorum is
    higher: the launcher reports no success, but an unattributable failure with the witnesses."""
    kit, _ = kit_for(tmp_path, n_nodes=8, on_dropout="continue")
    roster = Roster.load(kit.roster_path)
    t = colluders(roster.protocol_spec(), roster.n_nodes)
    victim = max(range(roster.n_nodes), key=lambda k: len(roster.neighbours[k]))
    a, b = roster.neighbours[victim][:2]
    assert quorum(roster.neighbours, victim, t) > 2
    for i in range(roster.n_nodes):
        kit.result_path(i).parent.mkdir(parents=True, exist_ok=True)
        doc = {"status": "failed", "error": "evicted", "reason": "evicted", "culprits": [], "suspects": []} if i == victim else \
            {"status": "finished", "error": None, "dropped": [{"node": victim, "iteration": 1, "witnesses": [a, b], "round": 3}]}
        kit.result_path(i).write_text(json.dumps(doc))
    with pytest.raises(DeploymentFailed) as info:
        collect_results(kit, {i: (5 if i == victim else 0) for i in range(roster.n_nodes)}, 0.0)
    text = str(info.value)
    assert "unattributable" in text and f"node {victim} was evicted" in text and f"nodes {min(a, b)}, {max(a, b)}" in text
    assert f"needs {quorum(roster.neighbours, victim, t)}" in text


# ----------------------------------------------------------------------------- restarts


def test_a_restarted_node_is_reported_as_restarted_and_convicts_nobody(six, tmp_path):
    """Before, a node restarted with the same key and nonce (a supervisor's honest
    crash-restart) convicted an honest neighbour in 3 of 4 runs ('ahead').  Its new hellos are
    newer (wall-clock sequence numbers) and say it starts again: its neighbours stop with
    'node k restarted', and nobody is convicted."""
    kit, sim = six
    roster = Roster.load(kit.roster_path)
    victim = 2
    codes, reports, again = run_with_restart(kit, tmp_path, victim, after=40)
    results = [(codes[i], reports[i]) for i in range(kit.n_nodes)]
    no_honest_culprit(results, member=None)
    assert again["culprits"] == []
    assert all(code != 0 for code in codes)
    said = [reports[j]["error"] for j in roster.neighbours[victim]]
    assert all("restarted" in e and victim in reports[j]["suspects"] for j, e in zip(roster.neighbours[victim], said, strict=True)), said
    assert again["reason"] == "restarted" and "this node restarted" in again["error"], again["error"]


# ----------------------------------------------------------------------------- the brokers


def test_every_node_may_publish_and_read_only_the_exact_topics_of_its_edges():
    text = acl_rules("run-a", [0, 1, 2], peers={0: [1], 1: [0, 2], 2: [1]})
    block = text.split("user node1\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert block == [
        "topic write p2pem/run-a/from/1/all",
        "topic write p2pem/run-a/from/1/to/0",
        "topic write p2pem/run-a/from/1/to/2",
        "topic read p2pem/run-a/from/0/all",
        "topic read p2pem/run-a/from/0/to/1",
        "topic read p2pem/run-a/from/2/all",
        "topic read p2pem/run-a/from/2/to/1",
    ]
    nodes = text.split("user admin")[0].split("\n", 1)[1]  # past the header comment
    assert "#" not in nodes and "+" not in nodes


# ----------------------------------------------------------------------------- two sites over a real bridge


@pytest.mark.mqtt
def test_a_members_aliased_retained_or_oversized_packet_cannot_partition_the_sites(tmp_path):
    """Before, a member's retained MQTT v5 packet with a topic alias grew past the packet limit
    when the bridge (MQTT 3.1.1) forwarded it with its full topic: the bridge reconnected every
    ~2 s for the rest of the run.  The kit's brokers take no aliases (the member is
    disconnected), and a retained packet near the limit crosses the bridge like any other: the
    sites stay joined."""
    import time

    import paho.mqtt.client as mqtt
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    from conftest import unavailable

    from p2pem.deploy.broker import find_mosquitto, free_port
    from p2pem.deploy.kit import MAX_PACKET_SIZE, prepare_kit, start_bridge_broker, start_kit_broker
    from p2pem.scenario import load_scenario
    from test_deploy import Capture, scenario_file

    if find_mosquitto() is None:
        unavailable("mosquitto is not installed (apt-get install mosquitto); the bridge test needs two real brokers")
    path = scenario_file(tmp_path, n_nodes=4, max_iter=1)
    kit = prepare_kit(load_scenario(path), tmp_path / "out", broker=("127.0.0.1", free_port()), seeded=True, sites=2)
    member = INSIDER  # odd nodes connect to the second site
    password = (kit.node_dir(member) / "broker.password").read_text().strip()
    mine = f"p2pem/{kit.run_id}/from/{member}/all"
    first = start_kit_broker(kit)
    second = start_bridge_broker(kit)
    try:
        with Capture(first.host, first.port, "observer", kit.credentials()["observer"]) as site1:
            time.sleep(1.0)  # the bridge connects
            gone = []
            client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"member-{kit.run_id}", protocol=mqtt.MQTTv5)
            client.username_pw_set(f"node{member}", password)
            client.on_disconnect = lambda c, u, flags, rc, props=None: gone.append(str(rc))
            client.connect(second.host, second.port)
            client.loop_start()
            try:
                time.sleep(0.3)
                alias = Properties(PacketTypes.PUBLISH)
                alias.TopicAlias = 1
                client.publish(mine, b"x" * (MAX_PACKET_SIZE - 4096), qos=1, retain=True, properties=alias)
                for _ in range(100):
                    if gone:
                        break
                    time.sleep(0.05)
                assert gone, "the broker accepted a topic alias"
            finally:
                client.loop_stop()
            # a retained packet near the limit, with its full topic: forwarded like any other
            big = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"member2-{kit.run_id}", protocol=mqtt.MQTTv311)
            big.username_pw_set(f"node{member}", password)
            big.connect(second.host, second.port)
            big.loop_start()
            try:
                big.publish(mine, b"y" * (MAX_PACKET_SIZE - 4096), qos=1, retain=True).wait_for_publish(10)
                big.publish(mine, b"after", qos=1).wait_for_publish(10)
            finally:
                big.loop_stop()
            for _ in range(200):
                if any(p == b"after" for _, p in site1.items):
                    break
                time.sleep(0.05)
            assert any(p == b"after" for _, p in site1.items), "the sites were cut apart"
            assert any(len(p) == MAX_PACKET_SIZE - 4096 for _, p in site1.items)
        bridge_log = (kit.bridge_dir / "mosquitto.log").read_text()
        assert bridge_log.count("Connecting bridge (step 1)") == 1, bridge_log[-2000:]  # never reconnected
    finally:
        second.stop()
        first.stop()
