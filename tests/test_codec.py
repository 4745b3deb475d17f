from __future__ import annotations

import struct

import numpy as np
import pytest

from p2pem.deploy.codec import (
    MAX_RING_INT,
    Codec,
    ForgedMessage,
    InconsistentMessage,
    InvalidMessage,
    MalformedMessage,
    NotAddressed,
    ReplayedMessage,
    TamperedMessage,
    UnknownSender,
    WrongRun,
    validate_run_id,
)
from p2pem.deploy.admission import ReplayGuard
from p2pem.deploy.crypto import MAC_SIZE, Identity, derive_edge_key, mac
from p2pem.errors import ConfigError, ProtocolError
from p2pem.messages import SERVER, Message

RUN = "run-1"


@pytest.fixture(scope="module")
def keys() -> dict[int, Identity]:
    return {i: Identity.generate() for i in (SERVER, 0, 1, 2, 3)}


@pytest.fixture(scope="module")
def roster(keys):
    return {i: k.public for i, k in keys.items()}


@pytest.fixture(scope="module")
def codecs(keys, roster) -> dict[int, Codec]:
    return {i: Codec(RUN, roster, identity=k, node_id=i) for i, k in keys.items()}


def assert_same(a: Message, b: Message) -> None:
    assert (a.sender, a.receivers, a.iteration, a.round, a.kind, a.encrypted, a.meta) == (
        b.sender,
        b.receivers,
        b.iteration,
        b.round,
        b.kind,
        b.encrypted,
        b.meta,
    )
    if isinstance(a.payload, np.ndarray):
        assert isinstance(b.payload, np.ndarray)
        assert b.payload.dtype == np.float64 and b.payload.shape == a.payload.shape
        # Bit-for-bit, which also covers NaN payloads and the sign of zero.
        assert a.payload.astype("<f8").tobytes() == b.payload.tobytes()
    else:
        assert type(b.payload) is tuple and all(type(v) is int for v in b.payload)
        assert a.payload == b.payload


FLOAT_PAYLOADS = [
    np.array([0.0, -0.0, 1.0, -1.5]),
    np.array([5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, -1.7976931348623157e308]),
    np.array([np.inf, -np.inf, np.nan, np.pi]),
    np.arange(12.0).reshape(3, 4) / 7.0,
    np.arange(24.0).reshape(2, 3, 4)[:, ::2, 1:],  # non-contiguous view
    np.array([], dtype=np.float64),
    np.array(3.25),
    np.array([1.0, -2.0, 1e300], dtype=">f8"),  # big-endian input keeps its values
]


@pytest.mark.parametrize("encrypted", [False, True])
@pytest.mark.parametrize("payload", FLOAT_PAYLOADS, ids=range(len(FLOAT_PAYLOADS)))
def test_float_roundtrip_is_exact(codecs, payload, encrypted):
    msg = Message(0, (1,), 7, 12, "dual", payload, encrypted=encrypted, meta=(3, -1, 2**40))
    decoded = codecs[1].decode(codecs[0].encode(msg))
    assert_same(msg, decoded)
    decoded.payload[...] = 0.0  # a fresh writable array, not a view on the wire bytes


@pytest.mark.parametrize("encrypted", [False, True])
def test_int_roundtrip_is_exact(codecs, encrypted):
    values = (0, 1, 2**64 + 1, 2**255, MAX_RING_INT - 1, 12345678901234567890)
    msg = Message(2, (3,), 0, 4, "ring", values, encrypted=encrypted)
    data = codecs[2].encode(msg)
    assert_same(msg, codecs[3].decode(data))
    assert len(data) > 32 * len(values)  # fixed width: sizes do not leak magnitudes


def test_broadcast_and_server_messages_roundtrip(codecs):
    msg = Message(0, (1, 2, 3), 2, 0, "primal", np.linspace(-1, 1, 5))
    data = codecs[0].encode(msg)
    for j in (1, 2, 3):
        assert_same(msg, codecs[j].decode(data))
    upload = Message(1, (SERVER,), 0, 0, "upload", np.ones(3), encrypted=True)
    assert_same(upload, codecs[SERVER].decode(codecs[1].encode(upload)))
    empty = Message(2, (0,), 1, 1, "ring", ())
    assert_same(empty, codecs[0].decode(codecs[2].encode(empty)))


