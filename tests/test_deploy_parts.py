"""The node runtime's parts one by one: admission, watchdog, handshake, start-up, signed
statements, agreement, failures and the virtual clock, each without a broker, a process or
real time (the whole runtime over the in-memory link is in test_deploy_memory.py)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from p2pem.deploy.admission import CONTROL, Admission, Admitted, Convicted, Ignored, Rejected
from p2pem.deploy.bootstrap import CONNECT_PAUSE, Handshake, connect
from p2pem.deploy.clock import VirtualTimeLoop, loop_clock, run_virtual
from p2pem.deploy.codec import Codec
from p2pem.deploy.config import Timeouts
from p2pem.deploy.control import AGREEMENT_RTOL, Agreement, Signer, abort_message, plausible_receivers
from p2pem.deploy.crypto import Identity
from p2pem.deploy.failures import NodeFailure, Reason, describe_abort
from p2pem.deploy.transports.base import AccessRefused, Incoming, topic_for
from p2pem.deploy.watchdog import Watchdog
from p2pem.errors import ConfigError, ProtocolError, TransportError
from p2pem.messages import Message
from p2pem.protocols.base import NodeContext, ProtocolViolation, Topology
from p2pem.protocols.pdmm import PdmmSP

RUN = "parts-1"
LAUNCH = b"\x07" * 16
#: a square with one diagonal: 0-1, 1-2, 2-3, 3-0, 0-2
NEIGHBOURS = ((1, 2, 3), (0, 2), (0, 1, 3), (0, 2))


@pytest.fixture(scope="module")
def keys() -> dict[int, Identity]:
    return {i: Identity.generate() for i in range(4)}


@pytest.fixture(scope="module")
def codecs(keys) -> dict[int, Codec]:
    public = {i: k.public for i, k in keys.items()}
    return {i: Codec(RUN, public, identity=k, node_id=i, launch=LAUNCH) for i, k in keys.items()}


def wire(codecs, msg: Message) -> Incoming:
    return Incoming(topic_for(RUN, msg), codecs[msg.sender].encode(msg))


def primal(sender: int, iteration: int, rnd: int = 1, value: float = 1.0) -> Message:
    return Message(sender, NEIGHBOURS[sender], iteration, rnd, "primal", np.full(3, value), False, (0, 0))


# ----------------------------------------------------------------------------- admission


def test_admission_admits_an_authentic_fresh_message_once(codecs):
    admission = Admission(RUN, codecs[1], 1)
    incoming = wire(codecs, primal(0, 0))
    verdict = admission.admit(incoming, frozenset({0, 2}), 0)
    assert isinstance(verdict, Admitted) and verdict.msg.payload.tolist() == [1.0, 1.0, 1.0]
    again = admission.admit(incoming, frozenset({0, 2}), 0)  # MQTT QoS 1 delivers it twice
    assert again == Ignored("duplicates", again.msg) and again.msg is not None
    control = Message(0, NEIGHBOURS[0], CONTROL, 1, "hello", (5, 6), False, (0,))
    assert isinstance(admission.admit(wire(codecs, control), frozenset({0, 2}), 0), Admitted)


def test_admission_refuses_what_anyone_on_the_path_could_have_made(codecs, keys):
    admission = Admission(RUN, codecs[1], 1)
    nbrs = frozenset({0, 2})
    good = wire(codecs, primal(0, 0))
    assert admission.admit(Incoming(good.topic, b""), nbrs, 0) == Ignored("empty")
    assert admission.admit(Incoming("elsewhere/x", good.payload), nbrs, 0).reason == "BadTopic"
    # a tag made with a key the roster does not pin
    fake = Identity.generate()
    impostor = Codec(RUN, {**{i: k.public for i, k in keys.items()}, 0: fake.public}, identity=fake, node_id=0, launch=LAUNCH)
    forged = admission.admit(Incoming(good.topic, impostor.encode(primal(0, 0))), nbrs, 0)
    assert isinstance(forged, Rejected) and forged.reason == "ForgedMessage"
    # node 0's genuine message moved to node 2's topic
    moved = admission.admit(Incoming(topic_for(RUN, primal(2, 0)), good.payload), nbrs, 0)
    assert isinstance(moved, Rejected) and moved.reason == "TopicMismatch"
    # a multicast on .../all that leaves this node out is not for it; on .../to/1 it is refused
    other = Message(0, (2, 3), 0, 1, "primal", np.zeros(3), False, (0, 0))
    assert admission.admit(wire(codecs, other), nbrs, 0) == Ignored("not_addressed")
    direct = Message(0, (2,), 0, 1, "primal", np.zeros(3), False, (0, 0))
    refused = admission.admit(Incoming(f"p2pem/{RUN}/from/0/to/1", codecs[0].encode(direct)), nbrs, 0)
    assert isinstance(refused, Rejected) and refused.reason == "NotAddressed"
    # node 3 is a member but not a neighbour of node 1
    stranger = admission.admit(wire(codecs, Message(3, (1,), 0, 1, "primal", np.zeros(3), False, (0, 0))), nbrs, 0)
    assert isinstance(stranger, Rejected) and stranger.reason == "NotNeighbour"


def test_admission_convicts_only_the_authenticated_sender(codecs):
    admission = Admission(RUN, codecs[1], 1)
    nbrs = frozenset({0, 2})
    assert isinstance(admission.admit(wire(codecs, primal(0, 0)), nbrs, 0), Admitted)
    # the same identity (sender, iteration, round, kind, receivers), another payload
    twin = admission.admit(wire(codecs, primal(0, 0, value=2.0)), nbrs, 0)
    assert isinstance(twin, Convicted) and twin.culprit == 0 and "two different 'primal' messages" in twin.detail
    negative = admission.admit(wire(codecs, primal(2, -5)), nbrs, 0)
    assert negative == Convicted(2, "primal message from node 2 for EM iteration -5")
    # a kind the protocol does not declare, however well formed
    declared = Admission(RUN, codecs[1], 1, kinds=PdmmSP().message_kinds)
    ring = Message(0, (1,), 0, 1, "ring", (5,), True)
    odd = declared.admit(wire(codecs, ring), nbrs, 0)
    assert isinstance(odd, Convicted) and odd.culprit == 0 and "check 'kind'" in odd.detail and len(declared.guard) == 0
    assert isinstance(declared.admit(wire(codecs, primal(0, 0)), nbrs, 0), Admitted)


def test_admission_window_comes_before_the_replay_guard(codecs):
    """A message two EM iterations ahead is refused without a trace in the guard, so a member
    cannot fill it, and the same message is admitted once the node gets there."""
    admission = Admission(RUN, codecs[1], 1)
    nbrs = frozenset({0, 2})
    ahead = wire(codecs, primal(0, 3))
    for _ in range(2):
        verdict = admission.admit(ahead, nbrs, 1)
        assert isinstance(verdict, Rejected) and verdict.reason == "OutOfRound"
    assert len(admission.guard) == 0
    assert isinstance(admission.admit(ahead, nbrs, 2), Admitted)


# ----------------------------------------------------------------------------- watchdog


def test_watchdog_names_the_silent_neighbour_after_the_timeout_only():
    dog = Watchdog(5, Timeouts(timeout=10.0, startup_timeout=30.0, heartbeat=1.0))
    dog.restart((1, 2), now=100.0)
    dog.heard(1, 105.0)
    dog.check([1, 2], 110.0, "EM iteration 3, protocol round 7", first_done=True)  # 2 quiet for exactly 10 s: not yet
    with pytest.raises(NodeFailure) as info:
        dog.check([1, 2], 110.5, "EM iteration 3, protocol round 7", first_done=True)
    failure = info.value
    assert failure.reason == Reason.SILENT and failure.culprits == (2,) and failure.exit_code == TransportError.exit_code
    assert str(failure) == "node 5: neighbour node 2 fell silent in EM iteration 3, protocol round 7: nothing received for 10.5 s (timeout 10 s)"
    assert dog.silent([1], 110.5) == []  # heard 5.5 s ago


def test_watchdog_stall_limit_is_longer_until_the_first_aggregation_finished():
    t = Timeouts(timeout=10.0, startup_timeout=30.0, heartbeat=1.0)
    dog = Watchdog(5, t)
    dog.restart((1,), now=0.0)
    for now in range(0, 61, 5):  # the neighbour stays alive but nothing progresses
        dog.heard(1, float(now))
        dog.check([1], float(now), "there", first_done=False)
    dog.heard(1, 60.5)
    with pytest.raises(NodeFailure) as info:
        dog.check([1], 60.5, "there", first_done=False)
    assert info.value.reason == Reason.STALLED and info.value.culprits == (1,) and "alive but stuck" in str(info.value)
    with pytest.raises(NodeFailure, match=r"no progress for 30\.5 s"):
        dog.check([1], 30.5, "there", first_done=True)
    dog.progressed(30.5)
    dog.check([1], 30.5, "there", first_done=True)


# ----------------------------------------------------------------------------- handshake


def hello(sender: int, seq: int, epoch: int = 0, digests=(11, 22)) -> Message:
    return Message(sender, NEIGHBOURS[sender], CONTROL, seq, "hello", digests, False, (epoch,))


def test_handshake_starts_when_every_neighbour_was_heard_and_repairs_reconnections():
    hs = Handshake(1, (11).to_bytes(32, "big"), 22)
    mine = hs.hello((0, 2), epoch=0)
    assert mine.meta == (0,) and mine.payload == (11, 22) and mine.round == 1 and hs.hello((0, 2), 0).round == 2
    assert hs.receive(hello(0, 1), True, (0, 2), started=False) and hs.hello_due and not hs.start_due
    assert hs.missing((0, 2)) == [2]
    assert hs.receive(hello(2, 1), True, (0, 2), started=False) and hs.start_due
    assert not hs.receive(hello(2, 1), True, (0, 2), started=True)  # a replayed sequence number
    assert hs.counters["stale_hellos"] == 1
    assert not hs.republish_due
    assert hs.receive(hello(2, 2, epoch=1), True, (0, 2), started=True) and hs.republish_due  # node 2 reconnected


def test_handshake_refuses_another_roster_or_other_step_parameters_naming_the_neighbour():
    hs = Handshake(1, (11).to_bytes(32, "big"), 22)
    with pytest.raises(NodeFailure) as info:
        hs.receive(hello(0, 1, digests=(12, 22)), True, (0, 2), started=False)
    assert info.value.reason == Reason.MISMATCH and info.value.culprits == (0,) and info.value.exit_code == ConfigError.exit_code
    assert "neighbour node 0 runs with a different roster" in str(info.value)
    with pytest.raises(NodeFailure, match="neighbour node 2 derived other public step parameters"):
        hs.receive(hello(2, 1, digests=(11, 23)), True, (0, 2), started=False)
    with pytest.raises(ProtocolViolation, match="check 'hello'"):
        hs.receive(Message(0, (1, 2, 3), CONTROL, 0, "hello", (11, 22), False, (0,)), True, (0, 2), started=False)
    with pytest.raises(ProtocolViolation, match="are not the sender's neighbours"):
        hs.receive(hello(0, 1), False, (0, 2), started=False)


def test_startup_timeout_names_the_neighbours_never_heard():
    hs = Handshake(1, (11).to_bytes(32, "big"), 22)
    hs.receive(hello(0, 1), True, (0, 2), started=False)
    hs.check_startup((0, 2), waited=60.0, startup_timeout=60.0)
    with pytest.raises(NodeFailure) as info:
        hs.check_startup((0, 2), waited=60.1, startup_timeout=60.0)
    assert info.value.reason == Reason.OFFLINE and info.value.culprits == (2,)
    assert str(info.value) == "node 1: node 2 never came online (no hello within 60 s of start-up)"


class FlakyLink:
    """A link whose first ``failures`` connection attempts fail with ``error``."""

    address = "test:1"

    def __init__(self, failures: int, error: TransportError) -> None:
        self.failures, self.error, self.attempts = failures, error, 0

    async def connect(self) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise self.error


def test_connect_retries_an_unreachable_broker_until_the_startup_timeout():
    async def attempt(link: FlakyLink) -> float:
        t0 = loop_clock()
        await connect(link, 3, "node3", 10.0, loop_clock)  # type: ignore[arg-type]
        return loop_clock() - t0

    link = FlakyLink(5, TransportError("connection refused"))
    assert run_virtual(attempt(link)) == pytest.approx(5 * CONNECT_PAUSE) and link.attempts == 6
    never = FlakyLink(10**6, TransportError("connection refused"))
    with pytest.raises(TransportError, match=r"node 3: cannot reach the MQTT broker at test:1 within 10 s: connection refused"):
        run_virtual(attempt(never))
    assert never.attempts == 1 + int(10.0 / CONNECT_PAUSE)  # at 0, 0.25, ..., 10 s: the last one at the deadline


def test_connect_gives_up_at_once_when_the_broker_refuses_the_credentials():
    link = FlakyLink(10**6, AccessRefused("Not authorized"))
    with pytest.raises(TransportError, match="node 3: the MQTT broker at test:1 refused user 'node3': Not authorized"):
        run_virtual(connect(link, 3, "node3", 10.0, loop_clock))  # type: ignore[arg-type]
    assert link.attempts == 1


# ----------------------------------------------------------------------------- signed statements


def test_abort_is_verified_against_its_origin_and_launch(keys):
    signers = {i: Signer(keys[i], [k.public for k in keys.values()], RUN, LAUNCH, NEIGHBOURS) for i in keys}
    msg = signers[0].abort(0, NEIGHBOURS[0], Reason.CANNOT_CONTINUE, 3, 7, (2,))
    assert msg.meta == (int(Reason.SILENT), 3, 7, 0, 2)  # told as the wire reason
    relayed = abort_message(2, NEIGHBOURS[2], msg.meta, msg.payload)  # node 2 relays it unchanged
    meta, signature = signers[1].verify_abort(relayed)
    assert meta == msg.meta and signature == msg.payload
    framed = abort_message(2, NEIGHBOURS[2], (int(Reason.SILENT), 3, 7, 0, 1), msg.payload)
    with pytest.raises(ProtocolViolation) as info:
        signers[1].verify_abort(framed)
    assert info.value.sender == 2 and "abort in the name of node 0 is not signed by node 0 (forged)" in str(info.value)
    other_launch = Signer(keys[1], [k.public for k in keys.values()], RUN, b"\x08" * 16, NEIGHBOURS)
    with pytest.raises(ProtocolViolation, match="forged"):
        other_launch.verify_abort(relayed)
    with pytest.raises(ProtocolViolation, match="is not \\(reason, iteration"):
        signers[1].verify_abort(abort_message(2, NEIGHBOURS[2], (104, 3, 7, 0), msg.payload))  # a local-only reason


def test_drop_must_come_from_a_neighbour_of_the_dropped_node(keys):
    signer = Signer(keys[0], [k.public for k in keys.values()], RUN, LAUNCH, NEIGHBOURS)
    msg, signature = signer.drop(0, NEIGHBOURS[0], (1, 2, 0), None)
    assert signer.verify_drop(msg) == ((1, 2, 0), signature)
    far = Signer(keys[1], [k.public for k in keys.values()], RUN, LAUNCH, NEIGHBOURS)
    msg, _ = far.drop(1, NEIGHBOURS[1], (3, 2, 1), None)  # nodes 1 and 3 are not neighbours
    with pytest.raises(ProtocolViolation, match="node 1 cannot see node 3 fall silent"):
        signer.verify_drop(msg)


def test_plausible_receivers_allow_for_drops_not_yet_heard_of():
    assert plausible_receivers((0, 2, 3), (0, 2, 3), {})
    assert plausible_receivers((0, 2, 3), (0, 2), {3: {}})  # the sender dropped 3 already
    assert plausible_receivers((0, 2, 3), (0, 2, 3), {3: {}})  # ... or has not heard of it yet
    assert not plausible_receivers((0, 2, 3), (0, 2), {})
    assert not plausible_receivers((0, 2, 3), (2, 0, 3), {}) and not plausible_receivers((0, 2), (0, 1, 2), {})


# ----------------------------------------------------------------------------- agreement


def final(sender: int, model, n_iter: int = 4) -> Message:
    return Message(sender, NEIGHBOURS[sender], CONTROL, 0, "final", np.asarray(model, dtype=float), False, (n_iter,))


def test_agreement_compares_models_that_arrive_before_and_after_this_nodes_own():
    model = np.array([0.5, 0.5, 1.0, -2.0])
    agreement = Agreement(1, model.size)
    assert agreement.receive(final(0, model * (1 + AGREEMENT_RTOL / 2)), True)
    assert not agreement.receive(final(0, model), True)  # one per neighbour
    msg = agreement.message((0, 2), model, 4)
    assert msg.kind == "final" and msg.meta == (4,) and msg.payload is not model
    agreement.settle()
    assert agreement.agreed == {0} and not agreement.done(frozenset({0, 2}))
    with pytest.raises(NodeFailure) as info:
        agreement.receive(final(2, model * (1 + 10 * AGREEMENT_RTOL)), True)
    assert info.value.reason == Reason.DISAGREE and info.value.culprits == (1, 2)
    with pytest.raises(NodeFailure, match="neighbour node 3 finished after 5 EM iterations, this node after 4"):
        agreement.receive(final(3, model, n_iter=5), True)
    with pytest.raises(ProtocolViolation, match="shape"):
        Agreement(1, 4).receive(final(0, np.zeros(5)), True)


# ----------------------------------------------------------------------------- failures


def test_each_reason_has_its_exit_code_and_the_reason_it_is_told_as():
    assert {r for r in Reason if r.wire != r} == {Reason.CANNOT_CONTINUE, Reason.DROPOUT_MISMATCH, Reason.UNUSABLE_AVERAGE, Reason.ABORTED}
    assert all(r.wire.value < 100 for r in Reason)
    assert Reason.VIOLATION.exit_code == Reason.UNUSABLE_AVERAGE.exit_code == ProtocolError.exit_code
    assert Reason.MISMATCH.exit_code == Reason.DROPOUT_MISMATCH.exit_code == ConfigError.exit_code
    assert Reason.SILENT.exit_code == Reason.ABORTED.exit_code == TransportError.exit_code
    assert (Reason.INTERNAL.exit_code, Reason.INTERRUPTED.exit_code) == (70, 130)
    failure = NodeFailure(Reason.INTERRUPTED, 4, "stopped by SIGTERM", exit_code=143)
    assert (str(failure), failure.exit_code, failure.culprits, failure.node) == ("node 4: stopped by SIGTERM", 143, (), 4)


@pytest.mark.parametrize(
    "meta, line",
    [
        ((1, 2, 5, 0, 3), "node 3 fell silent in EM iteration 2, protocol round 5 (detected by node 0)"),
        ((7, 0, 0, 1, 2, 3), "nodes 2, 3 run with a roster (or step parameters derived from it) that differs from node 1's"),
        ((8, 1, 9, 4, 2), "node 4 caught node 2 violating the protocol in EM iteration 1, protocol round 9"),
        ((9, 3, 0, 0, 0, 1), "nodes 0, 1 finished with different models (found by node 0)"),
        ((5, 1, 2, 3), "node 3 hit a protocol error in EM iteration 1, protocol round 2"),
        ((1, 2), "stopped (no reason given)"),
    ],
)
def test_describe_abort(meta, line):
    assert describe_abort(meta) == line


# ----------------------------------------------------------------------------- virtual time


def test_virtual_time_jumps_to_the_next_timer_and_reports_a_deadlock():
    async def waits() -> float:
        await asyncio.sleep(3600.0)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2.5):
                await asyncio.Event().wait()
        return loop_clock()

    assert run_virtual(waits()) == 3602.5

    async def forever() -> None:
        await asyncio.Event().wait()

    with pytest.raises(RuntimeError, match="every task waits and nothing is scheduled"):
        run_virtual(forever(), idle_limit=0.01)
    loop = VirtualTimeLoop()
    try:
        loop.advance(1.5)
        assert loop.time() == 1.5
    finally:
        loop.close()


# ----------------------------------------------------------------------------- the Node as a deployment drives it


def em_node(node_id: int, topology: Topology, seed: int = 0):
    from p2pem.em import EMSettings
    from p2pem.node import Node

    X = np.random.default_rng(seed + node_id).normal(size=(6, 2))
    node = Node.for_em(NodeContext(node_id, topology, np.random.default_rng(seed)), X, EMSettings(n_components=2, max_iter=2, init_seed=1), PdmmSP())
    node.validate = True
    return node


def test_node_keeps_what_arrives_before_it_starts_up_to_the_protocols_bound():
    """pdmm-sp declares one message ahead (a dual-init): a neighbour's first primal needs this
    node's dual-init, sent only when it begins.  A second one from the same sender is a violation."""
    topology = Topology(4, NEIGHBOURS, 2)
    a, b = em_node(1, topology), em_node(0, topology)
    first = [m for m in b.start() if m.receivers == (1,)]
    assert [m.kind for m in first] == ["dual-init"] and PdmmSP().max_ahead == 1
    assert a.receive(first[0]) == [] and a.awaiting() == ()  # kept: a has not begun
    with pytest.raises(ProtocolViolation, match="check 'ahead'") as info:
        a.receive(Message(0, (1,), 0, 1, "primal", np.zeros(3), False, (0, 0)))
    assert info.value.sender == 0
    out = em_node(1, topology).start()
    assert {m.kind for m in out} == {"dual-init"}


