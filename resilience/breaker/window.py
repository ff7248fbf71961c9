"""Sliding windows of call outcomes: rings of buckets with running totals, so a snapshot is O(1).

Two kinds, as in resilience4j: a count-based window over the last ``size`` calls (one bucket per
call) and a time-based window over the last ``size`` seconds (one bucket per second). Neither is
thread-safe on its own; the breaker guards it with its lock. ``record_clean`` adds many successes
that were neither failed nor slow at once (the breaker counts those without its lock and folds
them in later).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from fleetwatch.resilience.errors import ResilienceConfigError

__all__ = ["CountWindow", "SlidingWindow", "TimeWindow", "WindowSnapshot"]


@dataclass(frozen=True, slots=True)
class WindowSnapshot:
    """Totals over the window. Rates are fractions in 0..1 (0 when there were no calls)."""

    calls: int
    failed: int
    slow: int

    @property
    def failure_rate(self) -> float:
        return self.failed / self.calls if self.calls else 0.0

    @property
    def slow_call_rate(self) -> float:
        return self.slow / self.calls if self.calls else 0.0


class SlidingWindow(Protocol):
    """What the breaker needs from a window: record one outcome, read the totals, forget all."""

    def record(self, now: float, failed: bool, slow: bool) -> tuple[int, int, int]:
        """Add one call; return the new totals (calls, failed, slow)."""
        ...

    def record_clean(self, now: float, n: int) -> None:
        """Add ``n`` calls that neither failed nor were slow."""
        ...

    def totals(self, now: float) -> tuple[int, int, int]:
        """The totals (calls, failed, slow) at ``now``."""
        ...

    def snapshot(self, now: float) -> WindowSnapshot: ...

    def reset(self) -> None: ...


class CountWindow:
    """The last ``size`` calls. Each slot holds one call; the running totals drop the evicted call."""

    __slots__ = ("_failed", "_head", "_ring", "_size", "_slow", "_total")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ResilienceConfigError(f"count window: size must be >= 1, got {size}")
        self._size = size
        self._ring: list[int] = [-1] * size  # -1 empty, else bit 0 failed, bit 1 slow
        self._head = 0
        self._total = 0
        self._failed = 0
        self._slow = 0

    def record(self, now: float, failed: bool, slow: bool) -> tuple[int, int, int]:
        old = self._ring[self._head]
        if old >= 0:
            self._total -= 1
            self._failed -= old & 1
            self._slow -= (old >> 1) & 1
        self._ring[self._head] = int(failed) | (int(slow) << 1)
        self._head = (self._head + 1) % self._size
        self._total += 1
        self._failed += int(failed)
        self._slow += int(slow)
        return (self._total, self._failed, self._slow)

    def record_clean(self, now: float, n: int) -> None:
        size = self._size
        if n >= size:
            self._ring = [0] * size
            self._total, self._failed, self._slow = size, 0, 0
            return
        head = self._head
        end = head + n
        if end <= size:
            self._clear(head, end)
        else:
            self._clear(head, size)
            self._clear(0, end - size)
        self._head = end % size
        self._total += n

    def _clear(self, lo: int, hi: int) -> None:
        """Evict slots ``lo:hi`` and fill them with clean calls (the caller adds them to the total)."""
        evicted = self._ring[lo:hi]
        both = evicted.count(3)
        self._total -= (hi - lo) - evicted.count(-1)
        self._failed -= evicted.count(1) + both
        self._slow -= evicted.count(2) + both
        self._ring[lo:hi] = [0] * (hi - lo)

    def totals(self, now: float) -> tuple[int, int, int]:
        return (self._total, self._failed, self._slow)

    def snapshot(self, now: float) -> WindowSnapshot:
        return WindowSnapshot(self._total, self._failed, self._slow)

    def reset(self) -> None:
        self._ring = [-1] * self._size
        self._head = 0
        self._total = self._failed = self._slow = 0


class TimeWindow:
    """The last ``size`` seconds, one bucket per whole second of the clock.

    Moving the window forward clears at most ``size`` buckets, so both ``record`` and ``snapshot``
    cost O(1) amortised (O(size) after a long idle gap, once).
    """

    __slots__ = ("_calls", "_failed", "_last", "_size", "_slow", "_t_calls", "_t_failed", "_t_slow")

    def __init__(self, size_s: int) -> None:
        if size_s < 1:
            raise ResilienceConfigError(f"time window: size must be >= 1 second, got {size_s}")
        self._size = size_s
        self._calls = [0] * size_s
        self._failed = [0] * size_s
        self._slow = [0] * size_s
        self._last: int | None = None
        self._t_calls = self._t_failed = self._t_slow = 0

    def _advance(self, now: float) -> int:
        """Move the window to the second holding ``now``; return that second (never backwards)."""
        second = math.floor(now)
        last = self._last
        if last is None:
            self._last = second
            return second
        if second <= last:
            return last
        if second - last >= self._size:
            self.reset()
        else:
            for s in range(last + 1, second + 1):
                i = s % self._size
                self._t_calls -= self._calls[i]
                self._t_failed -= self._failed[i]
                self._t_slow -= self._slow[i]
                self._calls[i] = self._failed[i] = self._slow[i] = 0
        self._last = second
        return second

    def record(self, now: float, failed: bool, slow: bool) -> tuple[int, int, int]:
        i = self._advance(now) % self._size
        self._calls[i] += 1
        self._failed[i] += int(failed)
        self._slow[i] += int(slow)
        self._t_calls += 1
        self._t_failed += int(failed)
        self._t_slow += int(slow)
        return (self._t_calls, self._t_failed, self._t_slow)

    def record_clean(self, now: float, n: int) -> None:
        self._calls[self._advance(now) % self._size] += n
        self._t_calls += n

    def totals(self, now: float) -> tuple[int, int, int]:
        self._advance(now)
        return (self._t_calls, self._t_failed, self._t_slow)

    def snapshot(self, now: float) -> WindowSnapshot:
        self._advance(now)
        return WindowSnapshot(self._t_calls, self._t_failed, self._t_slow)

    def reset(self) -> None:
        n = self._size
        self._calls, self._failed, self._slow = [0] * n, [0] * n, [0] * n
        self._last = None
        self._t_calls = self._t_failed = self._t_slow = 0
