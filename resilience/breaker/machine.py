"""The breaker's state machine: its state and epoch, transitions, the timed OPEN → HALF_OPEN move.

A permit is the breaker's epoch at the time it was granted; every transition starts a new epoch,
so an outcome that arrives after a transition (a slow call started while CLOSED that ends in
HALF_OPEN) is counted in metrics but never judges the new state. Transitions run under the lock
and collect their events; listeners and the OPEN timer run after the lock is released.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable

from resilience.breaker.metrics import BreakerMetrics
from resilience.breaker.state import (
    BreakerConfig,
    BreakerEvent,
    EventKind,
    State,
    WindowKind,
    _never,
)
from resilience.breaker.window import CountWindow, SlidingWindow, TimeWindow, WindowSnapshot

__all__ = ["BreakerMachine", "Listener", "Scheduler"]

Listener = Callable[[BreakerEvent], None]
Scheduler = Callable[[float, Callable[[], None]], None]
"""``scheduler(delay_s, callback)``: run ``callback`` once after ``delay_s`` seconds."""

_log = logging.getLogger(__name__)
# Per state: (admits every call, records into the window). Read once per transition, so the hot
# path tests plain booleans instead of hashing enum members.
_MODE = {
    State.CLOSED: (True, True),
    State.METRICS_ONLY: (True, True),
    State.DISABLED: (True, False),
    State.OPEN: (False, False),
    State.HALF_OPEN: (False, False),
    State.FORCED_OPEN: (False, False),
}


def _thread_timer(delay_s: float, callback: Callable[[], None]) -> None:
    timer = threading.Timer(delay_s, callback)
    timer.daemon = True
    timer.start()


class BreakerMachine:
    """A breaker's state, windows and transitions; ``CircuitBreaker`` adds permits and calls."""

    def __init__(
        self,
        name: str,
        config: BreakerConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        metrics: BreakerMetrics | None = None,
        scheduler: Scheduler | None = None,
        listeners: Iterable[Listener] = (),
    ) -> None:
        self.name = name
        self.config = config = config or BreakerConfig()
        self._clock = clock
        self._metrics = metrics.bind(name) if metrics is not None else None
        self._scheduler = scheduler or _thread_timer
        self._listeners: tuple[Listener, ...] = tuple(listeners)
        self._lock = threading.Lock()
        self._window: SlidingWindow = (
            CountWindow(config.window_size)
            if config.window_kind is WindowKind.COUNT
            else TimeWindow(config.window_size)
        )
        self._timed_window = config.window_kind is WindowKind.TIME
        self._probe_window = CountWindow(config.half_open_calls)
        self._min_calls = config.effective_minimum_calls
        self._slow_s = config.slow_call_duration_s
        # (state, epoch, admits every call, records into the window): replaced as one tuple so that
        # a reader without the lock never sees a state with another state's epoch.
        self._current: tuple[State, int, bool, bool] = (State.CLOSED, 0, True, True)
        self._result_check = None if config.record_result is _never else config.record_result
        self._probes_left = 0
        self._since = clock()
        self._exceeded = False
        # the count window was judged below both thresholds since the last change
        self._judged = False
        if self._metrics is not None:
            self._metrics.set_state(State.CLOSED)

    # ----- reading -----------------------------------------------------------------------------

    @property
    def state(self) -> State:
        return self._current[0]

    def snapshot(self) -> WindowSnapshot:
        """Totals of the current window (the probe window while HALF_OPEN)."""
        with self._lock:
            if self._current[0] is State.HALF_OPEN:
                return self._probe_window.snapshot(self._clock())
            return self._window.snapshot(self._clock())

    def add_listener(self, listener: Listener) -> None:
        with self._lock:
            self._listeners = (*self._listeners, listener)

    # ----- transitions -------------------------------------------------------------------------

    def transition_to(self, state: State) -> None:
        """Move to ``state`` by hand (e.g. DISABLED during maintenance, FORCED_OPEN to shed)."""
        events: list[BreakerEvent] = []
        schedule: list[int] = []
        with self._lock:
            if self._current[0] is not state:
                self._transition(state, self._clock(), events, schedule)
        self._after(events, schedule)

    def reset(self) -> None:
        """Back to CLOSED with an empty window."""
        events: list[BreakerEvent] = []
        schedule: list[int] = []
        with self._lock:
            now = self._clock()
            self._transition(State.CLOSED, now, events, schedule)
            events.append(BreakerEvent(EventKind.RESET, self.name, now))
        self._after(events, schedule)

    # ----- internals ---------------------------------------------------------------------------

    def _over(self, calls: int, failed: int, slow: int) -> bool:
        cfg = self.config
        return (
            failed / calls >= cfg.failure_rate_threshold
            or slow / calls >= cfg.slow_call_rate_threshold
        )

    def _report_rates(
        self, calls: int, failed: int, slow: int, now: float, events: list[BreakerEvent]
    ) -> None:
        cfg = self.config
        if failed / calls >= cfg.failure_rate_threshold:
            events.append(
                BreakerEvent(EventKind.FAILURE_RATE_EXCEEDED, self.name, now, rate=failed / calls)
            )
        if slow / calls >= cfg.slow_call_rate_threshold:
            events.append(
                BreakerEvent(EventKind.SLOW_CALL_RATE_EXCEEDED, self.name, now, rate=slow / calls)
            )

    def _trip(
        self,
        state: State,
        calls: int,
        failed: int,
        slow: int,
        now: float,
        events: list[BreakerEvent],
        schedule: list[int],
    ) -> None:
        """A window over its thresholds: open, or (METRICS_ONLY) report once per crossing."""
        self._judged = False
        if state is State.METRICS_ONLY:
            if not self._exceeded:
                self._exceeded = True
                self._report_rates(calls, failed, slow, now, events)
            return
        self._report_rates(calls, failed, slow, now, events)
        self._transition(State.OPEN, now, events, schedule)

    def _transition(
        self, to: State, now: float, events: list[BreakerEvent], schedule: list[int]
    ) -> int:
        """Enter ``to`` under the lock; return the new epoch."""
        before, epoch, _, _ = self._current
        epoch += 1
        self._since = now
        self._exceeded = False
        self._judged = False
        if to is State.HALF_OPEN:
            self._probe_window.reset()
            self._probes_left = self.config.half_open_calls
        elif to is not State.OPEN:
            self._window.reset()
        if to is State.OPEN and self.config.automatic_transition:
            schedule.append(epoch)
        self._current = (to, epoch, *_MODE[to])
        if self._metrics is not None:
            self._metrics.set_state(to)
        events.append(
            BreakerEvent(EventKind.STATE_TRANSITION, self.name, now, from_state=before, to_state=to)
        )
        return epoch

    def _auto_half_open(self, epoch: int) -> None:
        events: list[BreakerEvent] = []
        schedule: list[int] = []
        with self._lock:
            state, current_epoch, _, _ = self._current
            if state is State.OPEN and current_epoch == epoch:
                self._transition(State.HALF_OPEN, self._clock(), events, schedule)
        self._after(events, schedule)

    def _after(self, events: list[BreakerEvent], schedule: list[int]) -> None:
        for epoch in schedule:
            self._scheduler(
                self.config.wait_in_open_s, functools.partial(self._auto_half_open, epoch)
            )
        for event in events:
            for listener in self._listeners:
                try:
                    listener(event)
                except Exception:
                    _log.exception("circuit breaker %r: listener %r failed", self.name, listener)
