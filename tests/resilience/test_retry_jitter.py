"""Jitter formulas stay inside their bounds and are reproducible from a seeded random source."""

from __future__ import annotations

import itertools
import random

import pytest
import tenacity
from hypothesis import given
from hypothesis import strategies as st

from fleetwatch.resilience.errors import ResilienceConfigError
from fleetwatch.resilience.retry import (
    decorrelated_jitter_s,
    full_jitter_s,
    no_jitter_s,
    wait_decorrelated_jitter,
    wait_full_jitter,
)


def test_no_jitter_doubles_up_to_the_cap() -> None:
    assert [no_jitter_s(n, 0.5, 3.0) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert no_jitter_s(10_000, 0.5, 3.0) == 3.0


@given(seed=st.integers(0, 2**32), attempt=st.integers(1, 80), previous=st.floats(0, 100))
def test_bounds(seed: int, attempt: int, previous: float) -> None:
    rng = random.Random(seed)
    assert 0.0 <= full_jitter_s(rng, attempt, 0.5, 8.0) <= no_jitter_s(attempt, 0.5, 8.0)
    d = decorrelated_jitter_s(rng, previous, 0.5, 8.0)
    assert 0.5 <= d <= min(8.0, max(previous, 0.5) * 3)


def test_decorrelated_wait_uses_the_previous_sleep_of_its_own_call() -> None:
    sleeps: list[float] = []
    retrying = tenacity.Retrying(
        wait=wait_decorrelated_jitter(0.1, 50.0, random.Random(3)),
        stop=tenacity.stop_after_attempt(8),
        sleep=sleeps.append,
        reraise=True,
    )
    with pytest.raises(ZeroDivisionError):
        retrying(lambda: 1 / 0)
    assert len(sleeps) == 7
    for before, after in itertools.pairwise(sleeps):
        assert 0.1 <= after <= max(before, 0.1) * 3


def test_seeded_waits_repeat() -> None:
    def run() -> list[float]:
        sleeps: list[float] = []
        with pytest.raises(tenacity.RetryError):
            tenacity.Retrying(
                wait=wait_full_jitter(0.5, 8.0, random.Random(42)),
                stop=tenacity.stop_after_attempt(5),
                sleep=sleeps.append,
            )(lambda: 1 / 0)
        return sleeps

    assert run() == run()


def test_bad_backoff_is_refused() -> None:
    with pytest.raises(ResilienceConfigError, match="cap"):
        wait_full_jitter(2.0, 1.0)
