"""The link's socket reader against paho's own: the same packets, in the same order, from any byte stream.

``p2pem.deploy.transports.reading.PacketReader`` splits QoS 0 PUBLISH packets itself and
hands every other packet to paho's handler.  The reference is paho 2.x reading the same
bytes with its own ``loop_read`` (byte by byte, one packet per call), its handler recorded;
the topic and payload of each QoS 0 PUBLISH are what paho's own ``decode_publish`` finds.
"""

from __future__ import annotations

import socket

import numpy as np
import paho.mqtt.client as paho
import pytest
from paho.mqtt import _packet

from p2pem.deploy.transports import reading


def _remaining(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (128 if n else 0))
        if not n:
            return bytes(out)


def _packet_bytes(command: int, body: bytes) -> bytes:
    return bytes([command]) + _remaining(len(body)) + body


def _publish(topic: bytes, payload: bytes, qos: int = 0, retain: bool = False, mid: int = 1) -> bytes:
    body = len(topic).to_bytes(2, "big") + topic + (mid.to_bytes(2, "big") if qos else b"") + payload
    return _packet_bytes(0x30 | (qos << 1) | int(retain), body)


def _random_stream(rng: np.random.Generator, n: int) -> bytes:
    """QoS 0 publishes (retained or not, payloads across the 1-, 2- and 3-byte remaining
    lengths), QoS 1 publishes, PUBACKs, SUBACKs and PINGRESPs, in random order."""
    out = []
    for _ in range(n):
        kind = rng.integers(6)
        if kind <= 2:
            size = int(rng.choice([0, 1, 100, 200, 400, 20_000]))
            topic = f"p2pem/r/from/{int(rng.integers(100))}/all".encode()
            out.append(_publish(topic, rng.bytes(size), retain=bool(rng.integers(2))))
        elif kind == 3:
            out.append(_publish(b"p2pem/r/from/3/to/1", rng.bytes(50), qos=1, mid=int(rng.integers(1, 60_000))))
        elif kind == 4:
            out.append(_packet_bytes(0x40, int(rng.integers(1, 60_000)).to_bytes(2, "big")))  # PUBACK
        else:
            out.append(bytes([0x90, 3, 0, 7, 0]) if rng.integers(2) else bytes([0xD0, 0]))  # SUBACK, PINGRESP
    return b"".join(out)


class _Recorder:
    """A paho client on one end of a socket pair whose packet handler records what it is given."""

    def __init__(self, sock: socket.socket) -> None:
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2)
        self.client._sock = sock
        self.handled: list[tuple[int, bytes, int]] = []
        self.lost: list[int] = []
        self.client._packet_handle = self._handle
        self.client._loop_rc_handle = lambda rc: self.lost.append(int(rc)) or rc

    def _handle(self) -> int:
        p = self.client._in_packet
        self.handled.append((p["command"], bytes(p["packet"]), p["remaining_length"]))
        return 0


def _reference(stream: bytes, chunks: list[int]) -> list[tuple[int, bytes, int]]:
    a, b = socket.socketpair()
    a.setblocking(False)
    rec = _Recorder(a)
    try:
        pos = 0
        for size in chunks:
            b.sendall(stream[pos : pos + size])
            pos += size
            while rec.client._packet_read() == 0:  # paho's reader, one packet per call, until it waits
                pass
        return rec.handled
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("seed", range(4))
def test_the_reader_finds_what_paho_finds_in_any_stream_cut_anywhere(seed):
    rng = np.random.default_rng(seed)
    stream = _random_stream(rng, 300)
    cuts = np.sort(rng.choice(np.arange(1, len(stream)), size=120, replace=False))
    chunks = list(np.diff(np.concatenate([[0], cuts, [len(stream)]])).astype(int))
    expected = _reference(stream, chunks)

    a, b = socket.socketpair()
    a.setblocking(False)
    rec = _Recorder(a)
    got: list[tuple[int, bytes, int] | tuple[str, bytes]] = []
    rec.handled = got  # paho's handler and the sink write into one list: their order is checked too
    reader = reading.install(rec.client, lambda topic, payload: got.append((topic, payload)))
    assert reader is not None and rec.client.loop_read is reader
    try:
        pos = 0
        for size in chunks:
            b.sendall(stream[pos : pos + size])
            pos += size
            assert rec.client.loop_read() == 0
        assert reader.buffer == b"" and not rec.lost
    finally:
        a.close()
        b.close()

    want: list[tuple[int, bytes, int] | tuple[str, bytes]] = []
    for command, body, length in expected:
        if command & 0xF6 == 0x30:
            decoded = _packet.decode_publish(command, bytearray(body), paho.MQTTv311)
            want.append((decoded.topic.decode(), bytes(decoded.payload)))
        else:
            want.append((command, body, length))
    assert got == want
    assert reader.fast == sum(1 for w in want if isinstance(w[0], str)) > 50
    assert reader.handed == len(want) - reader.fast > 50


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"\x30\xff\xff\xff\xff\x01", 2),  # a remaining length of five bytes: a protocol error
        (_packet_bytes(0x30, b"\x00\x09abc"), 2),  # a topic longer than its packet
        (b"", 7),  # the broker closed the connection
    ],
)
def test_a_garbled_stream_or_a_closed_socket_ends_the_connection_as_paho_would(data, code):
    a, b = socket.socketpair()
    a.setblocking(False)
    rec = _Recorder(a)
    got: list = []
    reading.install(rec.client, lambda topic, payload: got.append(topic))
    try:
        b.sendall(_publish(b"t/1", b"ok") + data)
        if not data:
            b.shutdown(socket.SHUT_WR)
            assert rec.client.loop_read() == 0 and got == ["t/1"]
        rec.client.loop_read()
        assert rec.lost == [code] and got == ["t/1"]
    finally:
        a.close()
        b.close()


