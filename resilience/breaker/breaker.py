"""A rate-based circuit breaker with resilience4j's semantics, for threads and asyncio.

``CircuitBreaker`` wraps calls (``call``, ``call_async``, the decorator and ``guard()``) around
the permit protocol of ``fleetwatch.resilience.breaker.permits``, whose states and transitions live in
``fleetwatch.resilience.breaker.machine``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, cast

from fleetwatch.resilience.breaker.machine import Current
from fleetwatch.resilience.breaker.permits import PermitBreaker

__all__ = ["CircuitBreaker", "Guard"]

P = ParamSpec("P")
R = TypeVar("R")


class CircuitBreaker(PermitBreaker):
    """Fail fast while a dependency is failing; probe it with a fixed number of calls to recover.

    Example::

        breaker = CircuitBreaker("llm-backend", BreakerConfig(window_size=20, minimum_calls=10))

        @breaker
        def complete(prompt: str) -> str: ...

        async with breaker.guard():
            await client.post(...)

    The closed-state success path takes no lock: two clock reads (the call's start and end, which
    slow-call detection needs), one ``next()`` on the epoch's tally, then a check that the
    lock-free path is still open; ``fleetwatch.resilience.breaker.machine`` explains why the verdict stays
    exact under concurrency.

    ``clock`` (seconds, monotonic) times calls and the wait in OPEN; ``scheduler`` runs the
    automatic OPEN → HALF_OPEN transition (a daemon ``threading.Timer`` by default). Listeners are
    called synchronously after the lock is released, on the thread that caused the event; they must
    not block, and an exception they raise is logged, never passed to the caller.
    """

    def call(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call ``fn`` through the breaker (CallNotPermittedError when refused)."""
        current = self._current
        if not current.admits:
            current = self._admit()
        clock = self._clock
        start = clock()
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            self.record_error(current.epoch, clock() - start, exc)
            raise
        end = clock()
        check = self._result_check
        if (
            check is not None
            or end - start > self._slow_s
            or (self._timed_window and end >= self._safe_until)
        ):
            self._finish(current, end - start, end, result)
            return result
        # the clean success of PermitBreaker._count_ok, inlined
        tally = current.tally
        next(tally)
        metrics = self._metrics
        if metrics is not None:
            next(metrics.success)
        if self._safe is not tally:
            self._late(end - start)
        return result

    async def call_async(
        self, fn: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs
    ) -> R:
        current = self._current
        if not current.admits:
            current = self._admit()
        clock = self._clock
        start = clock()
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:
            self.record_error(current.epoch, clock() - start, exc)
            raise
        end = clock()
        self._finish(current, end - start, end, result)
        return result

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        """Decorate a function or a coroutine function."""
        if inspect.iscoroutinefunction(fn):
            return cast(Callable[P, R], _async_wrapper(self, fn))
        return _sync_wrapper(self, fn)

    def guard(self) -> Guard:
        """A context manager (sync or async) for one call; ``guard.result(value)`` feeds the result predicate."""
        return Guard(self)


class Guard:
    """One guarded call as a context manager; made by ``CircuitBreaker.guard()``.

    Entering takes a permit (raising CallNotPermittedError when refused); leaving reports the outcome.
    """

    __slots__ = ("_breaker", "_current", "_result", "_start")

    def __init__(self, breaker: CircuitBreaker) -> None:
        self._breaker = breaker
        self._current: Current | None = None
        self._start = 0.0
        self._result: Any = None

    def result(self, value: Any) -> None:
        """Hand the call's result to the breaker's result predicate."""
        self._result = value

    def __enter__(self) -> Guard:
        self._current = self._breaker._admit()
        self._start = self._breaker._clock()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        breaker = self._breaker
        current = self._current
        assert current is not None, "Guard exited without entering"
        end = breaker._clock()
        if exc is None:
            breaker._finish(current, end - self._start, end, self._result)
        else:
            breaker.record_error(current.epoch, end - self._start, exc)

    async def __aenter__(self) -> Guard:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


def _sync_wrapper(breaker: CircuitBreaker, fn: Callable[P, R]) -> Callable[P, R]:
    """``breaker.call(fn, ...)`` with what cannot change after construction bound once."""
    clock = breaker._clock
    slow_s = breaker._slow_s
    precheck = breaker._result_check is not None or breaker._timed_window
    metrics = breaker._metrics
    admit = breaker._admit
    finish = breaker._finish
    record_error = breaker.record_error
    late = breaker._late

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        current = breaker._current
        if not current.admits:
            current = admit()
        start = clock()
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            record_error(current.epoch, clock() - start, exc)
            raise
        end = clock()
        if precheck or end - start > slow_s:
            finish(current, end - start, end, result)
            return result
        tally = current.tally
        next(tally)
        if metrics is not None:
            next(metrics.success)
        if breaker._safe is not tally:
            late(end - start)
        return result

    return wrapper


def _async_wrapper(
    breaker: CircuitBreaker, fn: Callable[P, Awaitable[R]]
) -> Callable[P, Awaitable[R]]:
    """``breaker.call_async(fn, ...)`` with what cannot change after construction bound once."""
    clock = breaker._clock
    slow_s = breaker._slow_s
    precheck = breaker._result_check is not None or breaker._timed_window
    metrics = breaker._metrics
    admit = breaker._admit
    finish = breaker._finish
    record_error = breaker.record_error
    late = breaker._late

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        current = breaker._current
        if not current.admits:
            current = admit()
        start = clock()
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:
            record_error(current.epoch, clock() - start, exc)
            raise
        end = clock()
        if precheck or end - start > slow_s:
            finish(current, end - start, end, result)
            return result
        tally = current.tally
        next(tally)
        if metrics is not None:
            next(metrics.success)
        if breaker._safe is not tally:
            late(end - start)
        return result

    return wrapper
