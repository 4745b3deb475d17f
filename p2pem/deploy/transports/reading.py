"""How a link's paho client reads its socket: one ``recv`` per readiness event, every packet in it.

paho's ``loop_read`` reads one packet per call, byte by byte for the fixed header (a
``recv`` of one byte for the command, one per byte of the remaining length, then the
rest), and turns every PUBLISH into an ``MQTTMessage`` (with a lock and a condition
variable), a debug log record and a callback, which aiomqtt turns into its own ``Message``
with a validated ``Topic``: 18 us of CPU per received message, against 5 us with the reader
below (``sim/bench_mqtt_read.py``).

:class:`PacketReader` replaces the client's ``loop_read`` on a plain TCP socket of MQTT
3.1/3.1.1 (what a p2pem node uses): one ``recv`` of up to :data:`RECV_BYTES` per call,
then every complete packet in the buffer in order.  A QoS 0 PUBLISH (what the broker
sends a node, which subscribes with QoS 0) is split here and handed to the sink as
``(topic, payload)``; any other packet (CONNACK, SUBACK, PUBACK of the node's own QoS 1
publishes, PINGRESP, a QoS > 0 PUBLISH) is handed to paho's own packet handler exactly as
paho's reader would have, and an error code from it ends the call the way paho's
``loop_read`` does (``_loop_rc_handle``).  A partial packet waits in the buffer for the
next readiness event (its remaining bytes raise one).  TLS sockets and MQTT 5 keep
paho's reader, called again while the socket holds bytes (:func:`read_in_bursts`).

The module imports only paho's ``MalformedPacket``: it drives the paho client it is given through
the attributes paho 2.x has (``_sock``, ``_in_packet``, ``_packet_handle``,
``_loop_rc_handle``, ``_msgtime_mutex``, ``_last_bytes_received``, ``_protocol``);
:func:`install` checks they exist and otherwise leaves paho's reader in place.
"""

from __future__ import annotations

import importlib.metadata
import socket
import ssl
import time
from collections.abc import Callable

from paho.mqtt.client import MalformedPacket

#: Most bytes one ``recv`` takes from the socket (about 140 envelopes of a 20-node run).
RECV_BYTES = 1 << 16

#: Most packets one readiness event reads with paho's own reader (:func:`read_in_bursts`).
READ_BURST = 256

#: paho's return codes (``MQTTErrorCode``): success, no connection, protocol error, connection lost.
_OK, _NO_CONN, _PROTOCOL, _CONN_LOST = 0, 4, 2, 7
#: The MQTT 3.1 and 3.1.1 protocol levels paho stores in ``_protocol`` (MQTT 5 is 5).
_MQTT3 = (3, 4)
#: A QoS 0 PUBLISH: packet type 3, DUP 0, QoS 0 (the RETAIN bit may be either).
_PUBLISH_QOS0, _PUBLISH_MASK = 0x30, 0xF6

#: paho-mqtt releases (major, minor) whose private reader state this module was tested against
#: (tests/test_mqtt_reading.py); on any other the link keeps paho's own reader (:func:`install`).
TESTED_PAHO = frozenset({(2, 1), (2, 2)})

_PAHO_ATTRIBUTES = ("_sock", "_in_packet", "_packet_handle", "_loop_rc_handle", "_msgtime_mutex", "_protocol", "loop_read", "socket")


def _fresh_in_packet() -> dict:
    """paho's empty ``_in_packet`` (what its reader resets it to after each packet)."""
    return {
        "command": 0, "have_remaining": 0, "remaining_count": [], "remaining_mult": 1,
        "remaining_length": 0, "packet": bytearray(b""), "to_process": 0, "pos": 0,
    }


