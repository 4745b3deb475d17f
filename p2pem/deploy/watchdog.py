"""When a deployed node gives up waiting: silent neighbours and a stalled run, on clock times passed in.

The watchdog reads no clock itself: every method takes ``now`` (seconds of the runtime's
:data:`~p2pem.deploy.clock.Clock`), so its rules are tested by handing it times.

* A neighbour the node waits for is *silent* when nothing at all (not even a heartbeat) came
  from it for ``timeout`` seconds: it died, or its link did.
* The run is *stalled* when the awaited neighbours are alive but nothing progressed for
  ``3 * timeout`` (they are themselves stuck; normally the node that saw the real failure
  stops the run earlier).  Until the first aggregation has finished the limit is longer by
  the start-up timeout: the network may still wait for a late node several hops away, whose
  own neighbours enforce the start-up timeout.  An aggregation of every node's input cannot
  finish before every node took part, so afterwards everyone is known to be running.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from p2pem.deploy.config import Timeouts
from p2pem.deploy.failures import NodeFailure, Reason, nodes_text

__all__ = ["Watchdog"]


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

    def heard(self, j: int, now: float) -> None:
        """Something authentic arrived from neighbour ``j``."""
        self.last_heard[j] = now

    def progressed(self, now: float) -> None:
        """The node moved on (a message folded in, a model compared)."""
        self.last_progress = now

    def moved_on_by(self, j: int, now: float) -> None:
        """A message of neighbour ``j`` was taken in: heard from it, and progress."""
        self.last_heard[j] = self.last_progress = now

    def restart(self, neighbours: Iterable[int], now: float) -> None:
        """Start every clock afresh (start of the protocol, a reconnection, a dropout)."""
        self.last_progress = max(self.last_progress, now)
        for j in neighbours:
            self.last_heard[j] = max(self.last_heard.get(j, now), now)

    def silent(self, awaited: Sequence[int], now: float) -> list[int]:
        """The awaited neighbours that sent nothing for ``timeout`` seconds."""
        return [j for j in awaited if now - self.last_heard.get(j, now) > self.timeouts.timeout]

    def check(self, awaited: Sequence[int], now: float, where: str, first_done: bool) -> None:
        """Raise when an awaited neighbour is silent, or the run stalled.

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
            :attr:`~p2pem.deploy.failures.Reason.SILENT` naming the silent neighbours, or
            :attr:`~p2pem.deploy.failures.Reason.STALLED` naming the awaited ones.
        """
        silent = self.silent(awaited, now)
        if silent:
            quiet = max(now - self.last_heard[j] for j in silent)
            raise NodeFailure(
                Reason.SILENT,
                self.node_id,
                f"neighbour {nodes_text(silent)} fell silent in {where}: nothing received for {quiet:.1f} s (timeout {self.timeouts.timeout:g} s)",
                silent,
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
