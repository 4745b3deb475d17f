from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import socket
import stat
import struct
import subprocess
from collections.abc import Awaitable, Callable

import numpy as np
import pytest
from conftest import unavailable  # the tests folder is on sys.path (pytest's rootdir import mode)

from p2pem.deploy.broker import acl_rules, find_mosquitto, free_port, hash_password, username_for, write_mosquitto_config, write_password_file
from p2pem.deploy.codec import Codec, NotAddressed
from p2pem.deploy.crypto import Identity
from p2pem.errors import ConfigError, TransportError
from p2pem.messages import Message
from p2pem.deploy.transports.mqtt import (
    AccessRefused,
    ConnectionLost,
    LinkTimeout,
    MqttLink,
    parse_topic,
    subscriptions_for,
    topic_for,
)

RUN = "t1"
mqtt = pytest.mark.mqtt


def run(scenario: Callable[[], Awaitable[None]], limit: float = 15.0) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(limit):
            await scenario()

    asyncio.run(bounded())


@pytest.fixture(scope="module")
def codecs() -> dict[int, Codec]:
    keys = {i: Identity.generate() for i in range(3)}
    roster = {i: k.public for i, k in keys.items()}
    return {i: Codec(RUN, roster, identity=k, node_id=i) for i, k in keys.items()}


# ---------------------------------------------------------------- pure helpers
def test_topic_layout():
    broadcast = Message(1, (0, 2), 0, 0, "primal", np.zeros(1))
    direct = Message(1, (2,), 0, 0, "dual", np.zeros(1), encrypted=True)
    assert topic_for(RUN, broadcast) == "p2pem/t1/from/1/all"
    assert topic_for(RUN, direct) == "p2pem/t1/from/1/to/2"
    assert parse_topic(RUN, "p2pem/t1/from/1/all") == (1, None)
    assert parse_topic(RUN, "p2pem/t1/from/-1/to/2") == (-1, 2)
    for bad in ("p2pem/t2/from/1/all", "p2pem/t1/from/x/all", "p2pem/t1/from/1/to/2/x"):
        with pytest.raises(TransportError):
            parse_topic(RUN, bad)
    assert subscriptions_for(RUN, 2, [3, 1]) == [
        "p2pem/t1/from/1/all",
        "p2pem/t1/from/1/to/2",
        "p2pem/t1/from/3/all",
        "p2pem/t1/from/3/to/2",
    ]
    # Every message a node sends lands on a filter each of its receivers holds.
    for msg in (broadcast, direct):
        for receiver in msg.receivers:
            assert topic_for(RUN, msg) in subscriptions_for(RUN, receiver, [1])
    with pytest.raises(ConfigError):
        subscriptions_for(RUN, 2, [2])
    with pytest.raises(ConfigError):
        topic_for("a/b", broadcast)


def test_acl_and_config_text(tmp_path):
    text = acl_rules(RUN, [2, 1])
    assert "user node1\ntopic write p2pem/t1/from/1/#\ntopic read p2pem/t1/#" in text
    assert "user node2\ntopic write p2pem/t1/from/2/#" in text
    assert "user admin\ntopic readwrite p2pem/t1/#" in text
    assert "user observer\ntopic read p2pem/t1/#" in text
    assert "observer" not in acl_rules(RUN, [1], observer=None)
    assert username_for(-1) == "node-1"
    config = write_mosquitto_config(tmp_path, 1884, password_file=tmp_path / "pw", acl_file=tmp_path / "acl")
    lines = config.read_text().splitlines()
    assert "listener 1884 127.0.0.1" in lines
    assert "persistence false" in lines and "allow_anonymous false" in lines
    assert "set_tcp_nodelay true" in lines  # Nagle off on the broker side too
    assert f"password_file {tmp_path / 'pw'}" in lines and f"acl_file {tmp_path / 'acl'}" in lines
    assert "allow_anonymous true" in write_mosquitto_config(tmp_path, 1884).read_text()
    with pytest.raises(ConfigError):
        write_mosquitto_config(tmp_path, 1884, acl_file=tmp_path / "a b")


def pbkdf2_line(line: str, password: str) -> bool:
    """Does ``user:$7$iterations$salt$hash`` hold ``password``?  (Mosquitto 2's check, written here from its format.)"""
    _, hashed = line.split(":", 1)
    empty, seven, iterations, salt, digest = hashed.split("$")
    assert empty == "" and seven == "7"
    expected = hashlib.pbkdf2_hmac("sha512", password.encode(), base64.b64decode(salt, validate=True), int(iterations))
    return base64.b64decode(digest, validate=True) == expected


