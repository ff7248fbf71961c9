"""The error rate tested by its counts: p-values equal scipy's exact tests, the level holds on
healthy fleets, and a small fleet finds a failing replica the cutoff across rates cannot."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fleetwatch.fleet.outliers import DetectorConfig, FleetTable, Side, detect
from fleetwatch.fleet.outliers.signals import signal_spec
from fleetwatch.fleet.outliers.stats.shares import EXACT_UP_TO, share_counts


def test_small_fleets_get_fishers_exact_test():
    n = np.array([2000.0, 1500.0, 1800.0, 900.0])
    k = np.array([2.0, 6.0, 200.0, 0.0])
    got = share_counts(k / n, n)
    big_k, big_n = k.sum(), n.sum()
    for i in range(4):
        table = [[k[i], n[i] - k[i]], [big_k - k[i], big_n - n[i] - (big_k - k[i])]]
        want = stats.fisher_exact(table, alternative="greater").pvalue
        assert got.p[i] == pytest.approx(want, rel=1e-9, abs=1e-300)
    assert (got.k.tolist(), got.rest_k[2]) == (k.tolist(), big_k - 200)
    assert got.test == "Fisher's exact test"


def test_large_fleets_get_the_binomial_against_the_rest():
    rng = np.random.default_rng(4)
    n = rng.integers(200, 2000, EXACT_UP_TO + 36).astype(float)
    k = rng.binomial(n.astype(int), 0.01).astype(float)
    k[7] = 60.0
    got = share_counts(k / n, n)
    for i in (0, 7, 50):
        rate = (k.sum() - k[i]) / (n.sum() - n[i])
        want = stats.binomtest(int(k[i]), int(n[i]), rate, alternative="greater").pvalue
        assert got.p[i] == pytest.approx(want, rel=1e-6)
    assert got.test == "binomial test against the rest's rate"


def test_unknown_counts_and_a_fleet_without_errors():
    got = share_counts(np.array([0.0, np.nan, 0.0, 0.0]), np.array([100.0, 100.0, np.nan, 50.0]))
    assert np.isnan(got.p[1]) and np.isnan(got.p[2])
    assert got.p[0] == 1.0 and got.p[3] == 1.0


@pytest.mark.parametrize("replicas", [3, 5, 10, 30, 200])
def test_healthy_fleets_hold_the_level(replicas):
    # Every replica fails with the same probability; its count is all the test sees. Bonferroni
    # over replicas at 1 %: at most 1 % of fleets (the exact test is conservative), within
    # binomial noise of 2,000 fleets.
    rng = np.random.default_rng(100 + replicas)
    fleets, alpha = 2000, 0.01
    n = rng.integers(300, 3000, (fleets, replicas)).astype(float)
    k = rng.binomial(n.astype(int), 0.004).astype(float)
    flagged = sum(
        bool((share_counts(k[f] / n[f], n[f]).p <= alpha / replicas).any()) for f in range(fleets)
    )
    assert stats.binomtest(flagged, fleets, alpha, alternative="greater").pvalue > 1e-3, flagged


def _fleet(rates, requests=2000):
    idx = pd.Index([f"r{i}" for i in range(len(rates))])
    return FleetTable(
        values=pd.DataFrame({"error_rate": rates}, index=idx),
        volume=pd.Series(float(requests), index=idx),
        counted=frozenset({"error_rate"}),
    )


def test_a_fleet_of_three_finds_the_failing_replica_by_its_counts():
    table = _fleet([0.001, 0.003, 0.10])
    report = detect(table)
    (finding,) = report.findings
    assert (finding.replica, finding.signal, finding.side) == ("r2", "error_rate", Side.REPLICA)
    assert any("200 of 2000 requests" in line and "Fisher" in line for line in finding.evidence)
    # Judged by the spread of three rates instead, the same fleet has no finding.
    assert detect(dataclasses.replace(table, counted=frozenset())).findings == ()


def test_a_fleet_of_three_with_like_error_counts_is_quiet():
    # 2, 6 and 9 errors in 2,000 requests each: within what one shared probability gives.
    alone = DetectorConfig(signals={"error_rate": signal_spec("error_rate").ungated()})
    assert detect(_fleet([0.001, 0.003, 0.0045]), alone).findings == ()