def test_encoding_is_compact_and_deterministic(codecs):
    payload = np.random.default_rng(0).standard_normal(100)
    msg = Message(0, (1,), 1, 1, "dual", payload, encrypted=True)
    data = codecs[0].encode(msg)
    assert codecs[0].encode(msg) == data  # retransmissions are byte-identical
    # 800 payload bytes + 28 seal overhead + one 16-byte tag + a header of a few dozen bytes.
    assert len(data) < 800 + 28 + MAC_SIZE + 64
    broadcast = codecs[0].encode(Message(0, (1, 2, 3), 1, 1, "primal", payload))
    assert len(broadcast) - len(codecs[0].encode(Message(0, (1,), 1, 1, "primal", payload))) == 2 * (4 + MAC_SIZE)
    plain = codecs[0].encode(Message(0, (1,), 1, 1, "dual", payload))
    assert payload.astype("<f8").tobytes() in plain


def test_encrypted_payload_is_not_in_clear(codecs):
    payload = np.array([0.123456789, -98765.4321, 3.0e-7, 42.0])
    data = codecs[0].encode(Message(0, (1,), 1, 1, "dual", payload, encrypted=True))
    assert payload.tobytes() not in data
    for value in payload:
        assert struct.pack("<d", value) not in data
        assert struct.pack(">d", value) not in data
    ints = (2**200 + 17, 99991)
    data = codecs[2].encode(Message(2, (3,), 0, 0, "ring", ints, encrypted=True))
    for value in ints:
        assert value.to_bytes(32, "big") not in data


def test_forged_tag_is_rejected(codecs):
    msg = Message(1, (2,), 0, 0, "dual", np.ones(3))
    data = bytearray(codecs[1].encode(msg))
    data[-1] ^= 0x80
    with pytest.raises(ForgedMessage, match="node 1"):
        codecs[2].decode(bytes(data))
    # Node 3 relabels its own message as node 1's: its tag was made with edge {2, 3}.
    honest = codecs[3].encode(Message(3, (2,), 0, 0, "dual", np.ones(3)))
    forged = _set_sender(honest, 1)
    with pytest.raises(ForgedMessage, match="claiming to be from node 1"):
        codecs[2].decode(forged)


def test_each_receiver_checks_only_its_own_tag(codecs):
    """A broadcast carries one tag per receiver; a tag made for one receiver is useless to
    the others, so receiver 1 (who knows edge key {0, 1}) cannot forge node 0's word to 2."""
    msg = Message(0, (1, 2, 3), 4, 5, "primal", np.arange(3.0))
    data = codecs[0].encode(msg)
    tags = data[-3 * MAC_SIZE :]
    assert len(set(tags[k * MAC_SIZE : (k + 1) * MAC_SIZE] for k in range(3))) == 3
    for k, receiver in enumerate((1, 2, 3)):
        broken = bytearray(data)
        broken[len(data) - (3 - k) * MAC_SIZE] ^= 0x01  # spoil receiver k's tag only
        with pytest.raises(ForgedMessage, match="node 0"):
            codecs[receiver].decode(bytes(broken))
        for other in {1, 2, 3} - {receiver}:
            assert_same(msg, codecs[other].decode(bytes(broken)))
    # Receiver 1 alters the payload and re-tags it with what it knows: only it would accept it.
    altered = bytearray(data[: -3 * MAC_SIZE])
    altered[-8:] = struct.pack("<d", 99.0)
    k01 = derive_edge_key(codecs[1].identity, 1, codecs[0].roster[0], 0, RUN)
    forged = bytes(altered) + mac(k01, b"p2pem/envelope/v2\x00", bytes(altered)) + tags[MAC_SIZE:]
    assert codecs[1].decode(forged).payload[-1] == 99.0  # fooling itself is all it can do
    for other in (2, 3):
        with pytest.raises(ForgedMessage):
            codecs[other].decode(forged)


def test_sender_not_in_roster_is_rejected(keys, roster):
    outsider = Identity.generate()
    outsider_codec = Codec(RUN, {**roster, 9: outsider.public}, identity=outsider, node_id=9)
    data = outsider_codec.encode(Message(9, (0,), 0, 0, "dual", np.zeros(2)))
    receiver = Codec(RUN, roster, identity=keys[0], node_id=0)
    with pytest.raises(UnknownSender, match="node 9"):
        receiver.decode(data)


def test_run_id_mismatch_is_rejected(keys, roster, codecs):
    other = Codec("run-2", roster, identity=keys[0], node_id=0)
    data = other.encode(Message(0, (1,), 0, 0, "dual", np.zeros(2)))
    with pytest.raises(WrongRun, match="node 0.*run-2"):
        codecs[1].decode(data)


def test_tampered_payload_and_header_are_rejected(codecs):
    for encrypted in (False, True):
        data = codecs[0].encode(Message(0, (1,), 0, 0, "dual", np.arange(4.0), encrypted=encrypted))
        # The low byte of the iteration number (header), and a payload byte.
        for index in (21, len(data) - MAC_SIZE - 3):
            tampered = bytearray(data)
            tampered[index] ^= 0x01
            with pytest.raises(InvalidMessage, match="node 0"):
                codecs[1].decode(bytes(tampered))