def test_password_file_is_hashed_salted_and_private(tmp_path):
    users = {"node1": "s3cret:x", "observer": "pw", "admin": "pw"}
    path = write_password_file(tmp_path / "pw", users)
    lines = path.read_text().splitlines()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [line.split(":", 1)[0] for line in lines] == list(users)
    assert all(pbkdf2_line(line, pw) for line, pw in zip(lines, users.values(), strict=True))
    assert not pbkdf2_line(lines[0], "s3cret:y") and "s3cret" not in path.read_text()
    assert lines[1].split("$")[3] != lines[2].split("$")[3]  # a fresh salt per user: equal passwords, unequal lines
    with pytest.raises(ConfigError):
        write_password_file(tmp_path / "pw2", {"bad:user": "x"})
    with pytest.raises(ConfigError):
        write_password_file(tmp_path / "pw3", {"user": "two\nlines"})


@mqtt
def test_password_hash_is_what_mosquitto_passwd_writes(tmp_path):
    """The same password, salt and iteration count give mosquitto_passwd's line to the byte.

    (Without a ':' in the passwords: ``mosquitto_passwd -U`` hashes only what precedes one,
    while the broker checks the whole password at login, as write_password_file hashes it.)"""
    passwd = find_mosquitto("mosquitto_passwd")
    if passwd is None:
        unavailable("mosquitto is not installed (mosquitto_passwd comes with it)")
    plain = {"node1": "s3cret x", "observer": "pw ü €"}
    path = tmp_path / "pw"
    path.write_text("".join(f"{u}:{p}\n" for u, p in plain.items()))
    subprocess.run([str(passwd), "-U", str(path)], check=True, capture_output=True, timeout=30)
    for line, (user, password) in zip(path.read_text().splitlines(), plain.items(), strict=True):
        _, _, iterations, salt, _ = line.split("$")
        assert line == f"{user}:{hash_password(password, iterations=int(iterations), salt=base64.b64decode(salt))}"


@mqtt
def test_broker_accepts_the_python_written_passwords_and_refuses_others(mosquitto_broker):
    """The fixture's password file is write_password_file's: the right password logs in, a
    wrong one is AccessRefused (the node stops at once instead of retrying)."""
    broker = mosquitto_broker(passwords={"node1": "pw:1 ü"})

    async def scenario() -> None:
        async with MqttLink(broker.host, broker.port, username="node1", password="pw:1 ü", timeout=3) as link:
            assert link.connected
        for user, password in (("node1", "pw"), ("node2", "pw:1 ü"), (None, None)):
            with pytest.raises(AccessRefused, match=broker.address):
                async with MqttLink(broker.host, broker.port, username=user, password=password, timeout=3):
                    pass

    run(scenario)


def test_unreachable_broker_names_the_address():
    port = free_port()

    async def scenario() -> None:
        with pytest.raises(TransportError, match=f"127.0.0.1:{port}"):
            async with MqttLink("127.0.0.1", port, timeout=2):
                pass

    run(scenario)