def test_a_garbled_packet_for_paho_s_handler_ends_the_connection_as_paho_s_reader_does():
    """A QoS 1 PUBLISH whose topic runs past its end: paho's handler raises MalformedPacket,
    which its reader turns into a protocol error; so must the link's reader (not raise)."""
    garbled = _packet_bytes(0x32, b"\x00\x09ab\x00\x01")
    codes = {}
    for who in ("paho", "reader"):
        a, b = socket.socketpair()
        a.setblocking(False)
        client = paho.Client(paho.CallbackAPIVersion.VERSION2)
        client._sock = a
        lost: list[int] = []
        client._loop_rc_handle = lambda rc, lost=lost: lost.append(int(rc)) or rc
        if who == "reader":
            reading.install(client, lambda topic, payload: None)
        try:
            b.sendall(garbled)
            codes[who] = (int(client._packet_read()), lost) if who == "paho" else (0, lost)
            if who == "reader":
                client.loop_read()
        finally:
            a.close()
            b.close()
    assert codes["paho"] == (2, []) and codes["reader"][1] == [2]


def test_a_client_without_the_expected_internals_keeps_its_reader_in_bursts():
    class Other:
        def __init__(self) -> None:
            self.calls = 0

        def loop_read(self, max_packets: int = 1) -> int:
            self.calls += 1
            return 0

        def socket(self) -> None:
            return None

    other = Other()
    assert reading.install(other, lambda t, p: None) is None
    assert other.loop_read() == 0 and other.calls == 1


def test_an_untested_paho_release_keeps_pahos_reader_and_reads_the_same_stream():
    """The fast path is fenced by paho's version: on a release not in TESTED_PAHO the link reads
    through paho's own reader (in bursts), and both paths deliver the same packets in the same order."""
    assert reading.paho_release() in reading.TESTED_PAHO  # the installed paho is one the fast path was tested on
    stream = _random_stream(np.random.default_rng(11), 120)
    seen = []
    for release in (reading.paho_release(), (99, 0)):
        a, b = socket.socketpair()
        a.setblocking(False)
        rec = _Recorder(a)
        got: list[tuple[int, bytes, int] | tuple[str, bytes]] = []
        rec.handled = got
        reader = reading.install(rec.client, lambda topic, payload, got=got: got.append((topic, payload)), release=release)
        assert (reader is None) == (release == (99, 0))
        try:
            b.sendall(stream)
            before = -1
            while len(got) != before:
                before = len(got)
                rec.client.loop_read()
        finally:
            a.close()
            b.close()
        seen.append([(decoded.topic.decode(), bytes(decoded.payload))
                     if isinstance(entry[0], int) and entry[0] & 0xF6 == 0x30
                     and (decoded := _packet.decode_publish(entry[0], bytearray(entry[1]), paho.MQTTv311)) else entry
                     for entry in got])
    fast, slow = seen
    assert len(fast) > 100 and fast == slow
