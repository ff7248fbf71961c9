"""The breaker's state machine: its state and epoch, transitions, the timed OPEN → HALF_OPEN move.

A permit is the breaker's epoch at the time it was granted; every transition starts a new epoch,
so an outcome that arrives after a transition (a slow call started while CLOSED that ends in
HALF_OPEN) is counted in metrics but never judges the new state. Transitions run under the lock
and collect their events; listeners and the OPEN timer run after the lock is released.

Clean successes without the lock
--------------------------------
A success that was neither slow nor failed by the result predicate (nearly every call) is counted
by one ``next()`` on its epoch's *tally*, an ``itertools.count``; the GIL makes that atomic. Every
locked operation (an outcome that is not a clean success, a transition, a permit in a state that
does not admit every call, a snapshot) first *syncs*: it sets ``_safe`` to None, then takes the
tally's next value and folds the successes counted since the last sync into the window. It ends
by *re-arming*: ``_safe`` becomes the epoch's tally again only when no clean success can change the
verdict (the window has neither failed nor slow calls, or it holds at least ``minimum_calls`` and
is below both thresholds, and then a clean success can only lower the rates), nobody listens for
events, and (time window) until the end of the current second. A success that counted itself
then reads ``_safe``: if it is not its tally, the success takes the lock and syncs, and so is
judged in order before its call returns.

Guarantee: outcomes are linearizable. A clean success takes effect at its ``next()`` on the tally,
every other outcome and every transition when it holds the lock, and the window is judged after
each outcome in that order. So under any number of threads the breaker trips on exactly the
outcome that crosses a threshold (zero calls late), a success counted after a transition is
dropped like any outcome with an old permit, and HALF_OPEN admits exactly ``half_open_calls``
probes (permits are only granted under the lock). This relies on the GIL (CPython's default
build); a free-threaded build would need the tallies made thread-safe.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from fleetwatch.resilience.breaker.metrics import BreakerMetrics
from fleetwatch.resilience.breaker.state import (
    BreakerConfig,
    BreakerEvent,
    EventKind,
    State,
    WindowKind,
    _never,
)
from fleetwatch.resilience.breaker.window import (
    CountWindow,
    SlidingWindow,
    TimeWindow,
    WindowSnapshot,
)

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


@dataclass(frozen=True, slots=True)
class Current:
    """The breaker's state and epoch, replaced whole by every transition and never changed.

    A reader without the lock reads ``breaker._current`` once and uses that value, so it never sees
    one state's epoch or tally with another state. ``admits`` (every call) and ``records`` (into
    the window) are the state's mode, looked up once per transition so that the hot path tests
    plain booleans. ``tally`` counts the epoch's clean successes (see the module docstring).

    A frozen dataclass with slots: its fields are slot descriptors, which CPython's specializing
    interpreter reads as fast as a tuple index (a NamedTuple's field is not specialized on 3.11);
    its slower construction happens only on transitions.
    """

    state: State
    epoch: int
    admits: bool
    records: bool
    tally: itertools.count[int]


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
        # Replaced whole, never changed: a reader without the lock sees one consistent state.
        admits, records = _MODE[State.CLOSED]
        self._current = Current(
            state=State.CLOSED, epoch=0, admits=admits, records=records, tally=itertools.count()
        )
        self._mark = -1  # the tally's value taken by the last sync
        # the tally while clean successes may skip the lock (see the module docstring), else None
        self._safe: itertools.count[int] | None = None
        self._safe_until = math.inf  # time window: the lock-free path ends with the second
        self._armed_at = now = clock()  # the last re-arm: the time of the successes it lets by
        self._result_check = None if config.record_result is _never else config.record_result
        self._probes_left = 0
        self._since = now
        self._exceeded = False
        if self._metrics is not None:
            self._metrics.set_state(State.CLOSED)
        self._rearm(now)

    # ----- reading -----------------------------------------------------------------------------

    @property
    def state(self) -> State:
        return self._current.state

    def snapshot(self) -> WindowSnapshot:
        """Totals of the current window (the probe window while HALF_OPEN)."""
        events: list[BreakerEvent] = []
        schedule: list[int] = []
        with self._lock:
            now = self._clock()
            self._sync(now, events, schedule)
            window = self._probe_window if self._current.state is State.HALF_OPEN else self._window
            snap = window.snapshot(now)
            self._rearm(now)
        self._after(events, schedule)
        return snap

    def add_listener(self, listener: Listener) -> None:
        events: list[BreakerEvent] = []
        schedule: list[int] = []
        with self._lock:
            now = self._clock()
            self._sync(now, events, schedule)
            self._listeners = (*self._listeners, listener)
            self._rearm(now)
        self._after(events, schedule)

    # ----- transitions -------------------------------------------------------------------------

    def transition_to(self, state: State) -> None:
        """Move to ``state`` by hand (e.g. DISABLED during maintenance, FORCED_OPEN to shed)."""
        events: list[BreakerEvent] = []
        schedule: list[int] = []
        with self._lock:
            now = self._clock()
            self._sync(now, events, schedule)
            if self._current.state is not state:
                self._transition(state, now, events, schedule)
            self._rearm(now)
        self._after(events, schedule)

    def reset(self) -> None:
        """Back to CLOSED with an empty window."""
        events: list[BreakerEvent] = []
        schedule: list[int] = []
        with self._lock:
            now = self._clock()
            self._sync(now, events, schedule)
            self._transition(State.CLOSED, now, events, schedule)
            events.append(BreakerEvent(EventKind.RESET, self.name, now))
            self._rearm(now)
        self._after(events, schedule)

    # ----- internals ---------------------------------------------------------------------------

    def _sync(self, now: float, events: list[BreakerEvent], schedule: list[int]) -> None:
        """Under the lock: close the lock-free path and fold the successes it counted."""
        was_safe = self._safe is not None
        self._safe = None  # before reading the tally: a later count sees None and takes the lock
        current = self._current
        state, epoch, records = current.state, current.epoch, current.records
        mark = next(current.tally)
        pending = mark - self._mark - 1
        self._mark = mark
        if not pending or not (records or state is State.HALF_OPEN):
            return
        at = self._armed_at
        if was_safe and records:
            self._window.record_clean(at, pending)  # armed safe: they cannot change the verdict
            return
        for _ in range(pending):
            if self._current.epoch != epoch:
                return  # they tripped the breaker: the rest were counted after the transition
            self._judge(state, at, now, False, False, events, schedule)

    def _rearm(self, now: float) -> None:
        """Under the lock, last: open the lock-free path if no clean success can change the verdict."""
        current = self._current
        self._armed_at = now
        if self._timed_window:
            self._safe_until = math.floor(now) + 1.0
        if not current.admits or self._listeners:
            return
        if current.records:
            if self._exceeded:
                return  # METRICS_ONLY over a threshold: a success may bring it back below
            calls, failed, slow = self._window.totals(now)
            if (failed or slow) and (calls < self._min_calls or self._over(calls, failed, slow)):
                return
        self._safe = current.tally

    def _judge(
        self,
        state: State,
        at: float,
        now: float,
        failed: bool,
        slow: bool,
        events: list[BreakerEvent],
        schedule: list[int],
    ) -> None:
        """Record one outcome of the current epoch (recorded at ``at``) and act on the verdict."""
        if state is State.HALF_OPEN:
            calls, n_failed, n_slow = self._probe_window.record(at, failed, slow)
            if calls >= self.config.half_open_calls:
                if self._over(calls, n_failed, n_slow):
                    self._report_rates(calls, n_failed, n_slow, now, events)
                    self._transition(State.OPEN, now, events, schedule)
                else:
                    self._transition(State.CLOSED, now, events, schedule)
            return
        calls, n_failed, n_slow = self._window.record(at, failed, slow)
        if calls >= self._min_calls and self._over(calls, n_failed, n_slow):
            self._trip(state, calls, n_failed, n_slow, now, events, schedule)
        else:
            self._exceeded = False

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
        """Enter ``to`` under the lock (after a sync); return the new epoch."""
        before = self._current.state
        epoch = self._current.epoch + 1
        self._since = now
        self._exceeded = False
        if to is State.HALF_OPEN:
            self._probe_window.reset()
            self._probes_left = self.config.half_open_calls
        elif to is not State.OPEN:
            self._window.reset()
        if to is State.OPEN and self.config.automatic_transition:
            schedule.append(epoch)
        admits, records = _MODE[to]
        self._current = Current(
            state=to, epoch=epoch, admits=admits, records=records, tally=itertools.count()
        )
        self._mark = -1
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
            now = self._clock()
            self._sync(now, events, schedule)
            current = self._current
            if current.state is State.OPEN and current.epoch == epoch:
                self._transition(State.HALF_OPEN, now, events, schedule)
            self._rearm(now)
        self._after(events, schedule)

    def _after(self, events: list[BreakerEvent], schedule: list[int]) -> None:
        if not events and not schedule:
            return
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
