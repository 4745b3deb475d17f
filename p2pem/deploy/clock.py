"""The clock a node runtime reads, and an event loop whose time is virtual (for tests).

A node's timeouts (start-up, silence, stall, heartbeat, reconnection) are measured on a
:data:`Clock`: a function returning monotonic seconds.  By default it is the running event
loop's own clock (:func:`loop_clock`), which is :func:`time.monotonic` in every standard
loop, so the deadlines the runtime computes and the waits the loop schedules agree.

:func:`run_virtual` runs a coroutine on a :class:`VirtualTimeLoop`, whose clock stands still
while any task can run and jumps straight to the next scheduled timer when every task
waits.  A whole deployment over :class:`~p2pem.deploy.transports.memory.MemoryBroker` then
sees its timeouts expire in virtual seconds that cost no real time, and a descheduled test
process can never make a neighbour look silent: what tests of timeouts measure is the
runtime's logic, not the machine's load.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["Clock", "VirtualTimeLoop", "loop_clock", "run_virtual"]

#: Monotonic seconds (any origin).
Clock = Callable[[], float]

T = TypeVar("T")


def loop_clock() -> float:
    """The running event loop's time (``time.monotonic()`` unless the loop is virtual)."""
    return asyncio.get_running_loop().time()


class _JumpingSelector(selectors.BaseSelector):
    """Polls the real selector without blocking; when nothing is ready, advances the loop's
    virtual time by the timeout the loop asked to wait, instead of waiting it out."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        self._real = selectors.DefaultSelector()
        self._loop = loop

    def register(self, fileobj, events, data=None):
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj):
        return self._real.unregister(fileobj)

    def modify(self, fileobj, events, data=None):
        return self._real.modify(fileobj, events, data)

    def get_map(self):
        return self._real.get_map()

    def close(self) -> None:
        self._real.close()

    def select(self, timeout: float | None = None):
        events = self._real.select(0)
        if events:
            return events
        if timeout is None:
            # Nothing is scheduled and nothing is ready: only another thread can wake the
            # loop (through its self-pipe).  Wait for that a while in real time, then call it
            # what it is: every task waits for something that never comes.
            events = self._real.select(self._loop.idle_limit)
            if not events:
                raise RuntimeError(f"virtual time: every task waits and nothing is scheduled (idle for {self._loop.idle_limit:g} s)")
            return events
        self._loop.advance(timeout)
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio event loop whose :meth:`time` advances only when every task waits.

    Parameters
    ----------
    idle_limit : float, default 30
        Real seconds to wait for another thread's wake-up when no timer is scheduled, before
        raising ``RuntimeError`` (a deadlock would otherwise hang).

    Attributes
    ----------
    now : float
        The virtual time, starting at 0.
    """

    def __init__(self, *, idle_limit: float = 30.0) -> None:
        self.now = 0.0
        self.idle_limit = float(idle_limit)
        super().__init__(selector=_JumpingSelector(self))

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the virtual time forward (the loop does this itself when every task waits)."""
        if seconds > 0:
            self.now += seconds


def run_virtual(main: Coroutine[Any, Any, T], *, idle_limit: float = 30.0) -> T:
    """``asyncio.run(main)`` on a fresh :class:`VirtualTimeLoop`."""
    with asyncio.Runner(loop_factory=lambda: VirtualTimeLoop(idle_limit=idle_limit)) as runner:
        return runner.run(main)
