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
from p2pem.deploy.agreement import Agreement
from p2pem.deploy.control import FINAL_PHASE, Signer, abort_message, implausible, make_abort, parse_abort, plausible_receivers
from p2pem.deploy.cuts import separates
from p2pem.deploy.eviction import Eviction
from p2pem.deploy.limits import LogLimiter, TokenBucket
from p2pem.deploy.stops import Stops
from p2pem.deploy.crypto import Identity
from p2pem.deploy.failures import NodeFailure, Reason, describe_abort
from p2pem.deploy.transports.base import AccessRefused, Incoming, topic_for
from p2pem.deploy.watchdog import FINAL, RUNNING, Status, Watchdog
from p2pem.errors import ConfigError, ModelError, ProtocolError, TransportError
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
    """A message two EM iterations ahead convicts its sender without a trace in the guard (no
    honest neighbour gets there before this node), one two behind is ignored without a trace (a
    replay, or a straggler), and the iteration window holds the guard to three iterations."""
    admission = Admission(RUN, codecs[1], 1)
    nbrs = frozenset({0, 2})
    ahead = admission.admit(wire(codecs, primal(0, 3)), nbrs, 1)
    assert isinstance(ahead, Convicted) and ahead.culprit == 0 and "check 'window'" in ahead.detail
    behind = admission.admit(wire(codecs, primal(0, 3)), nbrs, 5)
    assert behind == Ignored("stale", behind.msg) and behind.msg is not None
    assert len(admission.guard) == 0
    assert isinstance(admission.admit(wire(codecs, primal(0, 2)), nbrs, 1), Admitted)
    far = [admission.admit(wire(codecs, primal(0, 10**6 + k)), nbrs, 1) for k in range(100)]
    assert all(isinstance(v, Convicted) for v in far) and len(admission.guard) == 1


def test_admission_checks_the_payload_length_from_the_header_before_decoding(codecs, monkeypatch):
    """A payload longer than any message of the run convicts its sender before it is opened."""
    admission = Admission(RUN, codecs[1], 1, max_entries=3, max_fields=8)
    nbrs = frozenset({0, 2})
    opened = []
    monkeypatch.setattr(codecs[1], "open", lambda env: opened.append(env) or None)
    big = Message(0, NEIGHBOURS[0], 0, 1, "primal", np.zeros(4), False, (0, 0))
    verdict = admission.admit(wire(codecs, big), nbrs, 0)
    assert isinstance(verdict, Convicted) and verdict.culprit == 0 and "4 payload entries" in verdict.detail and not opened
    wide = Message(0, NEIGHBOURS[0], CONTROL, 1, "hello", (1, 2), False, tuple(range(9)))
    assert isinstance(admission.admit(wire(codecs, wide), nbrs, 0), Convicted) and not opened


# ----------------------------------------------------------------------------- watchdog


def test_watchdog_names_the_silent_neighbour_after_the_timeout_only():
    dog = Watchdog(5, Timeouts(timeout=10.0, startup_timeout=30.0, heartbeat=1.0))
    dog.restart((1, 2), now=100.0)
    dog.heard(1, 105.0)
    dog.check([1, 2], 110.0, "EM iteration 3, protocol round 7", first_done=True)  # 2 quiet for exactly 10 s: not yet
    with pytest.raises(NodeFailure) as info:
        dog.check([1, 2], 110.5, "EM iteration 3, protocol round 7", first_done=True)
    failure = info.value
    assert failure.reason == Reason.SILENT and failure.suspects == (2,) and failure.culprits == () and failure.exit_code == TransportError.exit_code
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
    assert info.value.reason == Reason.STALLED and info.value.suspects == (1,) and not info.value.attributable and "alive but stuck" in str(info.value)
    with pytest.raises(NodeFailure, match=r"no progress for 30\.5 s"):
        dog.check([1], 30.5, "there", first_done=True)
    dog.progressed(30.5)
    dog.check([1], 30.5, "there", first_done=True)


# ----------------------------------------------------------------------------- handshake


def hello(sender: int, seq: int, epoch: int = 0, digests=(11, 22), status=(1, 3, 7, 0)) -> Message:
    return Message(sender, NEIGHBOURS[sender], CONTROL, seq, "hello", digests, False, (epoch, *status))


