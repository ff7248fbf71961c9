"""Sliding windows keep running totals equal to a naive recount, whatever the call sequence."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetwatch.resilience.breaker import CountWindow, TimeWindow
from fleetwatch.resilience.errors import ResilienceConfigError

outcomes = st.tuples(st.booleans(), st.booleans())


@given(size=st.integers(1, 8), calls=st.lists(outcomes, max_size=60))
def test_count_window_matches_last_n_calls(size: int, calls: list[tuple[bool, bool]]) -> None:
    window = CountWindow(size)
    for i, (failed, slow) in enumerate(calls):
        window.record(0.0, failed, slow)
        snap = window.snapshot(0.0)
        last = calls[max(0, i + 1 - size) : i + 1]
        assert snap.calls == len(last)
        assert snap.failed == sum(f for f, _ in last)
        assert snap.slow == sum(s for _, s in last)


@given(
    size=st.integers(1, 5),
    calls=st.lists(
        st.tuples(st.floats(0, 3, allow_nan=False), st.booleans(), st.booleans()), max_size=50
    ),
)
def test_time_window_matches_calls_of_the_last_seconds(
    size: int, calls: list[tuple[float, bool, bool]]
) -> None:
    window = TimeWindow(size)
    now = 0.0
    seen: list[tuple[int, bool, bool]] = []
    for step, failed, slow in calls:
        now += step
        second = math.floor(now)
        seen.append((second, failed, slow))
        totals = window.record(now, failed, slow)
        snap = window.snapshot(now)
        assert totals == (snap.calls, snap.failed, snap.slow)
        live = [c for c in seen if c[0] > second - size]
        assert snap.calls == len(live)
        assert snap.failed == sum(f for _, f, _ in live)
        assert snap.slow == sum(s for _, _, s in live)


def test_time_window_forgets_everything_after_a_long_gap() -> None:
    window = TimeWindow(10)
    for t in range(5):
        window.record(float(t), True, False)
    assert window.snapshot(5.0).calls == 5
    assert window.snapshot(12.5).calls == 2  # seconds 3 and 4 are still inside (3..12]
    assert window.snapshot(100.0).calls == 0


def test_rates_are_fractions() -> None:
    window = CountWindow(4)
    window.record(0, True, False)
    window.record(0, False, True)
    snap = window.snapshot(0)
    assert snap.failure_rate == 0.5 and snap.slow_call_rate == 0.5


@pytest.mark.parametrize("make", [CountWindow, TimeWindow])
def test_bad_size_is_refused(make: type) -> None:
    with pytest.raises(ResilienceConfigError, match="size"):
        make(0)
