"""The lock-free success path: the slow-call boundary, stale successes, and the exactness guarantee
of ``fleetwatch.resilience.breaker.machine`` (the breaker trips on exactly the outcome that crosses a
threshold, however many threads race) checked against the window the breaker freezes on opening."""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry

from fleetwatch.resilience.breaker import (
    BreakerConfig,
    BreakerMetrics,
    CallNotPermittedError,
    CircuitBreaker,
    State,
    WindowKind,
)


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Boom(Exception):
    pass


@pytest.fixture
def fast_switching() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def test_a_call_exactly_as_long_as_the_threshold_is_not_slow() -> None:
    # resilience4j: slow means strictly longer than slowCallDurationThreshold
    config = BreakerConfig(
        window_size=4, minimum_calls=4, slow_call_duration_s=5.0, slow_call_rate_threshold=0.5
    )
    breaker = CircuitBreaker("b", config, clock=FakeClock())
    for _ in range(4):
        breaker.record_success(breaker.acquire(), 5.0)
    assert breaker.state is State.CLOSED
    assert breaker.snapshot().slow == 0
    breaker.record_success(breaker.acquire(), 5.000001)
    breaker.record_error(breaker.acquire(), 5.000001, Boom())
    assert breaker.state is State.OPEN  # 2 of 4 slow


def test_a_call_through_the_wrapper_exactly_at_the_threshold_is_not_slow() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(
        "b", BreakerConfig(window_size=2, minimum_calls=2, slow_call_duration_s=2.0), clock=clock
    )

    @breaker
    def takes_two_seconds() -> None:
        clock.t += 2.0

    takes_two_seconds()
    takes_two_seconds()
    assert breaker.snapshot().slow == 0


@pytest.mark.parametrize("kind", list(WindowKind))
def test_a_success_that_outlives_its_epoch_is_not_counted(kind: WindowKind) -> None:
    breaker = CircuitBreaker(
        "b", BreakerConfig(window_kind=kind, window_size=10), clock=FakeClock()
    )

    @breaker
    def flip() -> str:
        breaker.transition_to(State.FORCED_OPEN)
        breaker.transition_to(State.CLOSED)
        return "ok"

    assert flip() == "ok"
    assert breaker.snapshot().calls == 0  # its permit is from the epoch before the flips


def test_successes_that_reach_minimum_calls_trip_an_unsafe_window() -> None:
    breaker = CircuitBreaker("b", BreakerConfig(window_size=10, minimum_calls=4))
    for _ in range(3):
        with pytest.raises(Boom):
            breaker.call(_raise)
    breaker.call(_ok)  # 4 calls, 3 failed: the fourth, a success, trips it
    assert breaker.state is State.OPEN


def test_time_window_success_after_expiry_is_judged() -> None:
    clock = FakeClock()
    config = BreakerConfig(window_kind=WindowKind.TIME, window_size=10, minimum_calls=4)
    breaker = CircuitBreaker("b", config, clock=clock)
    for _ in range(10):
        breaker.call(_ok)
    clock.t += 5
    for _ in range(3):
        with pytest.raises(Boom):
            breaker.call(_raise)
    assert breaker.state is State.CLOSED  # 3 of 13
    clock.t += 5.5  # the successes leave the window, the failures stay
    breaker.call(_ok)
    assert breaker.state is State.OPEN  # 3 of 4
    assert (breaker.snapshot().calls, breaker.snapshot().failed) == (4, 3)


def _ok() -> str:
    return "ok"


def _raise() -> None:
    raise Boom


def _hammer(breaker: CircuitBreaker, threads: int, failure_odds: float, seed: int) -> int:
    """Call through ``breaker`` from ``threads`` threads until it refuses; return the calls made."""
    start = threading.Barrier(threads, timeout=30)
    made = [0] * threads

    def worker(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        start.wait()
        while True:
            fn: Callable[[], object] = _raise if rng.random() < failure_odds else _ok
            try:
                breaker.call(fn)
            except Boom:
                pass
            except CallNotPermittedError:
                return
            made[i] += 1

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=60)
    return sum(made)


@pytest.mark.parametrize("round_", range(8))
def test_a_full_window_trips_on_exactly_the_crossing_failure(
    round_: int, fast_switching: None
) -> None:
    # A full count window judged below 50% gains at most one failure per outcome, so a breaker that
    # trips on the crossing outcome freezes with exactly 50 failures of 100; one that trips K
    # outcomes late could hold up to 50 + K.
    breaker = CircuitBreaker("b", BreakerConfig(window_size=100, minimum_calls=100))
    for _ in range(100):
        breaker.call(_ok)
    _hammer(breaker, threads=8, failure_odds=0.3, seed=round_)
    assert breaker.state is State.OPEN
    snap = breaker.snapshot()
    assert (snap.calls, snap.failed) == (100, 50)


@pytest.mark.parametrize("kind", list(WindowKind))
@pytest.mark.parametrize("round_", range(6))
def test_successes_racing_to_minimum_calls_trip_on_the_crossing_one(
    kind: WindowKind, round_: int, fast_switching: None
) -> None:
    # 30 failures, then only successes from 8 threads: the 10th success brings the window to
    # minimum_calls (40) at 75% failed, and must trip it. Calls admitted before that verdict may
    # still finish, one per other thread: at most 10 + 7 calls complete. A breaker that judged
    # clean successes late (or never, with no failure to come) would let hundreds through.
    config = BreakerConfig(window_kind=kind, window_size=200, minimum_calls=40)
    breaker = CircuitBreaker("b", config)
    for _ in range(30):
        with pytest.raises(Boom):
            breaker.call(_raise)
    threads, start = 8, threading.Barrier(8, timeout=30)
    made = [0] * threads

    def worker(i: int) -> None:
        start.wait()
        for _ in range(200):
            try:
                breaker.call(_ok)
            except CallNotPermittedError:
                return
            made[i] += 1

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=60)
    assert breaker.state is State.OPEN
    snap = breaker.snapshot()
    assert (snap.calls, snap.failed) == (40, 30)
    assert 10 <= sum(made) <= 10 + threads - 1


def test_concurrent_successes_are_all_counted(fast_switching: None) -> None:
    registry = CollectorRegistry()
    breaker = CircuitBreaker(
        "b", BreakerConfig(window_size=50_000), metrics=BreakerMetrics(registry)
    )
    wrapped = breaker(_ok)
    per_thread = 2_000

    def worker() -> None:
        for _ in range(per_thread):
            wrapped()

    pool = [threading.Thread(target=worker) for _ in range(8)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=60)
    assert breaker.snapshot().calls == 8 * per_thread
    labels = {"breaker": "b", "outcome": "success"}
    assert registry.get_sample_value("fleetwatch_circuit_breaker_calls_total", labels) == 16_000
    # reading the counters twice does not move them
    assert registry.get_sample_value("fleetwatch_circuit_breaker_calls_total", labels) == 16_000