def test_handshake_starts_when_every_neighbour_was_heard_and_repairs_reconnections():
    hs = Handshake(1, (11).to_bytes(32, "big"), 22)
    mine = hs.hello((0, 2), epoch=0, status=(1, 4, 2, 0, 2))
    assert mine.meta == (0, 1, 4, 2, 0, 2) and mine.payload == (11, 22) and mine.round >= 1 and hs.hello((0, 2), 0).round == mine.round + 1
    status = hs.receive(hello(0, 1), True, (0, 2), started=False, now=5.0)
    assert status == Status(RUNNING, 3, 7, frozenset({0}), 5.0)
    assert hs.hello_due and not hs.start_due
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
    assert info.value.reason == Reason.MISMATCH and info.value.suspects == (0,) and info.value.culprits == () and info.value.exit_code == ConfigError.exit_code
    assert "neighbour node 0 runs with a different roster" in str(info.value)
    with pytest.raises(NodeFailure, match="neighbour node 2 derived other public step parameters"):
        hs.receive(hello(2, 1, digests=(11, 23)), True, (0, 2), started=False)
    with pytest.raises(ProtocolViolation, match="check 'hello'"):
        hs.receive(Message(0, (1, 2, 3), CONTROL, 0, "hello", (11, 22), False, (0,)), True, (0, 2), started=False)
    with pytest.raises(ProtocolViolation, match="are not the sender's neighbours"):
        hs.receive(hello(0, 1), False, (0, 2), started=False)
    strict = Handshake(1, (11).to_bytes(32, "big"), 22, peers_of=lambda j: NEIGHBOURS[j])
    with pytest.raises(ProtocolViolation, match=r"waits for nodes \[1, 2\], which are not all its neighbours"):
        strict.receive(hello(3, 1, status=(1, 0, 0, 1, 2)), True, (0, 2), started=False)


def test_hellos_beyond_the_rate_an_honest_node_sends_convict_the_flooder():
    hs = Handshake(1, (11).to_bytes(32, "big"), 22, tick=0.2)
    for seq in range(1, 31):  # a burst: answers to every neighbour, a reconnection
        hs.receive(hello(0, seq), True, (0, 2), started=True, now=0.0)
    with pytest.raises(ProtocolViolation, match="check 'rate'.*a flood"):
        hs.receive(hello(0, 31), True, (0, 2), started=True, now=0.0)
    hs2 = Handshake(1, (11).to_bytes(32, "big"), 22, tick=0.2)
    for seq in range(1, 1000):  # one per tick for a long time is fine
        hs2.receive(hello(0, seq), True, (0, 2), started=True, now=0.2 * seq)


