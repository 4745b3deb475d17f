"""What every link between a node and its peers provides, and the p2pem topic layout.

A node runtime (:mod:`p2pem.deploy.runtime`) talks to its peers through a :class:`Link`:
connect, publish opaque bytes on a topic, receive ``(topic, bytes)``, notice a lost
connection and reconnect.  :class:`~p2pem.deploy.transports.mqtt.MqttLink` implements it over an
MQTT broker, :class:`~p2pem.deploy.transports.memory.MemoryLink` in memory with fault injection
(for tests that run every node of a deployment in one process).

Topic layout, for run ``<run>``::

    p2pem/<run>/from/<i>/all        broadcasts of node i (every neighbour listens)
    p2pem/<run>/from/<i>/to/<j>     point-to-point messages from i to j
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import deque
from collections.abc import Iterable
from typing import NamedTuple, Protocol

from p2pem.deploy.codec import validate_run_id
from p2pem.errors import ConfigError, TransportError
from p2pem.messages import Message

__all__ = [
    "TOPIC_ROOT",
    "AccessRefused",
    "CertificateRefused",
    "ConnectionLost",
    "Inbox",
    "Incoming",
    "Link",
    "LinkTimeout",
    "parse_topic",
    "subscriptions_for",
    "topic_for",
]


class LinkTimeout(TransportError):
    """Nothing arrived (or a broker operation did not complete) within the timeout."""


class ConnectionLost(TransportError):
    """The connection to the broker broke; call :meth:`Link.reconnect`."""


class AccessRefused(TransportError):
    """The broker refused the credentials (bad user name or password, not authorised): retrying cannot help."""


class CertificateRefused(AccessRefused):
    """The TLS handshake with the broker failed (its certificate does not verify against the
    configured CA, names another host, or it does not speak TLS): retrying cannot help."""


class Incoming(NamedTuple):
    """One received message: the topic it was published on and its raw payload."""

    topic: str
    payload: bytes


class Inbox:
    """The receiving half every link shares: an unbounded queue and one waiter.

    A link appends to ``_inbox`` and calls :meth:`_wake`; :meth:`_next` waits for the next
    item, calling the link's ``_raise_if_down()`` whenever the queue is empty.
    """

    @property
    def address(self) -> str:
        """Where the link goes (each link names it)."""
        raise NotImplementedError

    def __init__(self) -> None:
        self._inbox: deque[Incoming] = deque()
        self._waiter: asyncio.Future[None] | None = None

    @property
    def pending(self) -> int:
        """Number of received messages waiting in the queue."""
        return len(self._inbox)

    def _raise_if_down(self) -> None:
        """Raise ConnectionLost or TransportError when nothing more can arrive."""

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _next(self, wait: float) -> Incoming:
        if self._inbox:  # the common case under load: no future, no timer
            return self._inbox.popleft()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(None if math.isinf(wait) else wait):
                while not self._inbox:
                    self._raise_if_down()
                    self._waiter = loop.create_future()
                    try:
                        await self._waiter
                    finally:
                        self._waiter = None
        except TimeoutError:
            raise LinkTimeout(f"no message from {self.address} within {wait:g} s") from None
        return self._inbox.popleft()


class Link(Protocol):
    """The small interface a node runtime needs from its transport."""

    @property
    def address(self) -> str: ...

    @property
    def connected(self) -> bool: ...

    @property
    def pending(self) -> int: ...

    async def connect(self) -> None: ...

    async def close(self) -> None: ...

    async def reconnect(self, *, attempts: int = 20) -> int: ...

    async def publish(self, topic: str, payload: bytes, *, retain: bool = False) -> None: ...

    async def receive(self, timeout: float | None = None) -> Incoming: ...


#: First level of every p2pem topic.
TOPIC_ROOT = "p2pem"
_TOPIC = re.compile(r"p2pem/([^/]+)/from/(-?\d+)/(?:all|to/(-?\d+))")


def topic_for(run_id: str, msg: Message) -> str:
    """Topic on which ``msg.sender`` publishes ``msg``.

    A message with exactly one receiver (always the case for encrypted messages) goes
    to ``p2pem/<run>/from/<sender>/to/<receiver>``; any other to
    ``p2pem/<run>/from/<sender>/all``, where every neighbour of the sender listens
    (receivers not listed in the message ignore it).

    Raises
    ------
    ConfigError
        If the run id is invalid or the message has no receiver.
    """
    validate_run_id(run_id)
    if not msg.receivers:
        raise ConfigError(f"message from node {msg.sender} has no receiver")
    base = f"{TOPIC_ROOT}/{run_id}/from/{int(msg.sender)}"
    if len(msg.receivers) == 1:
        return f"{base}/to/{int(msg.receivers[0])}"
    return f"{base}/all"


def subscriptions_for(run_id: str, node_id: int, neighbours: Iterable[int]) -> list[str]:
    """Topic filters node ``node_id`` subscribes to: each neighbour's broadcasts and its messages to this node.

    Returns
    -------
    list of str
        ``2 * len(neighbours)`` filters, ordered by neighbour id.  No wildcards, so a
        node never receives point-to-point traffic of other pairs.
    """
    validate_run_id(run_id)
    filters = []
    for j in sorted({int(j) for j in neighbours}):
        if j == node_id:
            raise ConfigError(f"node {node_id} lists itself as a neighbour")
        base = f"{TOPIC_ROOT}/{run_id}/from/{j}"
        filters += [f"{base}/all", f"{base}/to/{int(node_id)}"]
    return filters


def parse_topic(run_id: str, topic: str) -> tuple[int, int | None]:
    """Inverse of :func:`topic_for`: ``(sender, receiver)``, receiver None for ``.../all``.

    Lets the runtime check that the topic (which the broker ACL ties to a login)
    names the same sender as the authenticated envelope header.

    Raises
    ------
    TransportError
        If ``topic`` is not a p2pem topic of ``run_id``.
    """
    match = _TOPIC.fullmatch(topic)
    if match is None or match.group(1) != run_id:
        raise TransportError(f"topic {topic!r} is not a p2pem topic of run {run_id!r}")
    receiver = match.group(3)
    return int(match.group(2)), None if receiver is None else int(receiver)


