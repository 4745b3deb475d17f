"""An asyncio link to an MQTT broker, and the p2pem topic layout.

This is the only module of p2pem that imports ``aiomqtt`` (``>=2.5,<3``).  It moves
opaque byte strings; what they mean (the envelopes of :mod:`p2pem.deploy.codec`) and when
to wait for whom is the Node runtime's business.

Topic layout, for run ``<run>``::

    p2pem/<run>/from/<i>/all        broadcasts of node i (every neighbour listens)
    p2pem/<run>/from/<i>/to/<j>     point-to-point messages from i to j

so the broker ACL (:mod:`p2pem.deploy.broker`) can give node ``i`` write access to
``p2pem/<run>/from/<i>/#`` only.

Delivery is MQTT QoS 1 (at least once): duplicates are possible and are filtered by
:class:`p2pem.deploy.admission.ReplayGuard`.  Incoming messages go to an unbounded queue, so the
link never drops a message it has received; a lost connection is reported as
:class:`ConnectionLost` and repaired only when the caller calls :meth:`MqttLink.reconnect`.

The socket has Nagle's algorithm switched off (``TCP_NODELAY``): consensus is a chain of
small messages, each waiting for the previous one, and with Nagle on a small write waits
for the ACK of the last one, which Linux delays by up to 40 ms; a publish-receive round
trip on loopback then takes ~90 ms instead of ~0.7 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import socket
import ssl
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType


import aiomqtt

from p2pem.deploy.transports import reading
from p2pem.errors import ConfigError, TransportError
from p2pem.deploy.transports.base import (
    TOPIC_ROOT,
    AccessRefused,
    CertificateRefused,
    ConnectionLost,
    Inbox,
    Incoming,
    LinkTimeout,
    parse_topic,
    subscriptions_for,
    topic_for,
)

logger = logging.getLogger(__name__)
_paho_logger = logging.getLogger(__name__ + ".paho")

__all__ = [
    "TOPIC_ROOT",
    "AccessRefused",
    "ConnectionLost",
    "Incoming",
    "LinkTimeout",
    "MqttLink",
    "parse_topic",
    "subscriptions_for",
    "topic_for",
]

#: Socket options of every broker connection: Nagle off (see the module docstring).
SOCKET_OPTIONS = ((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),)

#: aiomqtt logs a warning for every publish made while more than this many are unacknowledged
#: (its default is 10, which every aggregation of a node with more than 10 neighbours passed:
#: 200 lines per node log in a 20-node run).
PENDING_PUBLISHES_QUIET = 1000


class _Forward(asyncio.Queue):
    """Stands in for aiomqtt's incoming queue and hands every message straight to the link.

    aiomqtt puts each received message into a queue of the class it is given
    (``queue_type``) and its ``messages`` iterator takes them out with one task and one
    ``asyncio.wait`` per message.  This queue never holds a message: ``put_nowait`` passes
    it on, so a message costs one append, and aiomqtt's iterator, still awaited by the
    link's watcher task, only ever ends by raising when the connection is lost.
    """

    def __init__(self, sink: Callable[[aiomqtt.Message], None], maxsize: int = 0) -> None:
        super().__init__()
        self._sink = sink

    def put_nowait(self, item: aiomqtt.Message) -> None:
        self._sink(item)


class MqttLink(Inbox):
    """One connection to an MQTT broker: subscribe, publish bytes, receive bytes.

    Use it as ``async with MqttLink(...) as link:``.  All broker operations have an
    explicit timeout; every failure is a :class:`~p2pem.errors.TransportError` whose
    message names ``host:port``.

    Parameters
    ----------
    host : str
        Broker host name or address.
    port : int, default 1883
        Broker port.
    subscriptions : sequence of str, optional
        Topic filters subscribed on every (re)connection.
    username, password : str, optional
        Broker credentials (``node<i>`` in a p2pem deployment).
    identifier : str, optional
        MQTT client id; the broker assigns one when omitted.  Must be unique: the
        broker disconnects an older client when a new one connects with the same id.
    tls_context : ssl.SSLContext, optional
        Connect with TLS using this context.
    timeout : float, default 10.0
        Seconds allowed for connecting, subscribing and each publish, and the
        default wait of :meth:`receive`.
    keepalive : int, default 30
        MQTT keep-alive interval in seconds; a dead connection is noticed after
        about 1.5 times this.
    qos : int, default 1
        QoS of the default of :meth:`publish` (node to broker), and of subscriptions
        unless ``subscribe_qos`` is given.
    subscribe_qos : int, optional
        QoS of subscriptions (broker to node).  A p2pem node subscribes with 0: with a
        clean session, QoS 1 on this leg adds a PUBACK per delivery and nothing else (see
        the module docstring).
    clean_session : bool, default True
        With False (requires ``identifier``) the broker keeps the subscriptions and
        queues QoS 1 messages while this client is away; this does not survive a
        broker restart (persistence is off).

    Attributes
    ----------
    connections : int
        Number of successful connections so far (1 plus the reconnections).

    Examples
    --------
    >>> async def main():                                    # doctest: +SKIP
    ...     async with MqttLink("127.0.0.1", 1883, subscriptions=["p2pem/r/from/1/all"]) as link:
    ...         await link.publish("p2pem/r/from/1/all", b"hello")
    ...         topic, payload = await link.receive(timeout=2.0)
    """

    def __init__(
        self,
        host: str,
        port: int = 1883,
        *,
        subscriptions: Sequence[str] = (),
        username: str | None = None,
        password: str | None = None,
        identifier: str | None = None,
        tls_context: ssl.SSLContext | None = None,
        timeout: float = 10.0,
        keepalive: int = 30,
        qos: int = 1,
        subscribe_qos: int | None = None,
        clean_session: bool = True,
    ) -> None:
        if subscribe_qos is None:
            subscribe_qos = qos
        for value in (qos, subscribe_qos):
            if value not in (0, 1, 2):
                raise ConfigError(f"MQTT QoS must be 0, 1 or 2, not {value!r}")
        if not clean_session and not identifier:
            raise ConfigError("a persistent MQTT session (clean_session=False) needs an identifier")
        if not timeout > 0:
            raise ConfigError(f"timeout must be positive, not {timeout!r}")
        self.host = host
        self.port = int(port)
        self.username = username
        self._password = password
        self.identifier = identifier
        self.tls_context = tls_context
        self.timeout = float(timeout)
        self.keepalive = int(keepalive)
        self.qos = qos
        self.subscribe_qos = subscribe_qos
        self.clean_session = clean_session
        self._subscriptions: list[str] = []
        for topic_filter in subscriptions:
            if topic_filter not in self._subscriptions:
                self._subscriptions.append(topic_filter)
        self._client: aiomqtt.Client | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._pump: asyncio.Task[None] | None = None
        Inbox.__init__(self)
        self._lost: str | None = None
        self.connections = 0

    def __repr__(self) -> str:
        state = "connected" if self.connected else ("lost" if self._lost else "closed")
        return f"MqttLink({self.address}, {state}, user={self.username!r})"

    # ------------------------------------------------------------ properties
    @property
    def address(self) -> str:
        """``host:port`` of the broker."""
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        """True while a connection is up and has not been reported lost."""
        return self._client is not None and self._lost is None

    @property
    def subscriptions(self) -> tuple[str, ...]:
        """Topic filters (re)subscribed on every connection."""
        return tuple(self._subscriptions)

    # ------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> MqttLink:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def connect(self) -> None:
        """Connect, subscribe to :attr:`subscriptions` and start receiving.

        Raises
        ------
        TransportError
            If the broker is unreachable, refuses the credentials, denies a
            subscription, or does not answer within :attr:`timeout`.
        """
        if self._client is not None:
            raise TransportError(f"link to {self.address} is already connected; close or reconnect it")
        client = aiomqtt.Client(
            self.host,
            self.port,
            username=self.username,
            password=self._password,
            identifier=self.identifier,
            tls_context=self.tls_context,
            timeout=self.timeout,
            keepalive=self.keepalive,
            clean_session=None if self.clean_session else False,
            logger=_paho_logger,
            queue_type=functools.partial(_Forward, self._accept),  # type: ignore[arg-type]  # aiomqtt only calls queue_type(), a factory does
            socket_options=SOCKET_OPTIONS,
        )
        # a node publishes one dual per edge at once (and their acknowledgements overlap): no
        # warning per publish beyond aiomqtt's default of 10 pending
        client.pending_calls_threshold = PENDING_PUBLISHES_QUIET
        # aiomqtt keeps its paho client in ``_client``: read it with one recv per readiness event
        if hasattr(client, "_client"):
            reading.install(client._client, self._accept_raw)
        stack = contextlib.AsyncExitStack()
        try:
            await stack.enter_async_context(client)
        except aiomqtt.MqttError as exc:
            cause = exc.__cause__ or exc.__context__
            if self.tls_context is not None and isinstance(cause, ssl.SSLError):
                raise CertificateRefused(f"TLS handshake with the MQTT broker at {self.address} failed: {getattr(cause, 'reason', None) or cause}") from None
            refused = isinstance(exc, aiomqtt.MqttCodeError) and _reason_value(exc.rc) in _REFUSED
            raise (AccessRefused if refused else TransportError)(f"cannot connect to MQTT broker at {self.address}: {exc}") from None
        self._client, self._stack, self._lost = client, stack, None
        try:
            await self._subscribe(client, self._subscriptions)
        except BaseException:
            await self._teardown()
            raise
        self.connections += 1
        self._pump = asyncio.create_task(
            self._pump_messages(client), name=f"mqtt-receive {self.identifier or self.username or self.address}"
        )
        logger.debug("connected to %s as %s (%d filters)", self.address, self.username, len(self._subscriptions))

    async def close(self) -> None:
        """Disconnect (gracefully if the connection is still up); idempotent.

        Messages already received stay readable with :meth:`receive`.
        """
        await self._teardown()
        self._lost = None
        self._wake()

    async def reconnect(self, *, attempts: int = 20, delay: float = 0.1, max_delay: float = 2.0) -> int:
        """Drop the current connection (if any) and connect again, re-subscribing everything.

        Call it after :class:`ConnectionLost`, e.g. when the broker restarted.
        Messages received before the loss stay in the queue.  Messages the broker
        held for this client are lost with a broker restart: the caller must
        re-publish what its peers may have missed (envelopes are deterministic, so
        a re-publish is an identical duplicate to :class:`~p2pem.deploy.admission.ReplayGuard`).

        Parameters
        ----------
        attempts : int, default 20
            Connection attempts before giving up.
        delay : float, default 0.1
            Seconds before the second attempt, doubling up to ``max_delay``.
        max_delay : float, default 2.0
            Longest pause between attempts.

        Returns
        -------
        int
            Number of attempts used.

        Raises
        ------
        TransportError
            If every attempt failed; the message names the broker and the last error.
        """
        await self._teardown()
        last: TransportError | None = None
        pause = delay
        for attempt in range(1, attempts + 1):
            try:
                await self.connect()
            except TransportError as exc:
                last = exc
                logger.info("reconnect attempt %d/%d to %s failed: %s", attempt, attempts, self.address, exc)
                if attempt < attempts:
                    await asyncio.sleep(pause)
                    pause = min(2 * pause, max_delay)
            else:
                return attempt
        raise TransportError(f"could not reconnect to {self.address} after {attempts} attempts: {last}")

    async def _teardown(self) -> None:
        pump, stack = self._pump, self._stack
        self._pump = self._stack = self._client = None
        if pump is not None and not pump.done():
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
        if stack is not None:
            try:
                await stack.aclose()
            except aiomqtt.MqttError as exc:
                # The connection is being thrown away; a failed goodbye changes nothing.
                logger.debug("disconnect from %s was not clean: %s", self.address, exc)

    # ------------------------------------------------------------ operations
    async def subscribe(self, topic_filters: Iterable[str]) -> None:
        """Add topic filters; subscribe now if connected, and on every reconnection.

        Raises
        ------
        TransportError
            If the broker denies a filter or does not acknowledge in time.
        """
        new = [f for f in topic_filters if f not in self._subscriptions]
        self._subscriptions += new
        if self._client is not None and self._lost is None:
            await self._subscribe(self._client, new)

    async def _subscribe(self, client: aiomqtt.Client, topic_filters: Sequence[str]) -> None:
        if not topic_filters:
            return
        action = f"subscribing to {len(topic_filters)} filter(s)"
        try:
            async with asyncio.timeout(self.timeout):
                granted = await client.subscribe([(f, self.subscribe_qos) for f in topic_filters], timeout=math.inf)
        except TimeoutError:
            raise self._timed_out(action, self.timeout) from None
        except aiomqtt.MqttError as exc:
            raise self._error(action, exc) from None
        if len(granted) != len(topic_filters):
            raise TransportError(
                f"broker at {self.address} answered {len(granted)} reason code(s) to a subscription of {len(topic_filters)} filter(s)"
            )
        for topic_filter, code in zip(topic_filters, granted, strict=True):
            value: int = getattr(code, "value", code)  # type: ignore[arg-type]  # a ReasonCode, or an int from older brokers
            # A broker may grant a lower QoS than asked; a downgrade is as fatal as a
            # refusal, since the caller chose the QoS its guarantees rest on.
            if value >= 0x80 or value < self.subscribe_qos:
                raise TransportError(
                    f"broker at {self.address} refused subscription {topic_filter!r} (code {value})"
                )

    async def publish(
        self,
        topic: str,
        payload: bytes,
        qos: int | None = None,
        *,
        timeout: float | None = None,
        retain: bool = False,
    ) -> None:
        """Publish ``payload`` on ``topic`` and wait for the broker's acknowledgement (QoS 1).

        With ``retain`` the broker keeps the message as the topic's retained message and
        hands it to every client that subscribes later (until another retained message,
        or an empty one, replaces it, or the broker restarts without persistence).

        Notes
        -----
        Mosquitto acknowledges a publish that its ACL denies and then drops it, so a
        successful return does not prove delivery.

        Raises
        ------
        ConnectionLost
            If the connection is down (reconnect, then publish again).
        LinkTimeout
            If the broker does not acknowledge within ``timeout`` (default :attr:`timeout`).
        TransportError
            For any other failure.
        """
        if any(c in topic for c in "+#") or not topic:
            raise ConfigError(f"cannot publish on {topic!r}: empty or wildcard topic")
        client = self._require_client()
        limit = self.timeout if timeout is None else timeout
        try:
            # our own deadline (aiomqtt's is told apart from other failures only by its text)
            async with asyncio.timeout(limit):
                await client.publish(topic, bytes(payload), qos=self.qos if qos is None else qos, retain=retain, timeout=math.inf)
        except TimeoutError:
            raise self._timed_out(f"publishing on {topic!r}", limit) from None
        except aiomqtt.MqttError as exc:
            raise self._error(f"publishing on {topic!r}", exc) from None

    async def receive(self, timeout: float | None = None) -> Incoming:
        """Wait for the next message.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait; :attr:`timeout` when omitted, ``math.inf`` for no limit.

        Returns
        -------
        Incoming
            ``(topic, payload)`` in the order the broker delivered them.

        Raises
        ------
        LinkTimeout
            If nothing arrived in time.
        ConnectionLost
            If the connection broke and every message received before is consumed.
        TransportError
            If the link is closed and its queue is empty.
        """
        return await self._next(self.timeout if timeout is None else float(timeout))

    def __aiter__(self) -> MqttLink:
        return self

    async def __anext__(self) -> Incoming:
        """Next message without time limit; stops when the link is closed, raises :class:`ConnectionLost`."""
        if not self._inbox and self._client is None and self._lost is None:
            raise StopAsyncIteration
        try:
            return await self.receive(timeout=math.inf)
        except ConnectionLost:
            raise
        except TransportError:
            raise StopAsyncIteration from None

    # ------------------------------------------------------------ internals
    def _accept_raw(self, topic: str, payload: bytes) -> None:
        """Append one received message to the inbox (called by :class:`~p2pem.deploy.transports.reading.PacketReader`)."""
        self._inbox.append(Incoming(topic, payload))
        self._wake()

    def _accept(self, message: aiomqtt.Message) -> None:
        """Append one received message to the inbox (called by aiomqtt, through :class:`_Forward`)."""
        payload = message.payload
        if not isinstance(payload, bytes):
            payload = b"" if payload is None else bytes(payload) if isinstance(payload, bytearray) else str(payload).encode()
        self._accept_raw(message.topic.value, payload)

    async def _pump_messages(self, client: aiomqtt.Client) -> None:
        """Watch the connection: aiomqtt's message iterator raises when it is lost.

        Messages reach the inbox through :class:`_Forward` without passing here; the loop
        body only runs should aiomqtt ever queue a message the ordinary way.
        """
        try:
            async for message in client.messages:
                self._accept(message)
        except aiomqtt.MqttError as exc:
            cause = exc.__cause__ or exc
            self._lost = (
                f"lost connection to MQTT broker at {self.address} "
                f"(closed by the broker or the network: {cause})"
            )
        except Exception as exc:  # noqa: BLE001 - reported through receive(), never swallowed
            self._lost = f"receiving from MQTT broker at {self.address} failed: {exc!r}"
        else:  # pragma: no cover - aiomqtt's iterator only ends by raising
            self._lost = f"message stream from MQTT broker at {self.address} ended"
        logger.info("%s", self._lost)
        self._wake()

    def _require_client(self) -> aiomqtt.Client:
        self._raise_if_down()
        assert self._client is not None
        return self._client

    def _raise_if_down(self) -> None:
        if self._lost is not None:
            raise ConnectionLost(self._lost)
        if self._client is None:
            raise TransportError(f"link to MQTT broker at {self.address} is not connected")

    def _error(self, action: str, exc: aiomqtt.MqttError) -> TransportError:
        # paho refuses to send without a connection (its return code says so) before our
        # watcher task has seen the loss
        no_connection = isinstance(exc, aiomqtt.MqttCodeError) and _reason_value(exc.rc) in _NO_CONNECTION
        if self._lost is not None or no_connection:
            return ConnectionLost(f"{action} failed, connection to MQTT broker at {self.address} lost: {exc}")
        return TransportError(f"{action} on MQTT broker at {self.address} failed: {exc}")

    def _timed_out(self, action: str, limit: float) -> TransportError:
        if self._lost is not None:
            return ConnectionLost(f"{action} failed, connection to MQTT broker at {self.address} lost: {self._lost}")
        return LinkTimeout(f"{action} on MQTT broker at {self.address} timed out after {limit:g} s")


def _reason_value(rc: object) -> int | None:
    """The number of a paho return code or MQTT reason code (``ReasonCode.value``, or the int itself)."""
    value = getattr(rc, "value", rc)
    return value if isinstance(value, int) else None


#: CONNACK codes of refused credentials: MQTT 3.1.1's 4 (bad user name or password) and 5 (not
#: authorised), and MQTT 5's reason codes 0x86 and 0x87 for the same (paho reports either).
_REFUSED = frozenset({4, 5, 0x86, 0x87})
#: paho's return codes for "not connected" and "connection lost" (``MQTT_ERR_NO_CONN``, ``MQTT_ERR_CONN_LOST``).
_NO_CONNECTION = frozenset({4, 7})
