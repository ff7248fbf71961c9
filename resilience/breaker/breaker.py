"""A rate-based circuit breaker with resilience4j's semantics, for threads and asyncio.

The lock guards only the breaker's own bookkeeping: a call first takes a permit (lock held for a
few field updates), then runs with no lock held, then reports its outcome with the permit. So calls
through one breaker run concurrently (pybreaker runs them one at a time), and HALF_OPEN admits
exactly ``half_open_calls`` probes however many threads or tasks race for them.

A permit is the breaker's epoch at the time it was granted; every transition starts a new epoch,
so an outcome that arrives after a transition (a slow call started while CLOSED that ends in
HALF_OPEN) is counted in metrics but never judges the new state.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, cast

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

__all__ = ["CallNotPermittedError", "CircuitBreaker", "Guard", "Listener", "Scheduler"]

P = ParamSpec("P")
R = TypeVar("R")
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


class CallNotPermittedError(Exception):
    """The breaker refused the call (OPEN, FORCED_OPEN, or HALF_OPEN with every probe taken)."""

    def __init__(self, breaker: str, state: State) -> None:
        super().__init__(f"circuit breaker {breaker!r} is {state.value}: call not permitted")
        self.breaker = breaker
        self.state = state


def _thread_timer(delay_s: float, callback: Callable[[], None]) -> None:
    timer = threading.Timer(delay_s, callback)
    timer.daemon = True
    timer.start()


class CircuitBreaker:
    """Fail fast while a dependency is failing; probe it with a fixed number of calls to recover.

    Example::

        breaker = CircuitBreaker("llm-backend", BreakerConfig(window_size=20, minimum_calls=10))

        @breaker
        def complete(prompt: str) -> str: ...

        async with breaker.guard():
            await client.post(...)

    ``clock`` (seconds, monotonic) times calls and the wait in OPEN; ``scheduler`` runs the
    automatic OPEN → HALF_OPEN transition (a daemon ``threading.Timer`` by default). Listeners are
    called synchronously after the lock is released, on the thread that caused the event; they must
    not block, and an exception they raise is logged, never passed to the caller.
    """

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

    # ----- permits -----------------------------------------------------------------------------

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

    # ----- wrapping ----------------------------------------------------------------------------

    def call(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call ``fn`` through the breaker (CallNotPermittedError when refused)."""
        current = self._current
        permit = current[1] if current[2] else self.acquire()
        clock = self._clock
        start = clock()
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            self.record_error(permit, clock() - start, exc)
            raise
        check = self._result_check
        self._record(permit, clock() - start, False if check is None else bool(check(result)), None)
        return result

    async def call_async(
        self, fn: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs
    ) -> R:
        permit = self.acquire()
        clock = self._clock
        start = clock()
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:
            self.record_error(permit, clock() - start, exc)
            raise
        self.record_success(permit, clock() - start, result)
        return result

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        """Decorate a function or a coroutine function."""
        if inspect.iscoroutinefunction(fn):
            async_fn = cast(Callable[P, Awaitable[Any]], fn)

            @functools.wraps(fn)
            async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                return await self.call_async(async_fn, *args, **kwargs)

            return cast(Callable[P, R], async_wrapper)

        call = self.call

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            return call(fn, *args, **kwargs)

        return wrapper

    def guard(self) -> Guard:
        """A context manager (sync or async) for one call; ``guard.result(value)`` feeds the result predicate."""
        return Guard(self)

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


class Guard:
    """One guarded call as a context manager; made by ``CircuitBreaker.guard()``.

    Entering takes a permit (raising CallNotPermittedError when refused); leaving reports the outcome.
    """

    __slots__ = ("_breaker", "_permit", "_result", "_start")

    def __init__(self, breaker: CircuitBreaker) -> None:
        self._breaker = breaker
        self._permit = -1
        self._start = 0.0
        self._result: Any = None

    def result(self, value: Any) -> None:
        """Hand the call's result to the breaker's result predicate."""
        self._result = value

    def __enter__(self) -> Guard:
        self._permit = self._breaker.acquire()
        self._start = self._breaker._clock()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        duration = self._breaker._clock() - self._start
        if exc is None:
            self._breaker.record_success(self._permit, duration, self._result)
        else:
            self._breaker.record_error(self._permit, duration, exc)

    async def __aenter__(self) -> Guard:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)
