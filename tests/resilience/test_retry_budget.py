"""The retry budget bounds retries to a share of requests plus a reserve, across threads and tasks."""

from __future__ import annotations

import asyncio
import threading

import pytest
from prometheus_client import CollectorRegistry

from fleetwatch.resilience.errors import ResilienceConfigError
from fleetwatch.resilience.retry import RetryBudget, RetryMetrics, RetryPolicy


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Down(Exception):
    pass


def amplification(
    budget: RetryBudget | None, clock: Clock, requests: int, rate_per_s: float
) -> float:
    """Send ``requests`` at ``rate_per_s`` to a backend that always fails; return attempts/request."""
    attempts = 0

    def call() -> None:
        nonlocal attempts
        attempts += 1
        raise Down

    policy = RetryPolicy(max_attempts=3, budget=budget, clock=clock, sleep=lambda s: None)
    for i in range(requests):
        clock.t = i / rate_per_s
        with pytest.raises(Down):
            policy.call(call)
    return attempts / requests


def test_budget_holds_amplification_under_total_failure() -> None:
    clock = Clock()
    requests, rate, ttl, reserve_rps = 10_000, 100.0, 10.0, 10.0
    budget = RetryBudget(ttl_s=ttl, min_retries_per_s=reserve_rps, retry_ratio=0.1, clock=clock)
    with_budget = amplification(budget, clock, requests, rate)
    without = amplification(None, Clock(), requests, rate)
    duration = requests / rate
    reserve = reserve_rps * (duration + ttl) / requests  # the reserve's share, per request
    assert without == 3.0
    assert with_budget <= 1.1 + reserve
    assert with_budget >= 1.1  # the budget does allow its share
    assert budget.refusals > 0


def test_deposits_expire_after_ttl() -> None:
    clock = Clock()
    budget = RetryBudget(ttl_s=10.0, min_retries_per_s=0.0, retry_ratio=0.5, clock=clock)
    for _ in range(10):
        budget.deposit()
    assert budget.balance() == 5.0
    assert budget.try_withdraw()
    clock.t = 10.5
    assert budget.balance() == 0.0
    assert not budget.try_withdraw()


def test_withdrawals_expire_too() -> None:
    clock = Clock()
    budget = RetryBudget(ttl_s=10.0, min_retries_per_s=1.0, retry_ratio=0.1, clock=clock)
    taken = sum(budget.try_withdraw() for _ in range(100))
    assert taken == 10  # the reserve: 1 retry/s over a 10 s ttl
    clock.t = 11.0
    assert budget.try_withdraw()


def test_threads_never_overdraw() -> None:
    budget = RetryBudget(ttl_s=1000.0, min_retries_per_s=0.0, retry_ratio=0.25, clock=lambda: 0.0)
    for _ in range(400):
        budget.deposit()
    granted = [0] * 8

    def take(i: int) -> None:
        for _ in range(200):
            granted[i] += budget.try_withdraw()

    threads = [threading.Thread(target=take, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(granted) == 100
    assert budget.refusals == 8 * 200 - 100


def test_async_callers_share_the_budget_not_the_retry_state() -> None:
    clock = Clock()
    budget = RetryBudget(ttl_s=10.0, min_retries_per_s=0.0, retry_ratio=0.1, clock=clock)
    attempts: dict[int, int] = {}

    async def nap(_: float) -> None:
        await asyncio.sleep(0)

    policy = RetryPolicy(max_attempts=3, budget=budget, clock=clock, async_sleep=nap)

    async def call(i: int) -> int:
        attempts[i] = attempts.get(i, 0) + 1
        await asyncio.sleep(0)
        if attempts[i] < 2:
            raise Down
        return i

    async def main() -> list[object]:
        return await asyncio.gather(
            *(policy.call_async(call, i) for i in range(100)), return_exceptions=True
        )

    results = asyncio.run(main())
    succeeded = [r for r in results if isinstance(r, int)]
    assert len(succeeded) == 10  # 100 requests x 10% = 10 retries
    assert all(attempts[i] == 2 for i in succeeded)
    assert sum(isinstance(r, Down) for r in results) == 90
    assert sum(attempts.values()) == 110


def test_refusals_are_counted_in_prometheus() -> None:
    registry = CollectorRegistry()
    metrics = RetryMetrics(registry)
    budget = RetryBudget(min_retries_per_s=0.0, clock=lambda: 0.0, name="llm", metrics=metrics)
    budget.deposit()
    assert not budget.try_withdraw()  # 1 request x 20% < 1 retry
    assert (
        registry.get_sample_value("fleetwatch_retry_budget_refusals_total", {"budget": "llm"})
        == 1.0
    )
    assert registry.get_sample_value("fleetwatch_retry_budget_balance", {"budget": "llm"}) == 0.2


@pytest.mark.parametrize(
    ("field", "value"),
    [("ttl_s", 0.0), ("retry_ratio", 0.0), ("min_retries_per_s", -1.0), ("slices", 0)],
)
def test_impossible_budget_is_refused(field: str, value: float) -> None:
    with pytest.raises(ResilienceConfigError, match=field):
        RetryBudget(**{field: value})  # type: ignore[arg-type]
