"""Per-sender budgets: how much one neighbour may make a node do, and how much it may make it log.

A member holds valid keys, so its messages authenticate; what bounds the work it can cause is
counted here, per sender, on clock times passed in (no clock is read, so every rule is a unit
test away):

* :class:`TokenBucket`: at most ``capacity`` events at once and ``rate`` per second after that.
  The runtime gives every neighbour one for hellos (an honest node sends one per heartbeat, and
  at most one per tick when it answers a neighbour or reconnects); a neighbour that exceeds it
  floods, which is a violation naming it.
* :class:`LogLimiter`: the first few log lines per (sender, reason), then one line per doubling
  of the count, so a stream of rejected messages costs a counter, not a log file.

Everything else a member may send is bounded by the protocol's structure instead: one final,
one bye, one vote per victim, one relay of each signed statement, a window of EM iterations
(see :mod:`p2pem.deploy.admission`).
"""

from __future__ import annotations

from collections import Counter

__all__ = ["LogLimiter", "TokenBucket"]


class TokenBucket:
    """At most ``capacity`` events in a burst and ``rate`` per second on average.

    Examples
    --------
    >>> bucket = TokenBucket(capacity=2, rate=1.0)
    >>> [bucket.take(0.0) for _ in range(3)], bucket.take(1.0)
    ([True, True, False], True)
    """

    def __init__(self, capacity: float, rate: float) -> None:
        self.capacity = float(capacity)
        self.rate = float(rate)
        self.tokens = float(capacity)
        self.last: float | None = None

    def take(self, now: float) -> bool:
        """Spend one token at time ``now``; False when the bucket is empty (the event is one too many)."""
        if self.last is not None and now > self.last:
            self.tokens = min(self.capacity, self.tokens + (now - self.last) * self.rate)
        self.last = now if self.last is None else max(self.last, now)
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


class LogLimiter:
    """Decide which of many similar events are worth a log line.

    :meth:`allow` is True for the first ``first`` events of a key and then for the events whose
    count is a power of two, so n rejections cost about ``first + log2(n)`` lines; the caller
    says how many were counted in the line it writes.
    """

    def __init__(self, first: int = 5) -> None:
        self.first = int(first)
        self.counts: Counter[tuple] = Counter()

    def allow(self, key: tuple) -> bool:
        self.counts[key] += 1
        n = self.counts[key]
        return n <= self.first or n & (n - 1) == 0

    def count(self, key: tuple) -> int:
        return self.counts[key]
