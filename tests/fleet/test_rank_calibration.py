"""The per-request rank test: its p-values against scipy, its family-wise false-alarm rate on
healthy fleets whose requests are drawn whole, and its power where the summaries have none.

Healthy fleets (``fleetwatch.scenarios.healthy_tables.request_values``): every replica's requests
from one distribution (lognormal, bimodal, heavy-tailed), three latency signals with requests,
seven more as per-replica summaries. The detector's composition is scored as it runs: the
signals with requests judged by each replica's requests against the rest's at their share of the
1 % family-wise level (Bonferroni over replicas), the others by the cutoff across replicas. Thousands of fleets are scored as the columns of one
matrix. References owe nothing to the module: scipy's ``mannwhitneyu`` and binomial test.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fleetwatch.fleet.outliers import DetectorConfig, FleetTable, Side, detect, table_from_records
from fleetwatch.fleet.outliers.stats.ranks import p_values, rank_z, rank_z_columns
from fleetwatch.fleet.outliers.stats.robust import signal_level
from fleetwatch.fleet.outliers.stats.score import score_matrix
from fleetwatch.scenarios.healthy_tables import (
    REQUEST_SHAPES,
    SAMPLED,
    SIGNALS,
    request_fleets,
    request_values,
)
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet

ALPHA = DetectorConfig().alpha
NAMES = list(SIGNALS)
K = len(NAMES)
COLS = [NAMES.index(s) for s in SAMPLED]


def _specs(floors: bool):
    specs = [DetectorConfig().spec(s) for s in NAMES]
    return specs if floors else [s.ungated() for s in specs]


def _fleets(fleets: int, n: int, per: int, shape: str, seed: int, slow: float = 1.0):
    return request_fleets(fleets, n, per, shape, seed=seed, slow=slow)


def _flags(fleets: int, n: int, per: int, shape: str, seed: int, floors: bool, slow: float = 1.0):
    x, se, p = _fleets(fleets, n, per, shape, seed, slow)
    level = signal_level(ALPHA, K)
    _, _, flag = score_matrix(x, _specs(floors) * fleets, level, se if floors else None, p)
    return flag.reshape(n, fleets, K)


# The p-values against scipy.


@pytest.mark.parametrize("ties", [False, True])
def test_rank_p_values_equal_scipys_mann_whitney(ties):
    rng = np.random.default_rng(1)
    x = rng.lognormal(size=400)
    if ties:
        x = np.round(x, 1)  # many tied groups: the tie-corrected variance
    g = rng.integers(0, 5, x.size)
    z, count = rank_z(x, g, 5)
    assert count.tolist() == np.bincount(g).tolist()
    for i in range(5):
        a, b = x[g == i], x[g != i]
        two = stats.mannwhitneyu(a, b, method="asymptotic").pvalue
        assert p_values(z[i : i + 1], 0.0)[0] == pytest.approx(two, rel=1e-9)
        for sign, alt in ((1.0, "greater"), (-1.0, "less")):
            ref = stats.mannwhitneyu(a, b, alternative=alt, method="asymptotic").pvalue
            if ref < 0.5:
                assert p_values(z[i : i + 1], sign)[0] == pytest.approx(ref, rel=1e-9)


def test_rank_p_values_are_uniform_on_healthy_fleets():
    samples, groups = request_values(400, 10, 30, "heavy", seed=2)
    p = p_values(rank_z_columns(samples, groups, 10), 1.0).ravel()
    assert stats.kstest(p, "uniform").pvalue > 1e-3
    # The lower tail, where decisions are made: as many p ≤ 1 % as a binomial count allows.
    hits = int((p <= 0.01).sum())
    assert stats.binomtest(hits, p.size, 0.01).pvalue > 1e-3, hits / p.size


# The family-wise false-alarm rate.


@pytest.mark.parametrize("shape", REQUEST_SHAPES)
@pytest.mark.parametrize("n", [3, 5, 10, 30])
def test_the_statistical_tests_alone_hold_the_family_wise_level(n, shape):
    fleets = 8000 if n <= 10 else 3000
    flag = _flags(fleets, n, 20, shape, seed=100 * n + REQUEST_SHAPES.index(shape), floors=False)
    rate = float(flag.any(axis=(0, 2)).mean())
    assert ALPHA / 1.5 <= rate <= 1.5 * ALPHA, rate


def test_among_1000_replicas_the_rank_test_holds_its_share_of_the_level():
    # 200 fleets cannot resolve 1 % by themselves; each cell's p-value is checked instead: the
    # Bonferroni share of the level per replica is met when p-values are uniform.
    samples, groups = request_values(60, 1000, 12, "lognormal", seed=3)
    p = p_values(rank_z_columns(samples, groups, 1000), 1.0).ravel()
    hits = int((p <= 1e-3).sum())
    assert stats.binomtest(hits, p.size, 1e-3, alternative="greater").pvalue > 1e-3, hits
    flag = _flags(200, 1000, 12, "lognormal", seed=4, floors=False)
    assert flag.any(axis=(0, 2)).mean() <= 1.5 * ALPHA


@pytest.mark.parametrize("n", [3, 5, 10, 30, 1000])
def test_healthy_fleets_get_no_finding_with_the_floors_on(n):
    # 50 requests a replica, the detector's own minimum (DetectorConfig.min_requests); 20 among
    # 1,000 replicas (20,000 requests a fleet) to keep the sort small.
    per = 20 if n == 1000 else 50
    rates = {}
    for shape in REQUEST_SHAPES:
        flag = _flags(200, n, per, shape, seed=7 * n + REQUEST_SHAPES.index(shape), floors=True)
        rates[shape] = float(flag.any(axis=(0, 2)).mean())
    assert max(rates.values()) <= ALPHA, rates


# Planted faults: found with the floors on.


@pytest.mark.parametrize("shape", REQUEST_SHAPES)
def test_three_replicas_with_one_2x_slower_are_found_from_their_requests(shape):
    flag = _flags(200, 3, 50, shape, seed=30, floors=True, slow=2.0)
    assert flag[0][:, COLS].all(axis=1).mean() >= 0.99
    assert not flag[1:].any()


@pytest.mark.parametrize("shape", REQUEST_SHAPES)
def test_four_replicas_with_one_5x_slower_are_found(shape):
    # The demo's fleet: four replicas, one slowed 5x.
    flag = _flags(200, 4, 50, shape, seed=31, floors=True, slow=5.0)
    assert flag[0][:, COLS].all()
    assert not flag[1:].any()


def test_one_replica_1_5x_slower_among_1000_is_found():
    # 200 requests a replica: at 1 % over 10 signals × 1,000 replicas each test runs at 1e-6.
    flag = _flags(10, 1000, 200, "lognormal", seed=32, floors=True, slow=1.5)
    assert flag[0][:, COLS].all()
    assert not flag[1:].any()


def test_two_slow_replicas_of_five_do_not_mask_each_other():
    flag = _flags(200, 5, 50, "lognormal", seed=33, floors=True)
    samples, groups = request_values(200, 5, 50, "lognormal", seed=33)
    samples[groups <= 1] *= 2.0
    p = p_values(rank_z_columns(samples, groups, 5), 1.0)
    level = signal_level(ALPHA, K) / 5
    assert (p[:2] <= level).mean() >= 0.99
    assert not (p[2:] <= level).any()
    assert not flag.any()


def test_records_of_three_replicas_with_one_2x_slower_blame_it_through_detect():
    df = synthetic_fleet(3, 150, seed=5, slowdown={2: 2.0})
    report = detect(table_from_records(df), DetectorConfig(min_requests=30))
    blamed = {f.replica for f in report.findings if f.side is Side.REPLICA}
    assert blamed == {"replica-2"}, report.render()
    f = next(f for f in report.findings if f.signal == "tpot")
    assert any("Mann–Whitney" in e for e in f.evidence)


def test_a_fleet_slowed_together_by_its_host_gets_no_finding():
    # Every replica's requests shifted alike (one busy machine): compared with each other,
    # nobody stands out.
    df = synthetic_fleet(4, 150, seed=6, slowdown={i: 3.0 for i in range(4)})
    report = detect(table_from_records(df), DetectorConfig(min_requests=30))
    assert report.verdict == "no outlier", report.render()


def test_cpu_wait_shared_by_every_replica_does_not_excuse_a_slow_one():
    df = synthetic_fleet(4, 150, seed=7, slowdown={1: 4.0})
    table = table_from_records(df)
    wait = pd.Series({f"replica-{i}": 0.4 for i in range(4)})
    report = detect(FleetTable(**{**table.__dict__, "cpu_wait": wait}), DetectorConfig())
    f = next(f for f in report.findings if f.signal == "tpot")
    assert (f.replica, f.side) == ("replica-1", Side.REPLICA), report.render()
    assert any("not why this replica stands out" in e for e in f.evidence)