def test_node_restarted_over_survivors_speaks_in_the_ids_of_the_full_graph():
    """After node 1 drops out of the square-with-diagonal, the survivors 0, 2, 3 run on a
    relabelled triangle; the Node translates, so every message keeps the full graph's ids,
    and a violation names its sender by that id."""
    topology = Topology(4, NEIGHBOURS, 2)
    node = em_node(2, topology)
    node.start()
    survivors = (0, 2, 3)
    triangle = Topology(3, ((1, 2), (0, 2), (0, 1)), 1)
    out = node.restart(NodeContext(1, triangle, np.random.default_rng(0)), survivors)
    assert node.node_id == 2 and {m.sender for m in out} == {2} and sorted(m.receivers for m in out) == [(0,), (3,)]
    assert node.awaiting() == (0, 3) and node.round == 0
    with pytest.raises(ProtocolViolation, match="addressed to a node that dropped out") as info:
        node.check(Message(3, (0, 1, 2), 0, 1, "primal", np.zeros(3), False, (0, 0)))
    assert info.value.sender == 3
    with pytest.raises(ProtocolViolation) as info:
        node.check(Message(3, (0, 2), 0, 0, "dual-init", np.zeros(3), False))  # not sealed
    assert info.value.sender == 3 and info.value.check == "header"


