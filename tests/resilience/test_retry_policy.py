"""RetryPolicy: attempt cap, deadline, Retry-After, no retry of cancellation, metrics, fresh state per call."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from fleetwatch.resilience.errors import ResilienceConfigError
from fleetwatch.resilience.retry import (
    CallFailure,
    FailureKind,
    Jitter,
    LLMCallError,
    RetryMetrics,
    RetryPolicy,
    llm_http_retryable,
)


class Clock:
    """A clock whose sleep advances it."""

    def __init__(self) -> None:
        self.t = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)


class Flaky:
    def __init__(self, failures: int, error: BaseException) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "ok"


def policy(clock: Clock, **overrides: object) -> RetryPolicy:
    settings: dict[str, object] = dict(
        clock=clock,
        sleep=clock.sleep,
        async_sleep=clock.async_sleep,
        jitter=Jitter.NONE,
        base_s=1.0,
        cap_s=1.0,
    )
    settings.update(overrides)
    return RetryPolicy(**settings)  # type: ignore[arg-type]


def test_retries_then_succeeds() -> None:
    clock = Clock()
    fn = Flaky(2, RuntimeError("x"))
    assert policy(clock).call(fn) == "ok"
    assert fn.calls == 3 and clock.sleeps == [1.0, 1.0]


def test_gives_up_after_the_attempt_cap_with_the_original_error() -> None:
    fn = Flaky(10, RuntimeError("last"))
    with pytest.raises(RuntimeError, match="last"):
        policy(Clock(), max_attempts=4).call(fn)
    assert fn.calls == 4


def test_non_retryable_errors_are_raised_at_once() -> None:
    fn = Flaky(10, LLMCallError(CallFailure(FailureKind.HTTP_STATUS, status=400)))
    with pytest.raises(LLMCallError):
        policy(Clock(), retryable=llm_http_retryable).call(fn)
    assert fn.calls == 1


def test_deadline_refuses_a_sleep_that_would_end_past_it() -> None:
    clock = Clock()
    fn = Flaky(10, RuntimeError("x"))
    with pytest.raises(RuntimeError):
        policy(clock, max_attempts=10, deadline_s=2.5).call(fn)
    assert fn.calls == 3  # t=0, t=1, t=2; a sleep to t=3 would pass the deadline
    assert clock.t == 2.0


def test_retry_after_is_a_floor_and_is_capped() -> None:
    clock = Clock()
    hint = LLMCallError(CallFailure(FailureKind.HTTP_STATUS, status=429, retry_after_s=5.0))
    policy(clock, retryable=llm_http_retryable).call(Flaky(1, hint))
    huge = LLMCallError(CallFailure(FailureKind.HTTP_STATUS, status=503, retry_after_s=3600.0))
    policy(clock, retryable=llm_http_retryable, retry_after_cap_s=60.0).call(Flaky(1, huge))
    assert clock.sleeps == [6.0, 61.0]  # hint (capped) + the 1 s backoff


def test_cancellation_is_never_retried() -> None:
    clock = Clock()
    calls = 0

    async def cancelled() -> None:
        nonlocal calls
        calls += 1
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(policy(clock, max_attempts=5).call_async(cancelled))
    assert calls == 1 and clock.sleeps == []


def test_each_call_gets_its_own_retrying_object() -> None:
    p = policy(Clock())
    assert p.async_retrying() is not p.async_retrying()
    assert p.retrying() is not p.retrying()


def test_concurrent_async_calls_keep_separate_attempt_counts() -> None:
    clock = Clock()
    p = policy(clock, max_attempts=3)
    counts: dict[int, int] = {}

    async def call(i: int) -> int:
        counts[i] = counts.get(i, 0) + 1
        await asyncio.sleep(0)
        if i % 2 and counts[i] < 3:
            raise RuntimeError
        return counts[i]

    async def main() -> list[int]:
        return await asyncio.gather(*(p.call_async(call, i) for i in range(50)))

    results = asyncio.run(main())
    assert results == [1 if i % 2 == 0 else 3 for i in range(50)]


def test_decorators() -> None:
    clock = Clock()
    p = policy(clock)
    sync_fn = Flaky(1, RuntimeError())

    @p
    def sync_call() -> str:
        return sync_fn()

    async_fn = Flaky(2, RuntimeError())

    @p
    async def async_call() -> str:
        return async_fn()

    assert sync_call() == "ok"
    assert asyncio.run(async_call()) == "ok"
    assert (sync_fn.calls, async_fn.calls) == (2, 3)


def test_metrics_count_attempts_retries_and_exhaustion() -> None:
    registry = CollectorRegistry()
    p = policy(Clock(), name="llm", metrics=RetryMetrics(registry))
    p.call(Flaky(1, RuntimeError()))
    with pytest.raises(RuntimeError):
        p.call(Flaky(5, RuntimeError()))

    def value(name: str) -> float | None:
        return registry.get_sample_value(name, {"policy": "llm"})

    assert value("fleetwatch_retry_attempts_total") == 5.0
    assert value("fleetwatch_retry_retries_total") == 3.0
    assert value("fleetwatch_retry_exhausted_total") == 1.0


@pytest.mark.parametrize(
    ("field", "value"), [("max_attempts", 0), ("deadline_s", 0.0), ("base_s", 0.0), ("cap_s", 0.1)]
)
def test_impossible_policy_is_refused(field: str, value: float) -> None:
    with pytest.raises(ResilienceConfigError, match=field):
        RetryPolicy(**{field: value})  # type: ignore[arg-type]
