"""Robust statistics: MAD scale, floors, n-aware cutoffs, and why mean−1.9σ fails."""

from __future__ import annotations

import numpy as np
import pytest

from fleetwatch.fleet.outliers.stats.robust import (
    envoy_success_rate_threshold,
    mad_small_sample_factor,
    n_aware_cutoff,
    robust_columns,
)


def _rc(values, rel_floor=0.05, abs_floor=0.0):
    x = np.asarray(values, dtype=float).reshape(-1, 1)
    return robust_columns(x, rel_floor=np.array([rel_floor]), abs_floor=np.array([abs_floor]))


def test_envoy_mean_minus_1_9_sigma_lets_two_bad_hosts_hide_each_other():
    # Success rates of five hosts: two are failing half their requests.
    rates = np.array([50.0, 50, 100, 100, 100])
    threshold = envoy_success_rate_threshold(rates)
    assert threshold == pytest.approx(33.46, abs=0.01)
    assert not (rates < threshold).any()  # Envoy ejects neither bad host
    # The median (100) and MAD (0) are untouched by the two bad hosts: both stand out.
    rc = _rc(100 - rates, rel_floor=0.25, abs_floor=0.5)  # as error percentages
    assert rc.median[0] == 0 and rc.mad[0] == 0
    assert (rc.z[:2, 0] > rc.cutoff[0]).all()
    assert (np.abs(rc.z[2:, 0]) < 1e-9).all()


def test_mad_zero_makes_deviations_infinite_and_leaves_them_to_the_floor():
    rc = _rc([1.0, 1.0, 1.0, 1.0, 1.04])
    assert rc.mad[0] == 0
    assert rc.floored[0]
    assert rc.floor[0] == pytest.approx(0.05)
    assert rc.z[4, 0] == np.inf and (rc.z[:4, 0] == 0).all()
    assert rc.z_floor[4, 0] == pytest.approx(0.8)  # 4 % off is 0.8 floors: no outlier


def test_rounding_noise_counts_as_zero_mad():
    rc = _rc([0.005, 0.005 + 1e-16, 0.005, 0.005 - 1e-16, 0.010])
    assert rc.mad[0] == 0


def test_cutoff_is_for_the_largest_z_of_the_fleet_and_falls_as_the_fleet_grows():
    n = np.array([2, 3, 6, 10, 30, 100, 10_000])
    c = n_aware_cutoff(n, 0.01)
    assert c[0] == np.inf  # two replicas: no verdict
    assert c[1] == pytest.approx(37.1, abs=0.1)  # closed form for three (see stats)
    assert (np.diff(c[1:5]) < 0).all()  # a larger fleet pins its spread down better ...
    assert c[-1] > c[-2]  # ... until the number of replicas to correct for dominates
    assert (n_aware_cutoff(n[1:], 0.01, True) > c[1:]).all()  # two-sided is stricter


def test_small_sample_factor_inflates_mad_for_tiny_fleets():
    f = mad_small_sample_factor(np.array([3, 5, 9, 10, 1000]))
    assert f[0] == pytest.approx(1.495)
    assert f[1] == pytest.approx(1.206)
    assert f[3] == pytest.approx(10 / 9.2)
    assert f[4] == pytest.approx(1.0, abs=1e-3)


def test_missing_values_are_ignored_per_column():
    x = np.array([[1.0, np.nan], [1.1, 2.0], [0.9, 2.0], [5.0, np.nan]])
    rc = robust_columns(x, rel_floor=np.array([0.05, 0.05]), abs_floor=np.zeros(2))
    assert rc.n.tolist() == [4, 2]
    assert np.isnan(rc.z[0, 1])
    assert rc.median[1] == 2.0


def test_healthy_gaussian_fleets_cross_the_cutoff_at_the_documented_rate():
    # One signal at level 1 %: the largest z of a healthy fleet of 20 passes 1 % of the time
    # (tests/fleet/test_calibration.py measures the detector's family-wise rate).
    rng = np.random.default_rng(7)
    trials, n = 20_000, 20
    x = rng.normal(100.0, 1.0, size=(n, trials))
    rc = robust_columns(x, rel_floor=np.zeros(trials), abs_floor=np.zeros(trials), alpha=0.01)
    fleet_fp = (rc.z > rc.cutoff).any(axis=0).mean()
    assert 0.01 / 1.5 <= fleet_fp <= 0.01 * 1.5