def test_broker_answering_fewer_reason_codes_than_filters_is_refused():
    """A (broken or hostile) broker acknowledges two filters with one reason code: the link
    must not take the missing one as granted (a truncating zip would)."""

    async def read_packet(reader: asyncio.StreamReader) -> tuple[int, bytes]:
        header = (await reader.readexactly(1))[0]
        length, shift = 0, 0
        while True:
            byte = (await reader.readexactly(1))[0]
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        return header, await reader.readexactly(length)

    async def fake_broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                header, body = await read_packet(reader)
                if header >> 4 == 1:  # CONNECT -> CONNACK, accepted
                    writer.write(bytes([0x20, 2, 0, 0]))
                elif header >> 4 == 8:  # SUBSCRIBE -> SUBACK with a single QoS 0 code
                    writer.write(bytes([0x90, 3]) + body[:2] + bytes([0]))
                elif header >> 4 == 12:  # PINGREQ
                    writer.write(bytes([0xD0, 0]))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def scenario() -> None:
        server = await asyncio.start_server(fake_broker, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            link = MqttLink("127.0.0.1", port, subscriptions=["p2pem/t1/from/1/all", "p2pem/t1/from/2/all"], subscribe_qos=0, timeout=3)
            with pytest.raises(TransportError, match=r"answered 1 reason code\(s\) to a subscription of 2 filter"):
                await link.connect()
            await link.close()

    run(scenario)


# ---------------------------------------------------------------- real broker
def nodelay_of_sockets_to(port: int) -> list[int]:
    """TCP_NODELAY of each of this process's sockets connected to ``127.0.0.1:port``, read
    through a duplicate of its file descriptor (the kernel's own view, whoever holds it)."""
    found = []
    for fd in range(3, 4096):
        try:
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        with sock:
            try:
                if sock.type == socket.SOCK_STREAM and sock.getpeername()[:2] == ("127.0.0.1", port):
                    found.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            except OSError:
                pass
    assert found, f"no socket connected to port {port}"
    return found


@mqtt
def test_link_switches_nagle_off_and_late_subscribers_get_retained_messages(mosquitto_broker):
    broker = mosquitto_broker()

    async def scenario() -> None:
        async with MqttLink(broker.host, broker.port, timeout=3) as early:
            # Nagle's algorithm would add up to 40 ms to every hop of a consensus round.
            assert all(nodelay_of_sockets_to(broker.port))
            await early.publish("p2pem/t1/from/0/all", b"stopped", retain=True)
            await early.publish("p2pem/t1/from/0/all", b"not kept")
            # ... so that a client subscribing afterwards still learns of the retained one
            async with MqttLink(broker.host, broker.port, timeout=3, subscriptions=["p2pem/t1/from/0/all"]) as late:
                assert await late.receive(timeout=3) == ("p2pem/t1/from/0/all", b"stopped")
                with pytest.raises(LinkTimeout):
                    await late.receive(timeout=0.3)
                # a zero-byte retained publish clears it, and is delivered to subscribers as such
                await early.publish("p2pem/t1/from/0/all", b"", retain=True)
                assert await late.receive(timeout=3) == ("p2pem/t1/from/0/all", b"")
            async with MqttLink(broker.host, broker.port, timeout=3, subscriptions=["p2pem/t1/from/0/all"]) as later:
                with pytest.raises(LinkTimeout):
                    await later.receive(timeout=0.3)

    run(scenario)


@mqtt
def test_encoded_message_roundtrip_between_two_links(mosquitto_broker, codecs):
    broker = mosquitto_broker()
    messages = [
        Message(0, (1, 2), 1, 0, "primal", np.array([1.5, -0.0, 1e-300])),
        Message(0, (1,), 1, 1, "dual", np.array([0.25, 7.0]), encrypted=True, meta=(4,)),
        Message(0, (1,), 1, 2, "ring", (2**255 + 3, 0)),
    ]

    async def scenario() -> None:
        async with (
            MqttLink(broker.host, broker.port, identifier="node0", timeout=3) as sender,
            MqttLink(
                broker.host, broker.port, identifier="node1", timeout=3, subscriptions=subscriptions_for(RUN, 1, [0, 2])
            ) as receiver,
        ):
            for msg in messages:
                await sender.publish(topic_for(RUN, msg), codecs[0].encode(msg))
            for msg in messages:
                topic, payload = await receiver.receive(timeout=3)
                assert parse_topic(RUN, topic) == (0, msg.receivers[0] if len(msg.receivers) == 1 else None)
                decoded = codecs[1].decode(payload)
                assert (decoded.iteration, decoded.round, decoded.kind, decoded.meta) == (
                    msg.iteration,
                    msg.round,
                    msg.kind,
                    msg.meta,
                )
                if isinstance(msg.payload, np.ndarray):
                    assert decoded.payload.tobytes() == msg.payload.tobytes()
                else:
                    assert decoded.payload == msg.payload
            with pytest.raises(LinkTimeout, match=broker.address):
                await receiver.receive(timeout=0.1)
            assert receiver.pending == 0

    run(scenario)


@mqtt
def test_acl_stops_publishing_under_another_nodes_name(mosquitto_broker):
    passwords = {"node1": "pw1", "node2": "pw2", "observer": "pwo"}
    broker = mosquitto_broker(passwords=passwords, acl=acl_rules(RUN, [1, 2]))

    def link(user: str, **kwargs: object) -> MqttLink:
        return MqttLink(broker.host, broker.port, username=user, password=passwords[user], timeout=3, **kwargs)

    async def scenario() -> None:
        async with link("observer", subscriptions=[f"p2pem/{RUN}/#"]) as observer, link("node1") as intruder:
            try:
                await intruder.publish(f"p2pem/{RUN}/from/2/all", b"forged by node1")
            except TransportError:
                pass  # the broker may already have closed the connection (see below)
            # Mosquitto 2.0 drops the publish *and* closes the intruder's connection.
            for _ in range(50):
                if not intruder.connected:
                    break
                await asyncio.sleep(0.02)
            async with link("node1") as honest:
                await honest.publish(f"p2pem/{RUN}/from/1/all", b"by node1")
            # Publishes are processed in arrival order, so the forged one would be first.
            assert await observer.receive(timeout=3) == (f"p2pem/{RUN}/from/1/all", b"by node1")
            with pytest.raises(LinkTimeout):
                await observer.receive(timeout=0.3)
        with pytest.raises(AccessRefused, match="Not authorized"):
            async with MqttLink(broker.host, broker.port, username="node1", password="wrong", timeout=3):
                pass

    run(scenario)


@mqtt
def test_eavesdropper_sees_only_ciphertext(mosquitto_broker, codecs):
    broker = mosquitto_broker()
    payload = np.array([0.7071067811865476, -1234.5678, 6.02214076e23])
    msg = Message(0, (1,), 3, 5, "dual", payload, encrypted=True)

    async def scenario() -> None:
        async with (
            MqttLink(broker.host, broker.port, subscriptions=["#"], timeout=3) as eavesdropper,
            MqttLink(broker.host, broker.port, subscriptions=subscriptions_for(RUN, 1, [0]), timeout=3) as node1,
            MqttLink(broker.host, broker.port, timeout=3) as node0,
        ):
            await node0.publish(topic_for(RUN, msg), codecs[0].encode(msg))
            topic, seen = await eavesdropper.receive(timeout=3)
            assert topic == f"p2pem/{RUN}/from/0/to/1"
            assert payload.tobytes() not in seen
            for value in payload:
                assert struct.pack("<d", value) not in seen and struct.pack(">d", value) not in seen
            with pytest.raises(NotAddressed):
                codecs[2].decode(seen)  # another node cannot open it either
            _, delivered = await node1.receive(timeout=3)
            assert delivered == seen
            assert codecs[1].decode(delivered).payload.tobytes() == payload.tobytes()

    run(scenario)


@mqtt
def test_reconnect_after_broker_restart(mosquitto_broker):
    broker = mosquitto_broker()
    topic = f"p2pem/{RUN}/from/0/all"

    async def scenario() -> None:
        async with (
            MqttLink(broker.host, broker.port, subscriptions=[topic], timeout=3) as sub,
            MqttLink(broker.host, broker.port, timeout=3) as pub,
        ):
            await pub.publish(topic, b"before")
            assert (await sub.receive(timeout=3)).payload == b"before"
            await asyncio.to_thread(broker.restart)
            # The loss is reported, never hidden: receive raises once the queue is drained.
            with pytest.raises(ConnectionLost, match=broker.address):
                await sub.receive(timeout=3)
            assert not sub.connected
            with pytest.raises(ConnectionLost):
                await pub.publish(topic, b"lost")
            assert await sub.reconnect() >= 1
            await pub.reconnect()
            assert sub.connected and sub.connections == 2
            await pub.publish(topic, b"after")
            assert (await sub.receive(timeout=3)).payload == b"after"

    run(scenario)


@mqtt
def test_reconnect_waits_for_a_broker_that_comes_back(mosquitto_broker):
    broker = mosquitto_broker()

    async def scenario() -> None:
        async with MqttLink(broker.host, broker.port, timeout=2) as link:
            broker.stop()
            with pytest.raises(ConnectionLost):
                await link.receive(timeout=3)
            with pytest.raises(TransportError, match=f"after 2 attempts.*{broker.address}"):
                await link.reconnect(attempts=2, delay=0.05)

            async def start_later() -> None:
                await asyncio.sleep(0.3)
                await asyncio.to_thread(broker.start)

            attempts, _ = await asyncio.gather(link.reconnect(attempts=30, delay=0.05, max_delay=0.1), start_later())
            assert attempts > 1 and link.connected

    run(scenario)


@mqtt
def test_persistent_session_keeps_messages_while_away(mosquitto_broker):
    broker = mosquitto_broker()
    topic = f"p2pem/{RUN}/from/0/to/1"

    async def scenario() -> None:
        node1 = MqttLink(
            broker.host, broker.port, identifier="t1-node1", clean_session=False, subscriptions=[topic], timeout=3
        )
        async with MqttLink(broker.host, broker.port, timeout=3) as node0:
            await node1.connect()
            await node1.close()
            await node0.publish(topic, b"while away")
            await node1.connect()
            try:
                assert (await node1.receive(timeout=3)).payload == b"while away"
            finally:
                await node1.close()
        with pytest.raises(ConfigError):
            MqttLink(broker.host, broker.port, clean_session=False)

    run(scenario)


@mqtt
def test_async_iteration_stops_when_closed(mosquitto_broker):
    broker = mosquitto_broker()
    topic = f"p2pem/{RUN}/from/0/all"

    async def scenario() -> None:
        link = MqttLink(broker.host, broker.port, subscriptions=[topic], timeout=3)
        await link.connect()
        await link.publish(topic, b"a")
        await link.publish(topic, b"b")
        received = []
        async for incoming in link:
            received.append(incoming.payload)
            if len(received) == 2:
                await link.close()
        assert received == [b"a", b"b"]
        with pytest.raises(TransportError, match="not connected"):
            await link.publish(topic, b"c")

    run(scenario)


@mqtt
def test_qos0_subscriber_that_stops_reading_loses_nothing(mosquitto_broker):
    """A p2pem node subscribes with QoS 0 (no PUBACK per delivery).  A subscriber that stops
    reading for a while must still get every message, in order: the broker the launcher
    configures queues for it without limit (``max_queued_messages 0``) instead of dropping,
    which Mosquitto's default (1000) would do here."""
    import threading

    broker = mosquitto_broker()
    topic = f"p2pem/{RUN}/from/0/all"
    n, blob = 8000, bytes(2000)  # 16 MB: more than the sockets buffer, so the broker must queue
    ready, resume = threading.Event(), threading.Event()
    got: list[int] = []

    def subscriber() -> None:
        async def main() -> None:
            async with MqttLink(broker.host, broker.port, subscriptions=[topic], subscribe_qos=0, timeout=5) as sub:
                ready.set()
                resume.wait(20)  # blocks this event loop: nothing reads the socket meanwhile
                for _ in range(n):
                    got.append(struct.unpack(">I", (await sub.receive(timeout=5)).payload[:4])[0])

        asyncio.run(main())

    thread = threading.Thread(target=subscriber)
    thread.start()

    async def publish() -> None:
        assert await asyncio.to_thread(ready.wait, 10)
        async with MqttLink(broker.host, broker.port, timeout=5) as pub:
            for start in range(0, n, 500):
                await asyncio.gather(*(pub.publish(topic, struct.pack(">I", k) + blob) for k in range(start, min(n, start + 500))))

    try:
        run(publish, limit=30)
    finally:
        resume.set()
        thread.join(30)
    assert got == list(range(n))


def test_one_readiness_event_reads_every_waiting_packet_and_no_more():
    """paho reads one packet per ``loop_read``; the wrapper keeps calling it while the socket
    holds bytes (so a burst costs one event-loop turn), stops when nothing waits, when paho
    reports an error, and after READ_BURST packets."""
    from p2pem.deploy.transports.reading import READ_BURST
    from p2pem.deploy.transports.reading import read_in_bursts as _read_in_bursts

    a, b = socket.socketpair()
    a.setblocking(False)

    class FakePaho:
        def __init__(self, fail_after: int | None = None) -> None:
            self.packets: list[bytes] = []
            self.fail_after = fail_after

        def socket(self) -> socket.socket:
            return a

        def loop_read(self, max_packets: int = 1) -> int:
            if self.fail_after is not None and len(self.packets) >= self.fail_after:
                return 7  # an error code: the wrapper stops and returns it
            try:
                self.packets.append(a.recv(1))  # a "packet" is one byte here
            except BlockingIOError:
                pass
            return 0

    try:
        client = FakePaho()
        _read_in_bursts(client)
        b.sendall(b"abcde")
        assert client.loop_read() == 0 and client.packets == [b"a", b"b", b"c", b"d", b"e"]
        assert client.loop_read() == 0 and len(client.packets) == 5  # nothing waiting: one empty try
        b.sendall(bytes(READ_BURST + 10))
        client.loop_read()
        assert len(client.packets) == 5 + READ_BURST
        client.loop_read()
        assert len(client.packets) == 5 + READ_BURST + 10
        failing = FakePaho(fail_after=2)
        _read_in_bursts(failing)
        b.sendall(b"xyz")
        assert failing.loop_read() == 7 and failing.packets == [b"x", b"y"]
    finally:
        a.close()
        b.close()