def test_retagged_ciphertext_under_another_name_does_not_open(keys, roster, codecs):
    # Node 2 (an insider with valid keys) takes node 0's sealed message to node 1, claims
    # it as its own and tags it with edge key {1, 2}: the tag is fine, but the box was
    # sealed under edge {0, 1} with a header naming node 0, so it does not open.
    data = codecs[0].encode(Message(0, (1,), 0, 0, "dual", np.arange(4.0), encrypted=True))
    untagged = _set_sender(data, 2)[:-MAC_SIZE]
    k12 = derive_edge_key(keys[2], 2, roster[1], 1, RUN)
    retagged = untagged + mac(k12, b"p2pem/envelope/v2\x00", untagged)
    codecs[1].verify(retagged)  # the tag is node 2's and valid
    with pytest.raises(TamperedMessage, match="node 2"):
        codecs[1].decode(retagged)


def test_message_for_someone_else_and_observers(codecs, roster):
    data = codecs[0].encode(Message(0, (1,), 0, 0, "dual", np.arange(4.0), encrypted=True))
    with pytest.raises(NotAddressed, match="for node 1"):
        codecs[2].decode(data)
    observer = Codec(RUN, roster)
    envelope = observer.parse(data)  # anyone can read the header ...
    assert envelope.encrypted and envelope.payload_nbytes == 32 and envelope.receivers == (1,)
    for codec in (observer, codecs[2]):  # ... but only a receiver can authenticate it
        with pytest.raises(NotAddressed):
            codec.verify(data)
    plain = codecs[0].encode(Message(0, (1, 2), 0, 0, "primal", np.arange(2.0)))
    assert observer.parse(plain).body == np.arange(2.0).tobytes()
    with pytest.raises(NotAddressed, match="for nodes 1, 2, not for this observer"):
        observer.decode(plain)
    with pytest.raises(NotAddressed, match="not for node 3"):
        codecs[3].decode(plain)
    with pytest.raises(WrongRun):
        Codec("run-2", roster).parse(plain)


def test_malformed_bytes_are_rejected(codecs):
    good = codecs[0].encode(Message(0, (1,), 0, 0, "dual", np.arange(4.0)))
    cases = [
        (b"", MalformedMessage, "only 0 bytes"),
        (b"\x00" * 10, MalformedMessage, "only 10 bytes"),
        (b"x" * 200, MalformedMessage, "header length 2021161080 does not fit in 200 bytes"),
        # a byte less or more shifts the tag: it no longer authenticates
        (good[:-1], ForgedMessage, "claiming to be from node 0"),
        (good + b"\x00", ForgedMessage, "claiming to be from node 0"),
    ]
    for junk, error, match in cases:
        with pytest.raises(error, match=match):
            codecs[1].decode(junk)
    version = bytearray(good)
    version[8] = 99
    with pytest.raises(MalformedMessage, match="version 99"):
        codecs[1].decode(bytes(version))


@pytest.mark.parametrize(
    "msg, error, match",
    [
        (Message(1, (2,), 0, 0, "dual", np.arange(3.0)), MalformedMessage, "cannot encode a message claiming sender 1"),
        (Message(0, (1, 2), 0, 0, "dual", np.arange(3.0), encrypted=True), MalformedMessage, "exactly one receiver, has 2"),
        (Message(0, (), 0, 0, "dual", np.arange(3.0), encrypted=True), MalformedMessage, "exactly one receiver, has 0"),
        (Message(0, (1,), 0, 0, "dual", np.arange(3, dtype=np.int64)), MalformedMessage, "must be float64, got int64"),
        (Message(0, (1,), 0, 0, "dual", np.arange(3, dtype=np.float32)), MalformedMessage, "must be float64, got float32"),
        (Message(0, (1,), 0, 0, "ring", (-1,)), MalformedMessage, r"outside \[0, 2\*\*256\)"),
        (Message(0, (1,), 0, 0, "ring", (MAX_RING_INT,)), MalformedMessage, r"outside \[0, 2\*\*256\)"),
        (Message(0, (1,), 0, 0, "ring", (1.5,)), MalformedMessage, "entries must be int, not float"),  # type: ignore[arg-type]
        (Message(0, (1,), 0, 0, "", np.arange(3.0)), MalformedMessage, "kind must be 1-255 bytes"),
        (Message(0, (0,), 0, 0, "dual", np.arange(3.0)), MalformedMessage, "lists its sender among the receivers"),
        (Message(0, (1,), 0, 0, "dual", [1.0, 2.0]), MalformedMessage, "not list"),  # type: ignore[arg-type]
        (Message(0, (1,), 2**63, 0, "dual", np.arange(3.0)), MalformedMessage, "iteration 9223372036854775808 out of range"),
        (Message(0, (), 0, 0, "primal", np.arange(3.0)), MalformedMessage, "has no receiver"),
        (Message(0, (7,), 0, 0, "dual", np.arange(3.0)), UnknownSender, "node 7 is not in the roster"),  # receiver not in the roster
    ],
)
def test_unencodable_messages_raise(codecs, msg, error, match):
    with pytest.raises(error, match=match):
        codecs[0].encode(msg)


