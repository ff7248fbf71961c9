"""Permits and outcomes: whether a call may run now, and how its outcome is judged.

The lock guards only the breaker's own bookkeeping: a call first takes a permit (lock held for a
few field updates), then runs with no lock held, then reports its outcome with the permit. So calls
through one breaker run concurrently (pybreaker runs them one at a time), and HALF_OPEN admits
exactly ``half_open_calls`` probes however many threads or tasks race for them.
"""

from __future__ import annotations

from typing import Any

from resilience.breaker.machine import BreakerMachine
from resilience.breaker.state import BreakerEvent, EventKind, State

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
        if current[2]:
            return current[1]
        events: list[BreakerEvent] = []
        schedule: list[int] = []
        with self._lock:
            state, epoch, admits, _ = self._current
            now = self._clock()
            permit: int | None = None
            if admits:
                permit = epoch
            elif state is State.OPEN and now - self._since >= self.config.wait_in_open_s:
                epoch = self._transition(State.HALF_OPEN, now, events, schedule)
                state = State.HALF_OPEN
            if state is State.HALF_OPEN:
                wait = self.config.max_wait_in_half_open_s
                if wait > 0.0 and now - self._since >= wait:
                    self._transition(State.OPEN, now, events, schedule)
                    state = State.OPEN
                elif self._probes_left > 0:
                    self._probes_left -= 1
                    permit = epoch
            if permit is None:
                events.append(BreakerEvent(EventKind.NOT_PERMITTED, self.name, now))
        self._after(events, schedule)
        if permit is None and self._metrics is not None:
            self._metrics.not_permitted.inc()
        return permit

    def acquire(self) -> int:
        """A permit for one call; raises CallNotPermittedError when refused."""
        current = self._current
        if current[2]:
            return current[1]
        permit = self.try_acquire()
        if permit is None:
            raise CallNotPermittedError(self.name, self._current[0])
        return permit

    def release(self, permit: int) -> None:
        """Give back a permit whose call counts neither way (cancelled, ignored error)."""
        self._record(permit, 0.0, None, None)

    def record_success(self, permit: int, duration_s: float, result: Any = None) -> None:
        """Report a call that returned ``result`` after ``duration_s`` seconds."""
        check = self._result_check
        self._record(permit, duration_s, False if check is None else bool(check(result)), None)

    def record_error(self, permit: int, duration_s: float, error: BaseException) -> None:
        """Report a call that raised ``error`` after ``duration_s`` seconds."""
        cfg = self.config
        if not isinstance(error, Exception) or cfg.ignore_exception(error):
            self._record(permit, duration_s, None, error)
        else:
            self._record(permit, duration_s, bool(cfg.record_exception(error)), error)

    # ----- internals ---------------------------------------------------------------------------

    def _record(
        self, permit: int, duration_s: float, failed: bool | None, error: BaseException | None
    ) -> None:
        slow = duration_s >= self._slow_s
        metrics = self._metrics
        if metrics is not None:
            metrics.observe(failed, slow)
        listening = bool(self._listeners)
        totals: tuple[int, int, int] | None = None
        with self._lock:
            state, epoch, _, recording = self._current
            if not listening and epoch == permit and recording and not self._timed_window:
                # the common case: CLOSED, count window, nobody listening; no clock read
                if failed is None:
                    return
                totals = self._window.record(0.0, failed, slow)
                if not failed and not slow and self._judged:
                    return  # a clean call cannot raise either rate of a count window
                calls = totals[0]
                if calls < self._min_calls:
                    return
                if not self._over(calls, totals[1], totals[2]):
                    self._exceeded = False
                    self._judged = True
                    return
            events: list[BreakerEvent] = []
            schedule: list[int] = []
            now = self._clock()
            if listening and (failed is not None or error is not None):
                kind = (
                    EventKind.IGNORED_ERROR
                    if failed is None
                    else (EventKind.ERROR if failed else EventKind.SUCCESS)
                )
                events.append(
                    BreakerEvent(kind, self.name, now, duration_s=duration_s, error=error)
                )
            if epoch != permit:
                pass  # an outcome from before the last transition judges nothing
            elif recording:
                if failed is not None:
                    if totals is None:
                        totals = self._window.record(now, failed, slow)
                    calls, n_failed, n_slow = totals
                    if calls >= self._min_calls and self._over(calls, n_failed, n_slow):
                        self._trip(state, calls, n_failed, n_slow, now, events, schedule)
                    else:
                        self._exceeded = False
            elif state is State.HALF_OPEN:
                if failed is None:
                    self._probes_left += 1
                else:
                    calls, n_failed, n_slow = self._probe_window.record(now, failed, slow)
                    if calls >= self.config.half_open_calls:
                        if self._over(calls, n_failed, n_slow):
                            self._report_rates(calls, n_failed, n_slow, now, events)
                            self._transition(State.OPEN, now, events, schedule)
                        else:
                            self._transition(State.CLOSED, now, events, schedule)
        if events or schedule:
            self._after(events, schedule)
