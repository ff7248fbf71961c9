"""Circuit breaker behaviour: rate thresholds, wait in open, probes, special states, wrappers, metrics."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from fleetwatch.resilience.breaker import (
    BreakerConfig,
    BreakerEvent,
    BreakerMetrics,
    CallNotPermittedError,
    CircuitBreaker,
    EventKind,
    State,
    WindowKind,
)
from fleetwatch.resilience.errors import ResilienceConfigError


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Boom(Exception):
    pass


def make(clock: FakeClock, **overrides: object) -> CircuitBreaker:
    settings: dict[str, object] = dict(
        window_size=10,
        minimum_calls=4,
        wait_in_open_s=30.0,
        half_open_calls=2,
        slow_call_duration_s=5.0,
    )
    settings.update(overrides)
    return CircuitBreaker("b", BreakerConfig(**settings), clock=clock)  # type: ignore[arg-type]


def fail(breaker: CircuitBreaker, n: int = 1) -> None:
    for _ in range(n):
        breaker.record_error(breaker.acquire(), 0.01, Boom())


def succeed(breaker: CircuitBreaker, n: int = 1, duration: float = 0.01) -> None:
    for _ in range(n):
        breaker.record_success(breaker.acquire(), duration)


def test_stays_closed_below_minimum_calls() -> None:
    breaker = make(FakeClock())
    fail(breaker, 3)
    assert breaker.state is State.CLOSED


def test_opens_when_failure_rate_reaches_threshold() -> None:
    breaker = make(FakeClock())
    succeed(breaker, 2)
    fail(breaker, 1)
    assert breaker.state is State.CLOSED
    fail(breaker, 1)  # 2 of 4 = 50%
    assert breaker.state is State.OPEN
    with pytest.raises(CallNotPermittedError, match="open"):
        breaker.acquire()


def test_opens_on_slow_call_rate() -> None:
    breaker = make(FakeClock(), slow_call_rate_threshold=0.75)
    succeed(breaker, 3, duration=6.0)
    succeed(breaker, 1)
    assert breaker.state is State.OPEN


def test_half_open_after_wait_then_closes_on_good_probes() -> None:
    clock = FakeClock()
    breaker = make(clock)
    fail(breaker, 4)
    clock.t += 29.9
    assert breaker.try_acquire() is None
    clock.t += 0.1
    first = breaker.acquire()
    assert breaker.state is State.HALF_OPEN
    second = breaker.acquire()
    assert breaker.try_acquire() is None  # exactly two probes
    breaker.record_success(first, 0.1)
    assert breaker.state is State.HALF_OPEN
    breaker.record_success(second, 0.1)
    assert breaker.state is State.CLOSED
    assert breaker.snapshot().calls == 0  # a fresh window after closing


def test_bad_probes_reopen_and_restart_the_wait() -> None:
    clock = FakeClock()
    breaker = make(clock)
    fail(breaker, 4)
    clock.t += 30
    succeed(breaker)
    fail(breaker)  # 1 of 2 probes failed = 50%
    assert breaker.state is State.OPEN
    clock.t += 29
    assert breaker.try_acquire() is None


def test_ignored_probe_gives_its_permit_back() -> None:
    clock = FakeClock()
    breaker = make(clock, ignore_exception=lambda e: isinstance(e, KeyError))
    fail(breaker, 4)
    clock.t += 30
    a, b = breaker.acquire(), breaker.acquire()
    breaker.record_error(a, 0.1, KeyError("x"))
    c = breaker.acquire()
    breaker.record_success(b, 0.1)
    breaker.record_success(c, 0.1)
    assert breaker.state is State.CLOSED


def test_cancellation_is_ignored_not_a_failure() -> None:
    breaker = make(FakeClock())
    for _ in range(10):
        breaker.record_error(breaker.acquire(), 0.1, asyncio.CancelledError())
    assert breaker.state is State.CLOSED
    assert breaker.snapshot().calls == 0


def test_unrecorded_exceptions_count_as_success() -> None:
    breaker = make(FakeClock(), record_exception=lambda e: isinstance(e, Boom))
    for _ in range(10):
        breaker.record_error(breaker.acquire(), 0.1, ValueError())
    assert breaker.state is State.CLOSED
    assert breaker.snapshot().calls == 10 and breaker.snapshot().failed == 0


def test_result_predicate_marks_failures() -> None:
    breaker = make(FakeClock(), record_result=lambda r: r == 503)
    for _ in range(4):
        breaker.record_success(breaker.acquire(), 0.1, 503)
    assert breaker.state is State.OPEN


def test_max_wait_in_half_open_reopens() -> None:
    clock = FakeClock()
    breaker = make(clock, max_wait_in_half_open_s=5.0)
    fail(breaker, 4)
    clock.t += 30
    breaker.acquire()
    clock.t += 5
    assert breaker.try_acquire() is None
    assert breaker.state is State.OPEN


def test_outcome_from_an_earlier_state_does_not_judge_the_probes() -> None:
    clock = FakeClock()
    breaker = make(clock)
    slow_permit = breaker.acquire()  # started while CLOSED
    fail(breaker, 4)
    clock.t += 30
    probe = breaker.acquire()
    breaker.record_error(slow_permit, 31.0, Boom())  # stale: ignored by the probe window
    breaker.record_success(probe, 0.1)
    assert breaker.state is State.HALF_OPEN
    succeed(breaker)
    assert breaker.state is State.CLOSED


def test_automatic_transition_runs_on_the_scheduler() -> None:
    scheduled: list[tuple[float, Callable[[], None]]] = []
    breaker = CircuitBreaker(
        "b",
        BreakerConfig(
            window_size=4, minimum_calls=4, wait_in_open_s=7.0, automatic_transition=True
        ),
        clock=FakeClock(),
        scheduler=lambda delay, cb: scheduled.append((delay, cb)),
    )
    fail(breaker, 4)
    assert [d for d, _ in scheduled] == [7.0]
    scheduled[0][1]()
    assert breaker.state is State.HALF_OPEN
    scheduled[0][1]()  # a late timer for an old epoch does nothing
    assert breaker.state is State.HALF_OPEN


@pytest.mark.parametrize(
    ("state", "permitted", "records"),
    [
        (State.DISABLED, True, False),
        (State.FORCED_OPEN, False, False),
        (State.METRICS_ONLY, True, True),
    ],
)
def test_special_states(state: State, permitted: bool, records: bool) -> None:
    breaker = make(FakeClock())
    breaker.transition_to(state)
    assert (breaker.try_acquire() is not None) is permitted
    if permitted:
        fail(breaker, 20)
        assert breaker.state is state  # never trips by itself
        assert (breaker.snapshot().calls > 0) is records


def test_metrics_only_reports_rate_exceeded_once_per_crossing() -> None:
    events: list[BreakerEvent] = []
    breaker = make(FakeClock())
    breaker.transition_to(State.METRICS_ONLY)
    breaker.add_listener(events.append)
    fail(breaker, 8)
    kinds = [e.kind for e in events]
    assert kinds.count(EventKind.FAILURE_RATE_EXCEEDED) == 1
    assert kinds.count(EventKind.ERROR) == 8


def test_time_window_forgets_old_failures() -> None:
    clock = FakeClock()
    breaker = make(clock, window_kind=WindowKind.TIME, window_size=10, minimum_calls=4)
    fail(breaker, 3)
    clock.t += 11
    succeed(breaker, 1)
    fail(breaker, 1)
    assert breaker.state is State.CLOSED
    assert breaker.snapshot().calls == 2


def test_decorator_sync_and_async() -> None:
    breaker = make(FakeClock())

    @breaker
    def double(x: int) -> int:
        return 2 * x

    @breaker
    async def triple(x: int) -> int:
        return 3 * x

    @breaker
    def broken() -> None:
        raise Boom

    assert double(2) == 4
    assert asyncio.run(triple(2)) == 6
    for _ in range(2):
        with pytest.raises(Boom):
            broken()
    assert breaker.state is State.OPEN  # 2 of 4 failed
    with pytest.raises(CallNotPermittedError):
        double(1)


def test_guard_context_managers() -> None:
    breaker = make(FakeClock(), record_result=lambda r: r == "bad")
    with breaker.guard() as call:
        call.result("bad")
    with pytest.raises(Boom), breaker.guard():
        raise Boom

    async def go() -> None:
        async with breaker.guard() as call:
            call.result("ok")

    asyncio.run(go())
    snap = breaker.snapshot()
    assert (snap.calls, snap.failed) == (3, 2)


def test_lock_is_not_held_across_the_call() -> None:
    breaker = make(FakeClock())
    inside = threading.Barrier(2, timeout=10)

    @breaker
    def meet() -> None:
        inside.wait()  # both threads must be inside the call at once

    threads = [threading.Thread(target=meet) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert breaker.snapshot().calls == 2


def test_listener_errors_never_reach_the_caller() -> None:
    breaker = make(FakeClock())

    def bad(_: BreakerEvent) -> None:
        raise RuntimeError("listener bug")

    breaker.add_listener(bad)
    succeed(breaker, 2)
    fail(breaker, 2)
    assert breaker.state is State.OPEN


def test_events_for_a_trip() -> None:
    events: list[BreakerEvent] = []
    breaker = CircuitBreaker(
        "b",
        BreakerConfig(window_size=2, minimum_calls=2),
        clock=FakeClock(),
        listeners=[events.append],
    )
    fail(breaker, 2)
    assert breaker.try_acquire() is None
    kinds = [e.kind for e in events]
    assert kinds == [
        EventKind.ERROR,
        EventKind.ERROR,
        EventKind.FAILURE_RATE_EXCEEDED,
        EventKind.STATE_TRANSITION,
        EventKind.NOT_PERMITTED,
    ]
    transition = events[3]
    assert (transition.from_state, transition.to_state) == (State.CLOSED, State.OPEN)


def test_prometheus_metrics() -> None:
    registry = CollectorRegistry()
    metrics = BreakerMetrics(registry)
    breaker = CircuitBreaker(
        "llm",
        BreakerConfig(window_size=4, minimum_calls=4, slow_call_duration_s=1.0),
        clock=FakeClock(),
        metrics=metrics,
    )
    other = CircuitBreaker("db", clock=FakeClock(), metrics=metrics)
    succeed(other)
    succeed(breaker, 1, duration=2.0)
    fail(breaker, 3)
    assert breaker.try_acquire() is None

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("fleetwatch_circuit_breaker_state", breaker="llm", state="open") == 1.0
    assert value("fleetwatch_circuit_breaker_state", breaker="llm", state="closed") == 0.0
    assert value("fleetwatch_circuit_breaker_calls_total", breaker="llm", outcome="success") == 1.0
    assert value("fleetwatch_circuit_breaker_calls_total", breaker="llm", outcome="failure") == 3.0
    assert (
        value("fleetwatch_circuit_breaker_slow_calls_total", breaker="llm", outcome="success")
        == 1.0
    )
    assert value("fleetwatch_circuit_breaker_not_permitted_calls_total", breaker="llm") == 1.0
    assert (
        value("fleetwatch_circuit_breaker_transitions_total", breaker="llm", to_state="open") == 1.0
    )
    assert value("fleetwatch_circuit_breaker_calls_total", breaker="db", outcome="success") == 1.0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("failure_rate_threshold", 0.0),
        ("failure_rate_threshold", 50.0),
        ("window_size", 0),
        ("half_open_calls", 0),
        ("wait_in_open_s", -1.0),
        ("slow_call_duration_s", 0.0),
    ],
)
def test_impossible_config_is_refused(field: str, value: float) -> None:
    with pytest.raises(ResilienceConfigError, match=field):
        BreakerConfig(**{field: value})  # type: ignore[arg-type]