def test_launch_nonce_separates_launches_of_one_run(keys, roster):
    """Same run, same keys, another launch: nothing of the first launch authenticates."""
    first = {i: Codec(RUN, roster, identity=keys[i], node_id=i, launch=b"launch-A") for i in (0, 1)}
    second = Codec(RUN, roster, identity=keys[1], node_id=1, launch=b"launch-B")
    for encrypted in (False, True):
        data = first[0].encode(Message(0, (1,), 0, 0, "dual", np.arange(3.0), encrypted=encrypted))
        assert first[1].decode(data).payload.tolist() == [0.0, 1.0, 2.0]
        with pytest.raises(ForgedMessage, match="from an earlier launch"):
            second.decode(data)


def test_sender_holding_the_tag_key_is_blamed_for_an_inconsistent_envelope(keys, roster, codecs):
    """A tag over a payload that contradicts the header can only come from its sender."""
    data = codecs[0].encode(Message(0, (1,), 0, 0, "dual", np.arange(4.0), encrypted=True))
    k01 = derive_edge_key(keys[0], 0, roster[1], 1, RUN)
    for cut in (1, 8):  # a shorter sealed box: wrong length, or a box that no longer opens
        body = bytearray(data[: -MAC_SIZE])
        if cut == 1:
            body = body[:-1]
        else:
            body[-1] ^= 0x01
        forged = bytes(body) + mac(k01, b"p2pem/envelope/v2\x00", bytes(body))
        with pytest.raises(InconsistentMessage if cut == 1 else TamperedMessage, match="node 0"):
            codecs[1].decode(forged)


def test_codec_configuration_checks(keys, roster):
    with pytest.raises(ConfigError, match="does not match"):
        Codec(RUN, roster, identity=keys[1], node_id=0)
    with pytest.raises(ConfigError):
        Codec(RUN, roster, identity=keys[1])
    with pytest.raises(ConfigError):
        Codec("bad/run", roster)
    with pytest.raises(MalformedMessage):
        Codec(RUN, roster).encode(Message(0, (1,), 0, 0, "dual", np.zeros(1)))
    for run_id in ("a", "run-1", "2024.05_x"):
        assert validate_run_id(run_id) == run_id
    for run_id in ("", "-x", "a b", "a/b", "a+", "#", "x" * 65):
        with pytest.raises(ConfigError):
            validate_run_id(run_id)


def test_replay_guard(codecs):
    guard = ReplayGuard()
    msg = Message(0, (1,), 3, 2, "dual", np.arange(3.0), encrypted=True)
    data = codecs[0].encode(msg)
    assert guard.admit(codecs[1].decode(data), data) is True
    assert guard.admit(codecs[1].decode(data), data) is False  # QoS 1 duplicate
    assert guard.admit(codecs[1].decode(data), data) is False
    changed = Message(0, (1,), 3, 2, "dual", np.arange(3.0) + 1, encrypted=True)
    changed_data = codecs[0].encode(changed)
    with pytest.raises(ReplayedMessage, match="node 0"):
        guard.admit(codecs[1].decode(changed_data), changed_data)
    # Other rounds, kinds and receivers are other keys.
    for other in (
        Message(0, (1,), 3, 3, "dual", np.arange(3.0)),
        Message(0, (1,), 3, 2, "primal", np.arange(3.0)),
        Message(0, (2,), 3, 2, "dual", np.arange(3.0)),
    ):
        other_data = codecs[0].encode(other)
        assert guard.admit(other, other_data) is True
    assert len(guard) == 4
    guard.forget_before(4)
    assert len(guard) == 0
    assert issubclass(ReplayedMessage, ProtocolError)


def _set_sender(data: bytes, sender: int) -> bytes:
    # The sender is the i32 at offset 4 (length) + 6 (magic, version, flags).
    out = bytearray(data)
    struct.pack_into(">i", out, 10, sender)
    return bytes(out)