def test_token_bucket_and_log_limiter():
    bucket = TokenBucket(capacity=3, rate=2.0)
    assert [bucket.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.take(0.5) and not bucket.take(0.5)
    logs = LogLimiter(first=2)
    allowed = [logs.allow(("x",)) for _ in range(100)]
    assert sum(allowed) == 2 + 5 and allowed[:2] == [True, True] and logs.count(("x",)) == 100  # 1, 2, 4, ..., 64


def test_startup_timeout_names_the_neighbours_never_heard():
    hs = Handshake(1, (11).to_bytes(32, "big"), 22)
    hs.receive(hello(0, 1), True, (0, 2), started=False)
    hs.check_startup((0, 2), waited=60.0, startup_timeout=60.0)
    with pytest.raises(NodeFailure) as info:
        hs.check_startup((0, 2), waited=60.1, startup_timeout=60.0)
    assert info.value.reason == Reason.OFFLINE and info.value.suspects == (2,)
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


@pytest.fixture(scope="module")
def signers(keys) -> dict[int, Signer]:
    return {i: Signer(keys[i], {j: k.public for j, k in keys.items()}, RUN, LAUNCH) for i in keys}


def peers(j: int) -> tuple[int, ...]:
    return NEIGHBOURS[j]


def test_abort_is_verified_against_its_origin_and_launch(signers, keys):
    abort = make_abort(signers[0], Reason.SILENT, 3, 7, 0, (2,))
    msg = abort_message(0, NEIGHBOURS[0], abort)
    assert msg.meta == (int(Reason.SILENT), 3, 7, 0, 1, 2) and msg.round == 0
    relayed = abort_message(2, NEIGHBOURS[2], parse_abort(msg, 4))  # node 2 relays it unchanged
    assert parse_abort(relayed, 4) == abort
    signers[1].check(relayed, "abort", 0, abort.fields(), abort.signature)
    framed = abort_message(2, NEIGHBOURS[2], make_abort(signers[2], Reason.SILENT, 3, 7, 0, (1,)))  # node 2 signs as node 0
    with pytest.raises(ProtocolViolation) as info:
        forged = parse_abort(framed, 4)
        signers[1].check(framed, "abort", forged.origin, forged.fields(), forged.signature)
    assert info.value.sender == 2 and "abort in the name of node 0 is not signed by node 0 (forged)" in str(info.value)
    other_launch = Signer(keys[1], {j: k.public for j, k in keys.items()}, RUN, b"\x08" * 16)
    with pytest.raises(ProtocolViolation, match="forged"):
        other_launch.check(relayed, "abort", 0, abort.fields(), abort.signature)
    with pytest.raises(ProtocolViolation, match="is not \\(reason, iteration"):
        parse_abort(Message(2, NEIGHBOURS[2], CONTROL, 0, "abort", (1, 2), False, (104, 3, 7, 0, 0)), 4)  # a local-only reason
    assert make_abort(signers[0], Reason.CANNOT_CONTINUE, 3, 7, 0, (2,)).reason == Reason.DROPPED_OUT  # told as the wire reason


def test_a_flooded_statement_is_verified_once_and_a_forgery_of_it_still_fails(keys, monkeypatch):
    """A signed statement reaches a node once per neighbour; the second copy of the same bytes
    skips the Ed25519 check, while another signature over the same fields is still checked."""
    signer = Signer(keys[1], {j: k.public for j, k in keys.items()}, RUN, LAUNCH)
    abort = make_abort(Signer(keys[0], {j: k.public for j, k in keys.items()}, RUN, LAUNCH), Reason.SILENT, 3, 7, 0, (2,))
    msg = abort_message(0, NEIGHBOURS[0], abort)
    calls = []
    original = type(keys[0].public).verify
    monkeypatch.setattr(type(keys[0].public), "verify", lambda self, *a: calls.append(1) or original(self, *a))
    for _ in range(3):
        signer.check(msg, "abort", 0, abort.fields(), abort.signature)
    assert len(calls) == 1
    bent = (abort.signature[0], abort.signature[1] ^ 1)
    with pytest.raises(ProtocolViolation, match="forged"):
        signer.check(msg, "abort", 0, abort.fields(), bent)
    with pytest.raises(ProtocolViolation, match="forged"):  # the same signature under other fields
        signer.check(msg, "abort", 0, (*abort.fields()[:-1], abort.fields()[-1] + 1), abort.signature)
    assert len(calls) == 3


@pytest.mark.parametrize(
    "reason, round_, culprits, evidence, why",
    [
        (Reason.SILENT, 5, (2,), (), None),
        (Reason.VIOLATION, 5, (1,), (), "cannot have watched node(s) 1"),  # node 3's neighbours are 0 and 2
        (Reason.DISAGREE, FINAL_PHASE, (2,), (), None),
        (Reason.DISAGREE, 5, (2,), (), "only be found in the final phase"),
        (Reason.DISAGREE, FINAL_PHASE, (0, 2), (), "exactly one neighbour"),
        (Reason.INTERRUPTED, 5, (1,), (), "names nobody"),
        (Reason.MODEL, 5, (), (), None),
        (Reason.SILENT, 5, (), (), "it names nobody"),
        (Reason.STOP, 5, (1,), (0, 3, 8), None),  # a stop's origin may be anywhere
        (Reason.SPLIT, FINAL_PHASE, (0,), (1,), "does not separate"),  # 3 reaches 1 by 2
        (Reason.EQUIVOCATION, FINAL_PHASE, (1,), (), None),  # a final's origin may be anywhere
        (Reason.EQUIVOCATION, FINAL_PHASE, (0, 1), (), "exactly one node"),
        (Reason.RESTARTED, 5, (2,), (), None),
        (Reason.RESTARTED, 5, (1,), (), "cannot have watched node(s) 1"),
    ],
)
def test_an_abort_no_honest_origin_signs_is_implausible(signers, reason, round_, culprits, evidence, why):
    origin = 3
    abort = make_abort(signers[origin], reason, 4, round_, origin, culprits, evidence, (5, 6) if reason == Reason.STOP else ())
    found = implausible(abort, peers, 4, lambda v, a, b: separates(NEIGHBOURS, v, a, b))
    assert (found is None) if why is None else (why in found), found
    if reason != Reason.RESTARTED:  # a restarted node is behind by the iterations it lost
        assert implausible(abort, peers, 9, lambda v, a, b: False) is not None  # signed 5 EM iterations away


def test_eviction_needs_two_witnesses_and_convicts_a_vote_no_honest_node_casts(signers):
    """Node 0 has three neighbours (two votes drop it), node 1 two (both)."""
    ev = {i: Eviction(i, NEIGHBOURS, "continue", signers[i]) for i in range(4)}
    assert ev[2].threshold(0) == 2 and ev[2].threshold(1) == 2 and ev[2].threshold(3) == 2
    ev[1].vote(0, 4)
    msg = ev[1].message(1, NEIGHBOURS[1], 0, 4, 1)
    assert ev[2].receive(msg, 4) == (0, 4, 1) and not ev[2].decided(0, 4)
    assert ev[2].receive(msg, 4) is None  # relayed again by someone: nothing new
    ev[3].vote(0, 4)
    assert ev[2].receive(ev[3].message(3, NEIGHBOURS[3], 0, 4, 3), 4) == (0, 4, 3) and ev[2].decided(0, 4)
    assert ev[2].witnesses(0, 4) == (1, 3)
    # node 3 is no neighbour of node 1; a stop run; an iteration outside the window
    far = Eviction(3, NEIGHBOURS, "continue", signers[3])
    far.votes[(1, 4)] = {3: signers[3].sign("drop", (1, 4, 3))}
    with pytest.raises(ProtocolViolation, match="node 3 cannot see node 1 fall silent"):
        ev[2].receive(far.message(3, NEIGHBOURS[3], 1, 4, 3), 4)
    with pytest.raises(ProtocolViolation, match="on_dropout = 'stop'"):
        Eviction(2, NEIGHBOURS, "stop", signers[2]).receive(msg, 4)
    with pytest.raises(ProtocolViolation, match="a vote for EM iteration 4, this node is in EM iteration 2"):
        Eviction(2, NEIGHBOURS, "continue", signers[2]).receive(msg, 2)
    assert Eviction(2, NEIGHBOURS, "continue", signers[2]).receive(msg, 6) is None  # relayed late: the run went on
    forged = Message(1, NEIGHBOURS[1], CONTROL, 0 * 4 + 2, "drop", msg.payload, False, (0, 4, 2))  # node 1's signature as node 2's
    with pytest.raises(ProtocolViolation, match="not signed by node 2"):
        ev[3].receive(forged, 4)


def test_stop_proposals_are_signed_relayed_when_they_lower_the_stop_round_and_back_announcements(signers):
    stops = {i: Stops(i, 4, signers[i]) for i in range(4)}
    stops[0].own(2, 0, 9, 11)
    msg = stops[0].message(0, NEIGHBOURS[0], 2, 0, 0)
    fields = stops[1].parse(msg)
    assert fields == (2, 0, 0, 9, 11)
    assert stops[1].record(*fields, msg.payload) and stops[1].backed(2, 0, 11) and not stops[1].backed(2, 1, 11)
    stops[2].own(2, 0, 10, 12)
    later = stops[2].message(2, NEIGHBOURS[2], 2, 0, 2)
    assert not stops[1].record(*stops[1].parse(later), later.payload)  # 12 > 11: never announced, not relayed
    assert stops[1].origin_of(2, 0, 11) == (0, (9, 11, tuple(msg.payload)))
    tampered = Message(0, NEIGHBOURS[0], CONTROL, 0, "stop", msg.payload, False, (2, 0, 0, 8, 10))
    with pytest.raises(ProtocolViolation, match="not signed by node 0"):
        stops[1].parse(tampered)
    stops[1].forget_before(3)
    assert not stops[1].backed(2, 0, 11)


# ----------------------------------------------------------------------------- watchdog: slowness


def test_watchdog_names_a_neighbour_that_holds_its_messages_back():
    """Its heartbeats keep it from looking silent, but they say it waits for nobody."""
    dog = Watchdog(5, Timeouts(timeout=10.0, startup_timeout=30.0, heartbeat=1.0))
    dog.restart((1, 2), now=0.0)
    dog.check([1], 0.0, "here", first_done=True)  # node 1's message awaited from now
    for t in range(1, 11):
        dog.reported(1, Status(RUNNING, 3, 4, frozenset(), float(t)))  # alive, waiting for nobody
        dog.check([1], float(t), "here", first_done=True)
    dog.reported(1, Status(RUNNING, 3, 4, frozenset(), 10.5))
    with pytest.raises(NodeFailure) as info:
        dog.check([1], 10.5, "here", first_done=True)
    assert info.value.reason == Reason.SLOW and info.value.suspects == (1,) and info.value.culprits == () and "waits for nobody" in str(info.value)
    # one that waits for someone else is blocked, not slow: the stall limit names it
    other = Watchdog(5, Timeouts(timeout=10.0, startup_timeout=30.0, heartbeat=1.0))
    other.restart((1,), now=0.0)
    other.check([1], 0.0, "here", first_done=True)
    for t in range(1, 30):
        other.reported(1, Status(RUNNING, 3, 4, frozenset({7}), float(t)))
        other.check([1], float(t), "here", first_done=True)
    # ... and one whose heartbeats say it finished EM is slow at once after the timeout
    done = Watchdog(5, Timeouts(timeout=10.0, startup_timeout=30.0, heartbeat=1.0))
    done.check([1], 0.0, "here", first_done=True)
    done.reported(1, Status(FINAL, 3, 0, frozenset({5}), 10.5))
    with pytest.raises(NodeFailure, match="it finished EM"):
        done.check([1], 10.5, "here", first_done=True)


def test_watchdog_names_a_neighbour_that_claims_to_miss_what_it_was_sent():
    dog = Watchdog(5, Timeouts(timeout=10.0, startup_timeout=30.0, heartbeat=1.0))
    sent = {1: (3, 4)}  # this node published round 4 of EM iteration 3 to node 1
    republished = []
    for t in range(0, 21):
        dog.reported(1, Status(RUNNING, 3, 4, frozenset({5}), float(t)))
        republished.append(dog.claims(sent, float(t), "here"))
    assert republished.count(True) == 1 and republished.index(True) == 11  # re-sent once, after the timeout
    dog.reported(1, Status(RUNNING, 3, 4, frozenset({5}), 20.5))
    with pytest.raises(NodeFailure) as info:
        dog.claims(sent, 20.5, "here")
    assert info.value.reason == Reason.SLOW and info.value.suspects == (1,) and info.value.culprits == () and "sent and re-sent" in str(info.value)
    # waiting for a round this node has not sent yet is honest; nor is a neighbour whose messages were garbled named
    fair = Watchdog(5, Timeouts(timeout=10.0, startup_timeout=30.0, heartbeat=1.0))
    for t in range(0, 40):
        fair.reported(1, Status(RUNNING, 3, 5, frozenset({5}), float(t)))
        assert not fair.claims(sent, float(t), "here")
    fair.garbled[1] = 0.0
    for t in range(0, 40):
        fair.reported(1, Status(RUNNING, 3, 4, frozenset({5}), float(t)))
        assert not fair.claims(sent, float(t), "here")


def test_plausible_receivers_allow_for_drops_not_yet_heard_of():
    assert plausible_receivers((0, 2, 3), (0, 2, 3), {})
    assert plausible_receivers((0, 2, 3), (0, 2), {3: {}})  # the sender dropped 3 already
    assert plausible_receivers((0, 2, 3), (0, 2, 3), {3: {}})  # ... or has not heard of it yet
    assert not plausible_receivers((0, 2, 3), (0, 2), {})
    assert not plausible_receivers((0, 2, 3), (2, 0, 3), {}) and not plausible_receivers((0, 2), (0, 1, 2), {})


# ----------------------------------------------------------------------------- agreement


def test_agreement_floods_signed_results_and_compares_model_and_loglik(signers):
    """Node 1 (neighbours 0, 2) compares every node's final with its own, whoever relays it."""
    result = np.array([0.5, 0.5, 1.0, -2.0, -4.25])  # the model, then its log-likelihood
    rtol = 1e-8
    makers = {i: Agreement(i, 4, NEIGHBOURS, 5, rtol, signers[i]) for i in range(4)}
    mine = Agreement(1, 4, NEIGHBOURS, 5, rtol, signers[1])
    early = makers[0].message(NEIGHBOURS[0], result * (1 + rtol / 2), 4, 5)
    assert mine.receive(early, now=0.0)  # the first of its origin: relay it
    assert not mine.receive(early, now=0.0)
    own = mine.message(NEIGHBOURS[1], result, 4, 5)
    assert own.kind == "final" and own.meta[:3] == (4, 1, 5) and own.payload is not result
    mine.settle(1.0)
    assert mine.agreed == {0} and not mine.done([0, 1, 2, 3])
    # node 3 is not node 1's neighbour: its final arrives relayed by node 2
    far = makers[3].message(NEIGHBOURS[3], result, 4, 5)
    relayed = Message(2, NEIGHBOURS[2], CONTROL, 3, "final", far.payload, False, far.meta)
    assert mine.receive(relayed, 2.0)
    assert not mine.done([0, 1, 2, 3])
    assert mine.receive(makers[2].message(NEIGHBOURS[2], result, 4, 5), 3.0) and mine.done([0, 1, 2, 3])
    # a neighbour whose log-likelihood differs; one after another number of EM iterations
    other = Agreement(1, 4, NEIGHBOURS, 5, rtol, signers[1])
    other.message(NEIGHBOURS[1], result, 4, 5)
    ll_off = result.copy()
    ll_off[-1] = -4.1
    with pytest.raises(NodeFailure) as info:
        other.receive(makers[2].message(NEIGHBOURS[2], ll_off, 4, 5), 0.0)
    assert info.value.reason == Reason.DISAGREE and info.value.suspects == (2,) and info.value.culprits == () and "log-likelihood" in str(info.value)
    with pytest.raises(NodeFailure, match="neighbour node 0 finished after 5 EM iterations, this node after 4"):
        other.receive(makers[0].message(NEIGHBOURS[0], result, 5, 6), 0.0)
    # a remote origin that differs: no failure yet, the boundary is found by neighbours
    remote = makers[3].message(NEIGHBOURS[3], result * (1 + 10 * rtol), 4, 5)
    other.receive(Message(2, NEIGHBOURS[2], CONTROL, 3, "final", remote.payload, False, remote.meta), 7.0)
    assert other.conflict == (3, 7.0) and not other.done([0, 1, 2, 3])
    with pytest.raises(ProtocolViolation, match="shape"):
        Agreement(1, 4, NEIGHBOURS, 4, rtol, signers[1]).receive(early, 0.0)
    forged = Message(0, NEIGHBOURS[0], CONTROL, 0, "final", result * 2, False, early.meta)
    with pytest.raises(ProtocolViolation, match="not signed by node 0"):
        Agreement(1, 4, NEIGHBOURS, 5, rtol, signers[1]).receive(forged, 0.0)


# ----------------------------------------------------------------------------- failures


def test_each_reason_has_its_exit_code_and_the_reason_it_is_told_as():
    assert {r for r in Reason if r.wire != r} == {Reason.CANNOT_CONTINUE, Reason.EVICTED, Reason.ABORTED}
    assert all(r.wire.value < 100 for r in Reason)
    assert Reason.VIOLATION.exit_code == Reason.STOP.exit_code == ProtocolError.exit_code
    assert Reason.MODEL.exit_code == ModelError.exit_code == 6
    assert Reason.MISMATCH.exit_code == ConfigError.exit_code
    assert Reason.SILENT.exit_code == Reason.ABORTED.exit_code == Reason.SLOW.exit_code == TransportError.exit_code
    assert (Reason.INTERNAL.exit_code, Reason.INTERRUPTED.exit_code) == (70, 130)
    failure = NodeFailure(Reason.INTERRUPTED, 4, "stopped by SIGTERM", exit_code=143)
    assert (str(failure), failure.exit_code, failure.culprits, failure.node) == ("node 4: stopped by SIGTERM", 143, (), 4)


@pytest.mark.parametrize(
    "fields, line",
    [
        ((1, 2, 5, 0, (3,)), "node 0 reports that node 3 fell silent in EM iteration 2, protocol round 5"),
        ((7, 0, 0, 1, (2, 3)), "node 1 reports that nodes 2, 3 run with a roster (or step parameters derived from it) that differs from its own"),
        ((8, 1, 9, 4, (2,)), "node 4 reports that node 2 violated the protocol in EM iteration 1, protocol round 9"),
        ((9, 3, -1, 0, (1,)), "node 0 reports that node 1 finished with a different model than it did"),
        ((5, 1, 2, 3, ()), "node 3 reports that it hit a protocol error in EM iteration 1, protocol round 2"),
        ((13, 4, 20, 2, (7,)), "node 2 reports that the stop proposal signed by node 7 in EM iteration 4 contradicts its counters"),
        ((12, 4, 20, 2, (1,)), "node 2 reports that the messages of node 1 it waited for in EM iteration 4, protocol round 20 were overdue (a slow edge)"),
    ],
)
def test_describe_abort(fields, line):
    reason, it, rnd, origin, culprits = fields
    assert describe_abort(reason, it, rnd, origin, culprits) == line


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
    """collect_results reads each node's reason, culprits and suspects, not the wording of its error: a
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
    for i, (error, reason, named) in reports.items():
        kit.node_dir(i).mkdir(parents=True)
        proof = reason == "violation"
        kit.result_path(i).write_text(json.dumps({"status": "failed", "error": error, "reason": reason,
                                                  "culprits": named if proof else [], "suspects": [] if proof else named}))
    with pytest.raises(DeploymentFailed) as info:
        collect_results(kit, [5, 5, -9, 5, 5], 0.0)
    expected = reports[0][0] if violation else reports[1][0]
    assert str(info.value).startswith(f"deployment failed: {expected}; 4 other nodes stopped too")
    # only a node holding proof convicts; otherwise the run is unattributable, its suspects counted
    if violation:
        assert "; proved: node 4 (shown to node 0)" in str(info.value)
    else:
        assert "unattributable" in str(info.value) and "suspects node 2 (named by 3)" in str(info.value) and "; proved:" not in str(info.value)


def test_launcher_names_the_silent_node_when_one_neighbour_saw_it_and_the_woken_node_accuses_another(tmp_path):
    """The paused node (2), woken, misses node 0 and accuses it; only node 4 saw node 2 fall silent
    and the others stopped on its relayed abort.  The relays vote for the abort's culprit, so the
    summary names node 2 (the woken node's lower id used to win the tie)."""
    import json

    from p2pem.deploy.kit import Kit
    from p2pem.deploy.results import collect_results
    from p2pem.deploy.supervise import DeploymentFailed

    kit = Kit(root=tmp_path, run_id="r", n_nodes=5, scenario_file=None, protocol="pdmm-sp", broker_host="127.0.0.1", broker_port=1)
    relay = ("run stopped in EM iteration 2: node 2 fell silent (detected by node 4); relayed by node 4", "aborted", [4, 2])
    reports = {
        0: (f"node 0: {relay[0]}", *relay[1:]),
        1: (f"node 1: {relay[0]}", *relay[1:]),
        2: ("node 2: neighbour node 0 fell silent in EM iteration 2, protocol round 9", "silent", [0]),
        3: (f"node 3: {relay[0]}", *relay[1:]),
        4: ("node 4: neighbour node 2 fell silent in EM iteration 2, protocol round 5", "silent", [2]),
    }
    for i, (error, reason, named) in reports.items():
        kit.node_dir(i).mkdir(parents=True)
        proof = reason == "violation"
        kit.result_path(i).write_text(json.dumps({"status": "failed", "error": error, "reason": reason,
                                                  "culprits": named if proof else [], "suspects": [] if proof else named}))
    with pytest.raises(DeploymentFailed) as info:
        collect_results(kit, [5, 5, 5, 5, 5], 0.0)
    assert str(info.value).startswith(f"deployment failed: {reports[4][0]}; 4 other nodes stopped too")
