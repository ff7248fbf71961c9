"""A rate-based circuit breaker with resilience4j's semantics, for threads and asyncio.

``CircuitBreaker`` wraps calls (``call``, ``call_async``, the decorator and ``guard()``) around
the permit protocol of ``resilience.breaker.permits``, whose states and transitions live in
``resilience.breaker.machine``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, cast

from resilience.breaker.permits import PermitBreaker

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

    ``clock`` (seconds, monotonic) times calls and the wait in OPEN; ``scheduler`` runs the
    automatic OPEN → HALF_OPEN transition (a daemon ``threading.Timer`` by default). Listeners are
    called synchronously after the lock is released, on the thread that caused the event; they must
    not block, and an exception they raise is logged, never passed to the caller.
    """

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
