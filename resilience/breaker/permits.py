"""Permits and outcomes: whether a call may run now, and how its outcome is judged.

The lock guards only the breaker's own bookkeeping: a call first takes a permit (no lock in the
states that admit every call; lock held for a few field updates otherwise), then runs with no lock
held, then reports its outcome with the permit. A clean success (not slow, not failed by the result
predicate) is counted without the lock, as ``fleetwatch.resilience.breaker.machine`` explains; every other
outcome takes it. So calls through one breaker run concurrently (pybreaker runs them one at a
time), and HALF_OPEN admits exactly ``half_open_calls`` probes however many threads or tasks race
for them. A call is slow when it lasts strictly longer than ``slow_call_duration_s``.
"""

from __future__ import annotations

from typing import Any

from fleetwatch.resilience.breaker.machine import BreakerMachine, Current
from fleetwatch.resilience.breaker.state import BreakerEvent, EventKind, State

__all__ = ["CallNotPermittedError", "PermitBreaker"]


class CallNotPermittedError(Exception):
    """The breaker refused the call (OPEN, FORCED_OPEN, or HALF_OPEN with every probe taken)."""

    def __init__(self, breaker: str, state: State) -> None:
        super().__init__(f"circuit breaker {breaker!r} is {state.value}: call not permitted")
        self.breaker = breaker
        self.state = state


class PermitBreaker(BreakerMachine):
    """The permit protocol over ``BreakerMachine``: acquire, run, then record the outcome."""

    def try_acquire(self) -> int | None:
        """A permit for one call, or None when the breaker refuses it (counted as not permitted)."""
        current = self._current
        if current.admits:
            return current.epoch
        granted = self._admit_locked()
        return None if granted is None else granted.epoch

    def acquire(self) -> int:
        """A permit for one call; raises CallNotPermittedError when refused."""
        return self._admit().epoch

    def release(self, permit: int) -> None:
        """Give back a permit whose call counts neither way (cancelled, ignored error)."""
        self._settle(permit, 0.0, None, None)

    def record_success(self, permit: int, duration_s: float, result: Any = None) -> None:
        """Report a call that returned ``result`` after ``duration_s`` seconds."""
        current = self._current
        if current.epoch == permit:
            self._finish(current, duration_s, self._clock() if self._timed_window else 0.0, result)
        else:
            check = self._result_check
            self._settle(permit, duration_s, check is not None and bool(check(result)), None)

    def record_error(self, permit: int, duration_s: float, error: BaseException) -> None:
        """Report a call that raised ``error`` after ``duration_s`` seconds."""
        cfg = self.config
        if not isinstance(error, Exception) or cfg.ignore_exception(error):
            self._settle(permit, duration_s, None, error)
        else:
            self._settle(permit, duration_s, bool(cfg.record_exception(error)), error)

    # ----- internals ---------------------------------------------------------------------------

    def _admit(self) -> Current:
        """The state whose epoch is the permit; raises CallNotPermittedError when refused."""
        current = self._current
        if current.admits:
            return current
        granted = self._admit_locked()
        if granted is None:
            raise CallNotPermittedError(self.name, self._current.state)
        return granted

    def _admit_locked(self) -> Current | None:
        events: list[BreakerEvent] = []
        schedule: list[int] = []
        with self._lock:
            now = self._clock()
            self._sync(now, events, schedule)
            current = self._current
            state = current.state
            granted: Current | None = None
            if current.admits:
                granted = current
            elif state is State.OPEN and now - self._since >= self.config.wait_in_open_s:
                self._transition(State.HALF_OPEN, now, events, schedule)
                state = State.HALF_OPEN
            if state is State.HALF_OPEN:
                wait = self.config.max_wait_in_half_open_s
                if wait > 0.0 and now - self._since >= wait:
                    self._transition(State.OPEN, now, events, schedule)
                elif self._probes_left > 0:
                    self._probes_left -= 1
                    granted = self._current
            if granted is None:
                events.append(BreakerEvent(EventKind.NOT_PERMITTED, self.name, now))
            self._rearm(now)
        self._after(events, schedule)
        if granted is None and self._metrics is not None:
            self._metrics.not_permitted.inc()
        return granted

    def _finish(self, current: Current, duration_s: float, end: float, result: Any) -> None:
        """Report a call of ``current``'s epoch that returned ``result`` at ``end`` (clock time)."""
        check = self._result_check
        failed = check is not None and bool(check(result))
        if failed or duration_s > self._slow_s or (self._timed_window and end >= self._safe_until):
            self._settle(current.epoch, duration_s, failed, None)
        else:
            self._count_ok(current, duration_s)

    def _count_ok(self, current: Current, duration_s: float) -> None:
        """Count a clean success of ``current``'s epoch without the lock (see ``machine``)."""
        tally = current.tally
        next(tally)
        metrics = self._metrics
        if metrics is not None:
            next(metrics.success)
        if self._safe is not tally:
            self._late(duration_s)

    def _late(self, duration_s: float) -> None:
        """A clean success already counted on its tally, which found the lock-free path closed."""
        events: list[BreakerEvent] = []
        schedule: list[int] = []
        with self._lock:
            now = self._clock()
            if self._listeners:
                events.append(
                    BreakerEvent(EventKind.SUCCESS, self.name, now, duration_s=duration_s)
                )
            self._sync(now, events, schedule)
            self._rearm(now)
        self._after(events, schedule)

    def _settle(
        self, permit: int, duration_s: float, failed: bool | None, error: BaseException | None
    ) -> None:
        """Judge one outcome under the lock: anything but a clean success counted on a tally."""
        slow = duration_s > self._slow_s
        metrics = self._metrics
        if metrics is not None:
            metrics.observe(failed, slow)
        events: list[BreakerEvent] = []
        schedule: list[int] = []
        with self._lock:
            now = self._clock()
            self._sync(now, events, schedule)
            if self._listeners and (failed is not None or error is not None):
                kind = (
                    EventKind.IGNORED_ERROR
                    if failed is None
                    else (EventKind.ERROR if failed else EventKind.SUCCESS)
                )
                events.append(
                    BreakerEvent(kind, self.name, now, duration_s=duration_s, error=error)
                )
            current = self._current
            state = current.state
            if current.epoch != permit:
                pass  # an outcome from before the last transition judges nothing
            elif failed is None:
                if state is State.HALF_OPEN:
                    self._probes_left += 1
            elif current.records or state is State.HALF_OPEN:
                self._judge(state, now, now, failed, slow, events, schedule)
            self._rearm(now)
        self._after(events, schedule)
