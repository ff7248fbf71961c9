"""A retry policy that builds a fresh tenacity ``Retrying``/``AsyncRetrying`` for every call.

Concurrent coroutines must never share one ``AsyncRetrying`` (tenacity issue 93: its statistics and
iteration state are per object), so the policy is the shareable thing and the retrying objects are
per call. Cancellation and other ``BaseException``s are never retried (tenacity issue 529).

Per call: the attempt cap, then the overall deadline (which also refuses a sleep that would end
past it), then the shared retry budget (last, so a token is only spent on a retry that happens).
The sleep is the jitter backoff, raised to at least the server's ``Retry-After`` (capped at
``retry_after_cap_s``) plus the jitter, so clients told the same Retry-After do not return together.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar, cast

import tenacity
from prometheus_client import Counter
from tenacity.stop import stop_after_attempt, stop_base
from tenacity.wait import wait_base

from fleetwatch.resilience.errors import ResilienceConfigError
from fleetwatch.resilience.retry.budget import RetryBudget
from fleetwatch.resilience.retry.jitter import Jitter, backoff_s
from fleetwatch.resilience.retry.metrics import BoundRetryMetrics, RetryMetrics

__all__ = ["RetryPolicy", "retry_after_attribute", "retry_any_exception"]

P = ParamSpec("P")
R = TypeVar("R")


def retry_any_exception(exc: BaseException) -> bool:
    """Default predicate: every ``Exception`` (never cancellation or interrupts)."""
    return isinstance(exc, Exception)


def retry_after_attribute(exc: BaseException) -> float | None:
    """Default Retry-After source: an exception's ``retry_after_s`` attribute, in seconds."""
    value = getattr(exc, "retry_after_s", None)
    return float(value) if isinstance(value, int | float) else None


class _Wait(wait_base):
    def __init__(self, policy: RetryPolicy) -> None:
        self._p = policy

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        p = self._p
        sleep = backoff_s(
            p.jitter,
            p.rng,
            retry_state.attempt_number,
            retry_state.upcoming_sleep,
            p.base_s,
            p.cap_s,
        )
        outcome = retry_state.outcome
        if outcome is not None and outcome.failed:
            hint = p.retry_after(cast(BaseException, outcome.exception()))
            if hint is not None and hint > 0.0:
                sleep += min(hint, p.retry_after_cap_s)
        return sleep


class _StopAtDeadline(stop_base):
    def __init__(self, deadline: float, clock: Callable[[], float]) -> None:
        self._deadline = deadline
        self._clock = clock

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return self._clock() + retry_state.upcoming_sleep >= self._deadline


@dataclass(frozen=True)
class RetryPolicy:
    """Retry with jitter, an attempt cap, a deadline, Retry-After and an optional shared budget.

    Example::

        budget = RetryBudget()
        policy = RetryPolicy(max_attempts=3, deadline_s=30.0, retryable=llm_http_retryable, budget=budget)

        @policy
        async def complete(prompt: str) -> str: ...

        for attempt in policy.retrying():      # or: policy.call(fn, *args)
            with attempt:
                ...

    ``clock`` (monotonic seconds), ``sleep``/``async_sleep`` and ``rng`` are injectable; tests
    pass fakes and never sleep. Durations are in seconds.
    """

    name: str = "default"
    max_attempts: int = 3
    deadline_s: float | None = None
    jitter: Jitter = Jitter.FULL
    base_s: float = 0.5
    cap_s: float = 8.0
    retry_after_cap_s: float = 60.0
    retryable: Callable[[BaseException], bool] = retry_any_exception
    retry_after: Callable[[BaseException], float | None] = retry_after_attribute
    budget: RetryBudget | None = None
    metrics: RetryMetrics | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    rng: random.Random = field(default_factory=random.Random)
    _bound: BoundRetryMetrics | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        where = f"retry policy {self.name!r}"
        if self.max_attempts < 1:
            raise ResilienceConfigError(
                f"{where}: max_attempts must be >= 1, got {self.max_attempts}"
            )
        if self.deadline_s is not None and not self.deadline_s > 0.0:
            raise ResilienceConfigError(
                f"{where}: deadline_s must be > 0 seconds, got {self.deadline_s}"
            )
        if not self.base_s > 0.0 or not self.cap_s >= self.base_s:
            raise ResilienceConfigError(
                f"{where}: need 0 < base_s <= cap_s, got base_s={self.base_s}, cap_s={self.cap_s}"
            )
        if not self.retry_after_cap_s >= 0.0:
            raise ResilienceConfigError(
                f"{where}: retry_after_cap_s must be >= 0, got {self.retry_after_cap_s}"
            )
        if self.metrics is not None:
            object.__setattr__(self, "_bound", self.metrics.bind_policy(self.name))

    def _should_retry(self, exc: BaseException) -> bool:
        return isinstance(exc, Exception) and self.retryable(exc)

    def _kwargs(self) -> dict[str, Any]:
        if self.budget is not None:
            self.budget.deposit()
        stop: stop_base = stop_after_attempt(self.max_attempts)
        if self.deadline_s is not None:
            stop = stop | _StopAtDeadline(self.clock() + self.deadline_s, self.clock)
        if self.budget is not None:
            stop = stop | self.budget.stop
        kwargs: dict[str, Any] = {
            "stop": stop,
            "wait": _Wait(self),
            "retry": tenacity.retry_if_exception(self._should_retry),
            "reraise": True,
        }
        bound = self._bound
        if bound is not None:

            def before(rs: tenacity.RetryCallState) -> None:
                bound.attempts.inc()
                if rs.attempt_number > 1:
                    bound.retries.inc()

            kwargs["before"] = before
            kwargs["retry_error_callback"] = functools.partial(_exhausted, bound.exhausted)
        return kwargs

    def retrying(self) -> tenacity.Retrying:
        """A new Retrying for one logical request (deposits into the budget)."""
        return tenacity.Retrying(sleep=self.sleep, **self._kwargs())

    def async_retrying(self) -> tenacity.AsyncRetrying:
        """A new AsyncRetrying for one logical request; never share it between coroutines."""
        return tenacity.AsyncRetrying(sleep=self.async_sleep, **self._kwargs())

    def call(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.retrying()(fn, *args, **kwargs)

    async def call_async(
        self, fn: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs
    ) -> R:
        return cast(R, await self.async_retrying()(fn, *args, **kwargs))

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        """Decorate a function or coroutine function; each call gets its own retrying object."""
        if inspect.iscoroutinefunction(fn):
            async_fn = cast(Callable[P, Awaitable[Any]], fn)

            @functools.wraps(fn)
            async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                return await self.call_async(async_fn, *args, **kwargs)

            return cast(Callable[P, R], async_wrapper)

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            return self.call(fn, *args, **kwargs)

        return wrapper


def _exhausted(counter: Counter, retry_state: tenacity.RetryCallState) -> Any:
    counter.inc()
    outcome = retry_state.outcome
    assert outcome is not None
    return outcome.result()  # re-raises the last error
