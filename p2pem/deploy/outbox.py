"""The outbox of a deployed node: encode, publish without waiting, keep recent envelopes, repair.

:meth:`Outbox.send` authenticates each message (:meth:`~p2pem.deploy.codec.Codec.encode`)
and hands it to the link without waiting for the broker's acknowledgement: waiting for each
PUBACK would put a broker round trip on the critical path of every consensus round.  The
link publishes in call order; a failure is remembered and picked up by the runtime's next
step (:meth:`Outbox.check`), which reconnects (:meth:`Outbox.recover`) and re-publishes the
envelopes of the last few protocol steps, the failed one included (it was remembered before
it was published).  Re-published envelopes are byte-identical, so a receiver that already
had them drops them as duplicates.

The connection *epoch* counts reconnections: a node announces it in its hellos, and a
neighbour that sees it grow knows the node may have missed messages.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import Counter, deque
from collections.abc import Callable, Sequence

from p2pem.deploy.clock import Clock
from p2pem.deploy.codec import Codec
from p2pem.deploy.failures import NodeFailure, Reason
from p2pem.deploy.transports.base import ConnectionLost, Link, LinkTimeout, topic_for
from p2pem.errors import TransportError
from p2pem.messages import Message

log = logging.getLogger(__name__)

__all__ = ["RECENT_GROUPS", "Outbox"]

#: How many (iteration, round) groups of sent envelopes are kept for re-publishing.  A
#: neighbour is at most one round behind, so the last two suffice; one more for safety.
RECENT_GROUPS = 3
#: Pause between reconnection attempts, in seconds.
RECONNECT_PAUSE = 0.2
#: Control messages re-published with the protocol messages: a stop proposal must arrive
#: before the broadcasts that announce its stop round.
REMEMBERED = frozenset({"stop"})


class Outbox:
    """Publishing for one node (see the module docstring).

    Parameters
    ----------
    link : Link
    codec : Codec
    run_id : str
    node_id : int
    clock : Clock
    reconnect_s : float
        How long :meth:`recover` keeps trying to reconnect.
    counters : collections.Counter, optional
        Where to count (the runtime's counters); a new one by default.

    Attributes
    ----------
    epoch : int
        Connection epoch: 0, plus one per reconnection.
    counters : collections.Counter
        ``published``, ``wire_bytes``, ``control_sent``, ``republished``, ``connection_losses``,
        ``reconnects``.
    last_broadcast : float
        Clock time of the last message to every neighbour (heartbeats fill the silences).
    sent : dict
        Receiver to the furthest position (EM iteration, round) of a protocol message the link
        has taken for it (a neighbour that says it still waits for one is checked against it,
        :meth:`p2pem.deploy.watchdog.Watchdog.claims`).
    """

    def __init__(
        self, link: Link, codec: Codec, run_id: str, node_id: int, clock: Clock, reconnect_s: float, counters: Counter[str] | None = None
    ) -> None:
        self.link = link
        self.reconnect_s = float(reconnect_s)
        self.codec = codec
        self.run_id = run_id
        self.node_id = node_id
        self.clock = clock
        self.counters: Counter[str] = Counter() if counters is None else counters
        self.epoch = 0
        self.last_broadcast = float("-inf")
        self._recent: list[tuple[tuple[int, int], str, bytes]] = []
        self._recent_keys: deque[tuple[int, int]] = deque(maxlen=RECENT_GROUPS)
        self._inflight: dict[asyncio.Task[None], int] = {}
        self._error: BaseException | None = None
        self.sent: dict[int, tuple[int, int]] = {}

    @property
    def failed(self) -> bool:
        """True once a publish failed and :meth:`check` has not yet repaired it."""
        return self._error is not None

    async def send(self, msgs: Sequence[Message], n_neighbours: int) -> None:
        """Encode and publish ``msgs``; remember protocol messages (and the stop proposals that
        back them) for re-publishing.

        ``n_neighbours`` tells a broadcast (to every neighbour) apart, for the heartbeat.
        """
        items = []
        marks: list[tuple[tuple[int, ...], tuple[int, int]] | None] = []
        now = self.clock()
        for m in msgs:
            envelope = self.codec.encode(m)
            topic = topic_for(self.run_id, m)
            items.append((topic, envelope))
            if m.iteration >= 0:
                key = (m.iteration, m.round)
                self._remember(key, topic, envelope)
                marks.append((m.receivers, key))
            else:
                marks.append(None)
                self.counters["control_sent"] += 1
                if m.kind in REMEMBERED and self._recent_keys:
                    self._recent.append((self._recent_keys[-1], topic, envelope))
            if len(m.receivers) == n_neighbours and n_neighbours > 1 or n_neighbours == 1:
                self.last_broadcast = now
        self._publish(items, marks)

    def forget(self) -> None:
        """Drop the remembered envelopes (they belong to an abandoned attempt)."""
        self._recent.clear()
        self._recent_keys.clear()

    def _remember(self, key: tuple[int, int], topic: str, envelope: bytes) -> None:
        if not self._recent_keys or self._recent_keys[-1] != key:
            self._recent_keys.append(key)
            keep = set(self._recent_keys)
            self._recent = [r for r in self._recent if r[0] in keep]
        self._recent.append((key, topic, envelope))

    def _publish(self, items: list[tuple[str, bytes]], marks: Sequence[tuple[tuple[int, ...], tuple[int, int]] | None] = ()) -> None:
        """Hand envelopes to the link without waiting for the broker's acknowledgements.

        ``marks[k]``: the receivers and position of item k's protocol message, recorded in
        :attr:`sent` once the link has taken it (not when it was queued: a node whose link
        holds its messages back must not see them as sent, see :meth:`Watchdog.claims`).
        """
        if self._error is not None:
            return  # the link is broken; check() will recover and re-publish
        self.counters["published"] += len(items)
        self.counters["wire_bytes"] += sum(len(e) for _, e in items)
        loop = asyncio.get_running_loop()
        for k, (topic, envelope) in enumerate(items):
            task = loop.create_task(self.link.publish(topic, envelope), name=f"publish {topic}")
            self._inflight[task] = self.epoch
            mark = marks[k] if k < len(marks) else None
            task.add_done_callback(self._published if mark is None else functools.partial(self._published, mark=mark))

    def _published(self, task: asyncio.Task[None], mark: tuple[tuple[int, ...], tuple[int, int]] | None = None) -> None:
        epoch = self._inflight.pop(task, self.epoch)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and epoch == self.epoch and self._error is None:
            self._error = exc
        if exc is None and mark is not None:
            receivers, key = mark
            sent = self.sent
            for r in receivers:
                if sent.get(r, (-1, -1)) < key:
                    sent[r] = key

    async def check(self, where: Callable[[], str], hello: Callable[[], Message]) -> bool:
        """Repair a failed publish (reconnect and re-publish: True), or raise what is not a lost link."""
        exc, self._error = self._error, None
        if exc is None:
            return False
        if isinstance(exc, (ConnectionLost, LinkTimeout)):
            await self.recover(exc, where, hello)
            return True
        raise exc

    async def drain(self, timeout: float) -> None:
        """Wait (bounded) until every publish handed to the link was acknowledged."""
        pending = [task for task, epoch in self._inflight.items() if epoch == self.epoch]
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    async def republish(self) -> None:
        """Publish the recent envelopes again (a neighbour reconnected and may have missed them)."""
        if self._recent:
            self.counters["republished"] += len(self._recent)
            self._publish([(t, e) for _, t, e in self._recent])

    async def _publish_now(self, items: list[tuple[str, bytes]]) -> None:
        """Publish and wait for every acknowledgement (after a reconnection)."""
        self.counters["published"] += len(items)
        self.counters["wire_bytes"] += sum(len(e) for _, e in items)
        if len(items) == 1:
            await self.link.publish(*items[0])
            return
        results = await asyncio.gather(*(self.link.publish(t, e) for t, e in items), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r

    async def recover(self, cause: TransportError, where: Callable[[], str], hello: Callable[[], Message]) -> None:
        """Reconnect (re-subscribing), announce a new epoch and re-publish the recent envelopes.

        ``hello()`` builds the hello of the new epoch; ``where()`` says where the node is,
        for the error raised when the broker stays away for :attr:`reconnect_s` seconds.

        Raises
        ------
        NodeFailure
            :attr:`~p2pem.deploy.failures.Reason.BROKER`.
        """
        self.counters["connection_losses"] += 1
        log.warning("node %d: %s; reconnecting", self.node_id, cause)
        deadline = self.clock() + self.reconnect_s
        while True:
            try:
                await self.link.reconnect(attempts=1)
                self.epoch += 1
                msg = hello()
                items = [(topic_for(self.run_id, msg), self.codec.encode(msg))]
                items += [(t, e) for _, t, e in self._recent]
                self.counters["republished"] += len(self._recent)
                self.counters["control_sent"] += 1
                await self._publish_now(items)
            except TransportError as exc:
                if self.clock() >= deadline:
                    raise NodeFailure(
                        Reason.BROKER,
                        self.node_id,
                        f"lost the MQTT broker at {self.link.address} in {where()} and could not reconnect within {self.reconnect_s:g} s ({exc})",
                    ) from None
                await asyncio.sleep(RECONNECT_PAUSE)
                continue
            self._error = None
            for task, epoch in list(self._inflight.items()):
                if epoch < self.epoch:  # died with the old connection; re-published above
                    task.cancel()
            self.counters["reconnects"] += 1
            log.warning(
                "node %d: reconnected to %s (epoch %d), re-published %d recent messages", self.node_id, self.link.address, self.epoch, len(self._recent)
            )
            return

    async def publish_retained(self, msg: Message, timeout: float) -> bool:
        """Publish ``msg`` retained and wait (bounded) for it; False if the link cannot take it."""
        if not self.link.connected:
            return False
        try:
            await asyncio.wait_for(self.link.publish(topic_for(self.run_id, msg), self.codec.encode(msg), retain=True), timeout)
        except (TransportError, TimeoutError) as exc:
            log.info("node %d: could not tell the neighbours that the run stops: %s", self.node_id, exc)
            return False
        self.counters["control_sent"] += 1
        return True