class PacketReader:
    """The ``loop_read`` of one paho client (module docstring); ``sink(topic, payload)`` gets
    each QoS 0 PUBLISH.

    Parameters
    ----------
    client : paho.mqtt.client.Client
        Its ``loop_read`` is replaced by this object (:func:`install`).
    sink : callable
        Called with the topic (``str``; invalid UTF-8 replaced, so the link's topic check
        refuses it) and the payload (``bytes``) of every QoS 0 PUBLISH, in arrival order.
    """

    def __init__(self, client: object, sink: Callable[[str, bytes], None]) -> None:
        self.client = client
        self.sink = sink
        self.paho_read = client.loop_read  # type: ignore[attr-defined]
        self.buffer = b""
        self.fast = 0  # packets split here, and handed to paho (counters for the tests)
        self.handed = 0

    def __call__(self, max_packets: int = 1) -> int:
        c = self.client
        sock = c._sock  # type: ignore[attr-defined]
        if sock is None:
            return _NO_CONN
        if isinstance(sock, ssl.SSLSocket) or c._protocol not in _MQTT3 or c._in_packet["command"]:  # type: ignore[attr-defined]
            return read_burst(c, self.paho_read)
        try:
            data = sock.recv(RECV_BYTES)
        except BlockingIOError:
            return _OK
        except OSError:
            return int(c._loop_rc_handle(_CONN_LOST))  # type: ignore[attr-defined]
        if not data:
            return int(c._loop_rc_handle(_CONN_LOST))  # type: ignore[attr-defined]
        with c._msgtime_mutex:  # type: ignore[attr-defined]
            c._last_bytes_received = time.monotonic()  # type: ignore[attr-defined]  # paho's keepalive clock
        buf = self.buffer + data if self.buffer else data
        rc, used = self._packets(buf)
        self.buffer = buf[used:]
        return rc

    def _packets(self, buf: bytes) -> tuple[int, int]:
        """Handle every complete packet of ``buf``: (return code, bytes used)."""
        c = self.client
        sink = self.sink
        n = len(buf)
        pos = 0
        while n - pos >= 2:
            command = buf[pos]
            length, mult, i = 0, 1, pos + 1
            while True:  # the remaining length: 1 to 4 bytes of 7 bits, low first
                if i >= n:
                    return _OK, pos
                byte = buf[i]
                length += (byte & 127) * mult
                mult *= 128
                i += 1
                if byte < 128:
                    break
                if i - pos > 4:
                    return int(c._loop_rc_handle(_PROTOCOL)), n  # type: ignore[attr-defined]
            end = i + length
            if end > n:
                return _OK, pos
            if command & _PUBLISH_MASK == _PUBLISH_QOS0:
                start = i + 2 + ((buf[i] << 8) | buf[i + 1]) if length >= 2 else end + 1  # the payload's, after the topic
                if start > end:
                    return int(c._loop_rc_handle(_PROTOCOL)), n  # type: ignore[attr-defined]
                self.fast += 1
                sink(buf[i + 2 : start].decode("utf-8", "replace"), buf[start:end])
            else:
                rc = self._hand_to_paho(command, buf[i:end], length, mult)
                if rc:
                    return int(c._loop_rc_handle(rc)), n  # type: ignore[attr-defined]
                if c._sock is None:  # type: ignore[attr-defined]  # paho closed the connection (e.g. a refused CONNACK)
                    return _NO_CONN, n
            pos = end
        return _OK, pos

    def _hand_to_paho(self, command: int, body: bytes, length: int, mult: int) -> int:
        """paho's own handler for one whole packet, with ``_in_packet`` as its reader leaves it."""
        c = self.client
        c._in_packet = {  # type: ignore[attr-defined]
            "command": command, "have_remaining": 1, "remaining_count": [], "remaining_mult": mult,
            "remaining_length": length, "packet": bytearray(body), "to_process": 0, "pos": 0,
        }
        self.handed += 1
        try:
            rc = int(c._packet_handle())  # type: ignore[attr-defined]
        except MalformedPacket:  # a garbled packet: paho's reader logs it and returns a protocol error
            rc = _PROTOCOL
        finally:
            c._in_packet = _fresh_in_packet()  # type: ignore[attr-defined]
        return rc


def read_burst(client: object, read_one: Callable[[], int]) -> int:
    """paho's reader (``read_one``) again while the socket has bytes waiting (a non-blocking
    ``MSG_PEEK``), at most :data:`READ_BURST` times: one readiness event, every waiting packet.

    paho reads one packet per call and aiomqtt calls it once per readiness event, so every
    further packet would cost a turn of the event loop.  TLS sockets are read once per
    call: aiomqtt drains their decrypted buffer itself and they accept no ``MSG_PEEK``.
    """
    rc = read_one()
    for _ in range(READ_BURST - 1):
        sock = client.socket()  # type: ignore[attr-defined]
        if rc != 0 or sock is None or isinstance(sock, ssl.SSLSocket):
            break
        try:
            if not sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                break  # closed: paho's next read reports it
        except OSError:  # nothing waiting (BlockingIOError), or a failure paho's next read reports
            break
        rc = read_one()
    return int(rc)


def read_in_bursts(client: object) -> None:
    """Make ``client.loop_read`` read every waiting packet per call (:func:`read_burst`)."""
    read_one = client.loop_read  # type: ignore[attr-defined]
    client.loop_read = lambda max_packets=1: read_burst(client, read_one)  # type: ignore[attr-defined]


def paho_release() -> tuple[int, int] | None:
    """The installed paho-mqtt's (major, minor), or None where it cannot be read."""
    try:
        major, minor = importlib.metadata.version("paho-mqtt").split(".")[:2]
        return int(major), int(minor)
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def install(client: object, sink: Callable[[str, bytes], None], *, release: tuple[int, int] | None = None) -> PacketReader | None:
    """Give ``client`` a :class:`PacketReader` feeding ``sink``; where paho is not a release in
    :data:`TESTED_PAHO` (``release``, default the installed one) or the client lacks an attribute
    the reader drives, paho's reader in bursts instead (None)."""
    release = paho_release() if release is None else release
    if release not in TESTED_PAHO or not all(hasattr(client, name) for name in _PAHO_ATTRIBUTES):
        if hasattr(client, "loop_read") and hasattr(client, "socket"):
            read_in_bursts(client)
        return None
    reader = PacketReader(client, sink)
    client.loop_read = reader  # type: ignore[attr-defined]
    return reader
