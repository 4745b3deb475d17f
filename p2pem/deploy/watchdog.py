"""When a deployed node gives up waiting, and whom it names: on clock times passed in.

The watchdog reads no clock itself: every method takes ``now`` (seconds of the runtime's
:data:`~p2pem.deploy.clock.Clock`), so its rules are tested by handing it times.  Every node's
heartbeat (its hello, sent when it has published nothing for ``heartbeat`` seconds) carries its
:class:`Status`: where it is and whom it waits for.  With that, for a neighbour j this node
waits for:

* *silent*: nothing at all (not even a heartbeat) came from j for ``timeout`` seconds: it
  died, or its link did (:attr:`~p2pem.deploy.failures.Reason.SILENT`);
* *slow*: the awaited message itself is overdue by ``timeout`` while j's heartbeats say it
  waits for nobody: j holds its messages back, or the path from j loses them
  (:attr:`~p2pem.deploy.failures.Reason.SLOW`); a member that delays every message just past
  the timeout stops the run at the first;
* j waits for someone else: j is blocked, and the node that blocks it is found by j or by
  the node j waits for; this node waits on, up to the stall limit;
* *stalled*: nothing progressed for ``3 * timeout`` although the awaited neighbours are alive
  (:attr:`~p2pem.deploy.failures.Reason.STALLED`, naming them).  Until the first aggregation
  has finished the limit is longer by the start-up timeout: the network may still wait for
  a late node several hops away.

And for a neighbour j whose heartbeats say it waits for *this* node at a position (EM
iteration, round) this node has already sent to it: after ``timeout`` this node re-publishes
its recent messages (the broker may have lost them), after ``2 * timeout`` it stops the run
(:meth:`Watchdog.claims`): j claims to miss what it was sent twice.  "Sent" is what this node's
link has taken for j (per neighbour, :attr:`~p2pem.deploy.outbox.Outbox.sent`), not what it
queued: a node whose link withholds its messages to j sees them as unsent and cannot accuse j.

Slowness is evidence, not proof (:mod:`p2pem.deploy.failures`): the watchdog cannot tell a
neighbour that holds its messages back from a path that delays them, nor a neighbour that
claims to miss a message from one that did miss it.  Every failure here names the neighbour
on the other side of the edge as a suspect and convicts nobody.  Neither rule names a
neighbour whose topics carried a message that failed to authenticate (:attr:`Watchdog.garbled`):
its messages and this node's may be garbled on the way (another key, other step parameters),
so only the stall limit names it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from p2pem.deploy.config import Timeouts
from p2pem.deploy.failures import NodeFailure, Reason, nodes_text

__all__ = ["Status", "Watchdog"]

#: Phases a status reports.
STARTING, RUNNING, FINAL = 0, 1, 2


@dataclass(frozen=True)
class Status:
    """Where a node says it is (its heartbeat): phase, EM iteration, protocol round, and whom
    it waits for; ``at`` is when this node received it."""

    phase: int
    iteration: int
    round: int
    awaited: frozenset[int]
    at: float

    @property
    def position(self) -> tuple[int, int]:
        return self.iteration, self.round


class Watchdog:
    """Liveness bookkeeping of one node.

    Parameters
    ----------
    node_id : int
    timeouts : Timeouts
    """

    def __init__(self, node_id: int, timeouts: Timeouts) -> None:
        self.node_id = node_id
        self.timeouts = timeouts
        self.last_heard: dict[int, float] = {}
        self.last_progress = 0.0
        self.status: dict[int, Status] = {}
        #: since when each awaited neighbour's message is awaited (reset by its messages)
        self.since: dict[int, float] = {}
        #: neighbours whose heartbeats claim to wait for this node: (position, since, re-published)
        self._claims: dict[int, tuple[tuple[int, int], float, bool]] = {}
        #: when a message on each neighbour's topics last failed to authenticate: its messages,
        #: or this node's to it, may be garbled (other keys, other step parameters after a
        #: dropout, a tampering path), so its waiting or silence proves nothing about it
        self.garbled: dict[int, float] = {}

    def heard(self, j: int, now: float) -> None:
        """Something authentic arrived from neighbour ``j``."""
        self.last_heard[j] = now

    def progressed(self, now: float) -> None:
        """The node moved on (a message folded in, a result compared)."""
        self.last_progress = now

    def moved_on_by(self, j: int, now: float) -> None:
        """A message of neighbour ``j`` was taken in: heard from it, progress, and its wait starts afresh."""
        self.last_heard[j] = self.last_progress = now
        if j in self.since:
            self.since[j] = now

    def reported(self, j: int, status: Status) -> None:
        """Neighbour ``j``'s heartbeat said where it is."""
        self.status[j] = status
        self.last_heard[j] = status.at

    def restart(self, neighbours: Iterable[int], now: float) -> None:
        """Start every clock afresh (start of the protocol, a reconnection, a dropout)."""
        self.last_progress = max(self.last_progress, now)
        for j in neighbours:
            self.last_heard[j] = max(self.last_heard.get(j, now), now)
        self.since = {j: max(t, now) for j, t in self.since.items()}
        self._claims.clear()

    def silent(self, awaited: Sequence[int], now: float) -> list[int]:
        """The awaited neighbours that sent nothing for ``timeout`` seconds."""
        return [j for j in awaited if now - self.last_heard.get(j, now) > self.timeouts.timeout]

    def check(self, awaited: Sequence[int], now: float, where: str, first_done: bool) -> None:
        """Raise when an awaited neighbour is silent or slow, or the run stalled.

        Parameters
        ----------
        awaited : sequence of int
            Neighbours whose message the node waits for.
        where : str
            Where the node is (EM iteration, protocol round), for the message.
        first_done : bool
            Whether an aggregation has finished (see the module docstring).

        Raises
        ------
        NodeFailure
            :attr:`~p2pem.deploy.failures.Reason.SILENT` naming the silent neighbours,
            :attr:`~p2pem.deploy.failures.Reason.SLOW` naming one that waits for nobody, or
            :attr:`~p2pem.deploy.failures.Reason.STALLED` naming the awaited ones.
        """
        for j in list(self.since):
            if j not in awaited:
                del self.since[j]
        for j in awaited:
            self.since.setdefault(j, now)
        silent = self.silent(awaited, now)
        if silent:
            quiet = max(now - self.last_heard[j] for j in silent)
            raise NodeFailure(
                Reason.SILENT,
                self.node_id,
                f"neighbour {nodes_text(silent)} fell silent in {where}: nothing received for {quiet:.1f} s (timeout {self.timeouts.timeout:g} s)",
                silent,
            )
        for j in awaited:
            late = now - self.since[j]
            status = self.status.get(j)
            if j in self.garbled:
                continue  # named when the run stalls, not as slow
            if late > self.timeouts.timeout and status is not None and status.at >= self.since[j] and (status.phase == FINAL or (status.phase == RUNNING and not status.awaited)):
                says = "it finished EM" if status.phase == FINAL else "it waits for nobody"
                raise NodeFailure(
                    Reason.SLOW,
                    self.node_id,
                    f"the message of neighbour node {j} awaited in {where} is {late:.1f} s overdue (timeout {self.timeouts.timeout:g} s), "
                    f"although its heartbeats say {says}: the edge from node {j} to node {self.node_id} is slow "
                    f"(node {j} holds its messages back or the path delays them; unattributable)",
                    (j,),
                )
        limit = self.timeouts.stall if first_done else self.timeouts.stall + self.timeouts.startup_timeout
        if now - self.last_progress > limit:
            raise NodeFailure(
                Reason.STALLED,
                self.node_id,
                f"no progress for {now - self.last_progress:.1f} s in {where}, "
                f"waiting for {nodes_text(awaited) if awaited else 'nothing?'} (alive but stuck)",
                awaited,
            )

    def claims(self, sent: dict[int, tuple[int, int]], now: float, where: str) -> bool:
        """Check the neighbours that say they wait for this node; True when it should re-publish.

        ``sent[j]`` is the furthest position (EM iteration, round) of a protocol message this
        node has published to j.  A neighbour that keeps waiting for this node at a position
        it was sent is given the recent messages again after ``timeout`` and named after
        ``2 * timeout``.

        Raises
        ------
        NodeFailure
            :attr:`~p2pem.deploy.failures.Reason.SLOW` naming that neighbour.
        """
        republish = False
        timeout = self.timeouts.timeout
        for j, status in self.status.items():
            position = status.position
            if status.phase != RUNNING or self.node_id not in status.awaited or sent.get(j, (-1, -1)) < position or now - status.at > timeout or j in self.garbled:
                self._claims.pop(j, None)
                continue
            previous = self._claims.get(j)
            if previous is None or previous[0] != position:
                self._claims[j] = (position, status.at, False)
                continue
            _, since, again = previous
            if now - since > 2 * timeout:
                raise NodeFailure(
                    Reason.SLOW,
                    self.node_id,
                    f"neighbour node {j} has claimed for {now - since:.1f} s to wait for this node's message of EM iteration {position[0]}, "
                    f"protocol round {position[1]}, which this node sent and re-sent ({where}): the edge from node {self.node_id} "
                    f"to node {j} is slow (the path loses the messages or node {j} claims to miss them; unattributable)",
                    (j,),
                )
            if now - since > timeout and not again:
                self._claims[j] = (position, since, True)
                republish = True
        return republish
