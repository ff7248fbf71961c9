"""The project's percentile: linear interpolation between closest ranks, as numpy and Prometheus."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fleetwatch.core.stats import percentile, percentiles


def test_hand_worked_example():
    # Sorted: 10, 20, 30, 40 (n = 4). p90: rank h = 0.9 · 3 = 2.7, between x[2] = 30 and
    # x[3] = 40: 30 + 0.7 · 10 = 37. p50: h = 1.5, the mean of the middle two, 25.
    values = [40.0, 10.0, 30.0, 20.0]
    assert percentile(values, 90) == pytest.approx(37.0)
    assert percentile(values, 50) == pytest.approx(25.0)
    assert percentile(values, 0) == 10.0
    assert percentile(values, 100) == 40.0
    # p25: h = 0.75, 10 + 0.75 · 10 = 17.5 (nearest rank would say 10).
    assert percentile(values, 25) == pytest.approx(17.5)


def test_one_value_is_every_percentile():
    assert [percentile([3.5], q) for q in (0, 50, 99, 100)] == [3.5] * 4


@pytest.mark.parametrize("n", [2, 3, 10, 101, 1000])
@pytest.mark.parametrize("q", [0.0, 1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 100.0])
def test_matches_numpy_linear(n, q):
    values = np.random.default_rng(n).lognormal(0.0, 1.0, n)
    assert percentile(values, q) == float(np.percentile(values, q))
    assert percentile(values.tolist(), q) == float(np.percentile(values, q))


def test_many_at_once_match_one_at_a_time():
    values = np.random.default_rng(7).exponential(1.0, 500)
    qs = (50.0, 90.0, 99.0, 99.9)
    assert percentiles(values, qs) == tuple(percentile(values, q) for q in qs)


def test_accepts_any_iterable_of_numbers():
    assert percentile((x for x in (1, 2, 3, 4)), 50) == 2.5
    assert percentile(range(1, 6), 75) == 4.0


def test_empty_is_nan():
    assert math.isnan(percentile([], 50))
    assert all(math.isnan(x) for x in percentiles([], (50, 99)))


def test_q_outside_0_to_100_is_an_error():
    with pytest.raises(ValueError, match="percentile"):
        percentile([1.0, 2.0], 101)
    with pytest.raises(ValueError, match="percentile"):
        percentiles([1.0, 2.0], (50, -1))
