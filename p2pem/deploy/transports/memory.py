"""An in-memory broker and link with fault injection, for running a whole deployment in one process.

:class:`MemoryLink` implements :class:`~p2pem.deploy.transports.base.Link` like
:class:`~p2pem.deploy.transports.mqtt.MqttLink`, against a :class:`MemoryBroker` instead of
Mosquitto: exact topic filters (and ``#``), retained messages, a connection that can be
cut (:meth:`MemoryLink.cut`) and re-established.  Every publish passes through the broker's
``intercept`` hook, which returns what is actually delivered, so a test can drop, duplicate,
delay, reorder or rewrite messages; :class:`Faults` composes the usual ones.  The node
runtime cannot tell the difference, so its hello, replay guard, validation, aborts and
reconnections run in milliseconds, without sockets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from p2pem.errors import TransportError
from p2pem.deploy.transports.base import ConnectionLost, Inbox, Incoming

__all__ = ["Delivery", "Faults", "MemoryBroker", "MemoryLink"]

#: What the intercept hook returns per publish: ``(topic, payload, delay in seconds)``.
Delivery = tuple[str, bytes, float]
Intercept = Callable[[str, bytes], Sequence[Delivery]]


def _matches(topic_filter: str, topic: str) -> bool:
    if topic_filter == "#":
        return True
    if topic_filter.endswith("/#"):
        return topic.startswith(topic_filter[:-1]) or topic == topic_filter[:-2]
    return topic_filter == topic


class MemoryBroker:
    """Routes publishes to the subscribed :class:`MemoryLink` objects of one event loop.

    Parameters
    ----------
    intercept : callable(topic, payload) -> list of (topic, payload, delay), optional
        Decides what a publish turns into; default: delivered once, at once.

    Attributes
    ----------
    published : list of (topic, payload)
        Everything published, before interception (what a broker-level observer sees).
    """

    def __init__(self, intercept: Intercept | None = None) -> None:
        self.intercept = intercept
        self.links: list[MemoryLink] = []
        self.retained: dict[str, bytes] = {}
        self.published: list[tuple[str, bytes]] = []
        # topic -> the links subscribed to it, in link order (links and their filters are fixed)
        self._routes: dict[str, tuple[MemoryLink, ...]] = {}

    def link(self, subscriptions: Iterable[str] = (), *, name: str = "memory") -> MemoryLink:
        """A new link to this broker (not yet connected)."""
        link = MemoryLink(self, subscriptions, name=name)
        self.links.append(link)
        self._routes.clear()
        return link

    def _publish(self, topic: str, payload: bytes, retain: bool) -> None:
        self.published.append((topic, payload))
        if retain:
            self.retained[topic] = payload
        deliveries = [(topic, payload, 0.0)] if self.intercept is None else self.intercept(topic, payload)
        loop = asyncio.get_running_loop()
        for t, p, delay in deliveries:
            if delay > 0:
                loop.call_later(delay, self._route, t, p)
            else:
                self._route(t, p)

    def _route(self, topic: str, payload: bytes) -> None:
        links = self._routes.get(topic)
        if links is None:
            links = self._routes[topic] = tuple(
                link for link in self.links if any(_matches(f, topic) for f in link.subscriptions)
            )
        for link in links:
            if link.connected:
                link._deliver(Incoming(topic, payload))


class MemoryLink(Inbox):
    """One client of a :class:`MemoryBroker`; same calls and errors as :class:`~p2pem.deploy.transports.mqtt.MqttLink`."""

    def __init__(self, broker: MemoryBroker, subscriptions: Iterable[str] = (), *, name: str = "memory") -> None:
        self.broker = broker
        self.subscriptions = tuple(dict.fromkeys(subscriptions))
        self.name = name
        Inbox.__init__(self)
        self._up = False
        self._lost = False
        self.dead = False
        self.connections = 0

    @property
    def address(self) -> str:
        return f"memory:{self.name}"

    @property
    def connected(self) -> bool:
        return self._up and not self._lost

    async def connect(self) -> None:
        self._up, self._lost = True, False
        self.connections += 1
        for topic, payload in list(self.broker.retained.items()):
            if any(_matches(f, topic) for f in self.subscriptions):
                self._deliver(Incoming(topic, payload))

    async def close(self) -> None:
        self._up = False
        self._wake()

    async def reconnect(self, *, attempts: int = 20, delay: float = 0.1, max_delay: float = 2.0) -> int:
        await self.connect()
        return 1

    def kill(self) -> None:
        """Die like a killed process: from now on nothing is published or delivered, and no error is seen."""
        self.dead = True
        self._inbox.clear()

    def cut(self) -> None:
        """Lose the connection, as when the broker goes away (the next receive raises ConnectionLost)."""
        self._lost = True
        self._wake()

    async def publish(self, topic: str, payload: bytes, qos: int | None = None, *, timeout: float | None = None, retain: bool = False) -> None:
        if not self._up:
            raise TransportError(f"{self.address}: not connected")
        if self._lost:
            raise ConnectionLost(f"{self.address}: connection lost")
        if not self.dead:
            self.broker._publish(topic, bytes(payload), retain)

    async def receive(self, timeout: float | None = None) -> Incoming:
        return await self._next(10.0 if timeout is None else float(timeout))

    def _raise_if_down(self) -> None:
        if self._lost:
            raise ConnectionLost(f"{self.address}: connection lost")
        if not self._up:
            raise TransportError(f"{self.address}: link closed")

    def _deliver(self, item: Incoming) -> None:
        if self.dead:
            return
        self._inbox.append(item)
        self._wake()


@dataclass
class Faults:
    """Random network faults for :class:`MemoryBroker` (``MemoryBroker(intercept=Faults(...))``).

    Parameters
    ----------
    rng : numpy.random.Generator
    drop, duplicate, delay : float
        Probability that a publish is lost, delivered twice, or delayed by up to
        ``max_delay`` seconds (a delay reorders it behind later publishes).
    max_delay : float
    rewrite : callable(topic, payload) -> list of (topic, payload) or None, optional
        Applied first: an insider replacing what it publishes (None leaves the publish alone).
    """

    rng: np.random.Generator
    drop: float = 0.0
    duplicate: float = 0.0
    delay: float = 0.0
    max_delay: float = 0.01
    rewrite: Callable[[str, bytes], list[tuple[str, bytes]] | None] | None = None

    def __call__(self, topic: str, payload: bytes) -> list[Delivery]:
        items = [(topic, payload)]
        if self.rewrite is not None:
            replaced = self.rewrite(topic, payload)
            if replaced is not None:
                items = replaced
        out: list[Delivery] = []
        for t, p in items:
            if self.rng.random() < self.drop:
                continue
            copies = 2 if self.rng.random() < self.duplicate else 1
            for _ in range(copies):
                lag = float(self.rng.uniform(0, self.max_delay)) if self.rng.random() < self.delay else 0.0
                out.append((t, p, lag))
        return out