# ----------------------------------------------------------------------------- the launcher's summary


@pytest.mark.parametrize("violation", [False, True])
def test_launcher_names_the_failure_from_the_reasons_in_the_results(tmp_path, violation):
    """collect_results reads each node's reason and culprits, not the wording of its error: a
    violation a node caught beats a silence, a silence beats a relayed abort, and among the
    silences the node most accused is named (a node woken from SIGSTOP accuses everyone)."""
    import json

    from p2pem.deploy.kit import Kit
    from p2pem.deploy.results import collect_results
    from p2pem.deploy.supervise import DeploymentFailed

    kit = Kit(root=tmp_path, run_id="r", n_nodes=5, scenario_file=None, protocol="pdmm-sp", broker_host="127.0.0.1", broker_port=1)
    reports = {
        0: ("node 0: run stopped in EM iteration 2: node 2 fell silent (detected by node 1); relayed by node 1", "aborted", [2]),
        1: ("node 1: neighbour node 2 fell silent in EM iteration 2, protocol round 5", "silent", [2]),
        3: ("node 3: neighbour nodes 0, 1, 4 fell silent in EM iteration 2, protocol round 9", "silent", [0, 1, 4]),
        4: ("node 4: neighbour node 2 fell silent in EM iteration 2, protocol round 5", "silent", [2]),
    }
    if violation:
        reports[0] = ("node 0: in EM iteration 2: protocol violation by node 4", "violation", [4])
    for i, (error, reason, culprits) in reports.items():
        kit.node_dir(i).mkdir(parents=True)
        kit.result_path(i).write_text(json.dumps({"status": "failed", "error": error, "reason": reason, "culprits": culprits}))
    with pytest.raises(DeploymentFailed) as info:
        collect_results(kit, [5, 5, -9, 5, 5], 0.0)
    expected = reports[0][0] if violation else reports[1][0]
    assert str(info.value).startswith(f"deployment failed: {expected}; 4 other nodes stopped too")
