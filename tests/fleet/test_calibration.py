"""The outlier test's false-alarm rate, measured, and its cutoffs against independent references.

The documented level (``fleetwatch.fleet.outliers.stats.robust``): 1 % family-wise per report, over signals ×
replicas × passes. It is measured here on simulated healthy fleets
(``fleetwatch.scenarios.healthy_tables``), thousands at a time as the columns of one matrix,
scored by the detector's own vectorised scoring; a sample also goes through ``detect`` to show it
applies the same rule. The references owe nothing to the module's simulated table: Grubbs'
critical values from scipy's t distribution (n = 3, where every scale-free test is the same
test), the normal/Bonferroni limit (large n), and scipy's binomial and Kolmogorov–Smirnov tests
against fresh simulations.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fleetwatch.fleet.outliers import DetectorConfig, FleetTable, detect
from fleetwatch.fleet.outliers.signals import SignalSpec
from fleetwatch.fleet.outliers.stats.robust import (
    MAD_TO_SIGMA,
    mad_small_sample_factor,
    max_z_sf,
    n_aware_cutoff,
    robust_columns,
    signal_level,
)
from fleetwatch.fleet.outliers.stats.score import score_matrix
from fleetwatch.scenarios.healthy_tables import SHAPES, SIGNALS, as_columns, fleet_values

ALPHA = DetectorConfig().alpha
NAMES = list(SIGNALS)
K = len(NAMES)


def _specs(floors: bool) -> list[SignalSpec]:
    specs = [DetectorConfig().spec(s) for s in NAMES]
    return specs if floors else [s.ungated() for s in specs]


def _config(floors: bool, alpha: float = ALPHA) -> DetectorConfig:
    # The normal reference, which the rest build on (``noise_shape="any"``: test_noise_shape).
    return DetectorConfig(
        alpha=alpha, signals={s.name: s for s in _specs(floors)}, noise_shape="normal"
    )


def _scored(values: np.ndarray, floors: bool, alpha: float = ALPHA, noise_shape: str = "normal"):
    """Oriented z, per-column n and the finding mask, each shaped (replicas, fleets, signals)."""
    n, f, k = values.shape
    level = signal_level(alpha, k)
    specs = _specs(floors) * f
    rc, oz, flag = score_matrix(as_columns(values), specs, level, noise_shape=noise_shape)
    return oz.reshape(n, f, k), rc.n.reshape(f, k), flag.reshape(n, f, k)


def _largest_z(values: np.ndarray, chunk: int = 500) -> tuple[np.ndarray, np.ndarray]:
    """Per fleet and signal: the largest oriented robust z (|z| for signals bad either way) and
    the number of replicas, each shaped (fleets, signals); ``chunk`` fleets at a time."""
    n, f, k = values.shape
    sign = np.array([{"higher": 1.0, "lower": -1.0, "both": 0.0}[s.worse] for s in _specs(False)])
    oz, size = np.empty((f, k)), np.empty((f, k))
    for a in range(0, f, chunk):
        x = as_columns(values[:, a : a + chunk])
        m = x.shape[1]
        rc = robust_columns(x, rel_floor=np.zeros(m), abs_floor=np.zeros(m))
        z = rc.z.reshape(n, -1, k)
        oz[a : a + chunk] = np.where(sign == 0.0, np.abs(z), sign * z).max(axis=0)
        size[a : a + chunk] = rc.n.reshape(-1, k)
    return oz, size


def _family_rate(largest: tuple[np.ndarray, np.ndarray], alpha: float) -> float:
    """Share of fleets with any finding from the statistical test alone at family-wise alpha."""
    oz, n = largest
    two = [s.worse == "both" for s in _specs(False)]
    level = signal_level(alpha, oz.shape[1])
    cut = np.stack([n_aware_cutoff(n[:, j], level, two[j]) for j in range(K)], axis=1)
    return float((oz > cut).any(axis=1).mean())


def _independent(alpha: float, k: int = K) -> float:
    """Family-wise rate of Bonferroni over k independent signals, each exactly at alpha / k."""
    return 1.0 - (1.0 - alpha / k) ** k


# The false-alarm rate on healthy fleets.


@pytest.mark.parametrize("n", [3, 5, 10, 30])
def test_the_statistical_test_alone_holds_its_family_wise_level(n):
    largest = _largest_z(fleet_values(20_000, n, "normal", seed=100 + n))
    rate = _family_rate(largest, ALPHA)
    assert ALPHA / 1.5 <= rate <= 1.5 * ALPHA, rate
    # At 10 % the count is large enough for a sharp check of the cutoffs at 1 % per signal.
    rate10 = _family_rate(largest, 0.1)
    assert stats.binomtest(round(rate10 * 20_000), 20_000, _independent(0.1)).pvalue > 1e-3, rate10


def test_the_statistical_test_alone_holds_its_level_among_1000_replicas():
    largest = _largest_z(fleet_values(2_000, 1000, "normal", seed=1000))
    rate = _family_rate(largest, ALPHA)
    assert ALPHA / 1.5 <= rate <= 1.5 * ALPHA, rate
    rate10 = _family_rate(largest, 0.1)
    assert stats.binomtest(round(rate10 * 2_000), 2_000, _independent(0.1)).pvalue > 1e-3, rate10


@pytest.mark.parametrize("noise_shape", ["any", "normal"])
def test_healthy_fleets_almost_never_get_a_finding_with_the_floors_and_gates_on(noise_shape):
    rates = {}
    for n in (3, 5, 10, 30, 1000):
        for shape in SHAPES:
            values = fleet_values(200, n, shape, seed=7 * n)
            _, _, flag = _scored(values, floors=True, noise_shape=noise_shape)
            rates[(n, shape)] = float(flag.any(axis=(0, 2)).mean())
    assert max(rates.values()) <= 0.01, rates


def _detect(values: np.ndarray, f: int, cfg: DetectorConfig):
    idx = pd.Index([f"r{i}" for i in range(values.shape[0])])
    table = FleetTable(
        values=pd.DataFrame(values[:, f, :], index=idx, columns=NAMES),
        volume=pd.Series(1000.0, index=idx),
    )
    return detect(table, cfg)


@pytest.mark.parametrize(
    ("n", "shape", "floors", "alpha"),
    [(5, "normal", False, 0.2), (30, "heavy", True, ALPHA), (10, "lognormal", False, 0.05)],
)
def test_detect_applies_the_same_rule_as_the_vectorised_scoring(n, shape, floors, alpha):
    # The first pass is the vectorised rule; later passes run only once something was found.
    values = fleet_values(60, n, shape, seed=3)
    _, _, flag = _scored(values, floors, alpha)
    cfg = _config(floors, alpha)
    for f in range(values.shape[1]):
        report = _detect(values, f, cfg)
        first = {(x.replica, x.signal) for x in report.findings if x.found_in == "fleet"}
        rows, cols = np.nonzero(flag[:, f, :])
        assert first == {(f"r{i}", NAMES[j]) for i, j in zip(rows, cols, strict=True)}
        assert bool(report.findings) == bool(flag[:, f, :].any())


def test_passes_after_a_real_fault_keep_the_healthy_replicas_near_the_level():
    # Strong control: r0's GPU is throttled (blamed replica-side), so the detector re-judges the
    # other nine without it. How often is a healthy replica flagged, in any pass?
    alpha, n, fleets = 0.1, 10, 200
    values = fleet_values(fleets, n, "normal", seed=11)
    values[0, :, NAMES.index("sm_clock_ratio")] *= 0.6
    values[0, :, NAMES.index("tpot")] *= 2.0
    cfg = _config(False, alpha)
    false = unmasked = 0
    for f in range(fleets):
        report = _detect(values, f, cfg)
        assert any(x.replica == "r0" and x.signal == "tpot" for x in report.findings)
        false += any(x.replica != "r0" for x in report.findings)
        unmasked += any(x.found_in == "unmasked" for x in report.findings)
    assert unmasked > 0
    assert false / fleets <= 1.5 * alpha, false / fleets


# The cutoffs against independent references.


@pytest.mark.parametrize("level", [0.05, 0.01, 1e-3, 1e-4, 1e-6])
@pytest.mark.parametrize("two_sided", [False, True])
def test_three_replicas_cutoff_is_grubbs_critical_value(level, two_sided):
    # With three normal values every scale-free statistic is a function of one angle, so the MAD
    # test at a level is Grubbs' test at that level. Grubbs' critical value comes from the t
    # distribution (scipy): G = (n − 1)/√n · √(t² / (n − 2 + t²)), t = t.isf(level / (s·n), n − 2).
    r = n_aware_cutoff(np.array([3]), level, two_sided)[0] * MAD_TO_SIGMA * 1.495
    g_ours = (1 + 2 * r) / (math.sqrt(3) * math.sqrt(1 + r + r * r))
    t = stats.t.isf(level / ((2 if two_sided else 1) * 3), 1)
    g_grubbs = 2 / math.sqrt(3) * math.sqrt(t * t / (1 + t * t))
    assert g_ours == pytest.approx(g_grubbs, abs=1e-12)


def _simulated_max_z(n: int, fleets: int, seed: int, two_sided: bool) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, fleets))
    rc = robust_columns(x, rel_floor=np.zeros(fleets), abs_floor=np.zeros(fleets))
    return (np.abs(rc.z) if two_sided else rc.z).max(axis=0)


@pytest.mark.parametrize("n", [3, 4, 5, 6, 9, 17, 40, 45, 120, 300])
@pytest.mark.parametrize("two_sided", [False, True])
def test_cutoffs_hold_their_level_in_fresh_simulations(n, two_sided):
    fleets = 50_000 if n <= 45 else 20_000
    t = _simulated_max_z(n, fleets, seed=5000 + n, two_sided=two_sided)
    for level in (0.1, 0.01):
        hits = int((t > n_aware_cutoff(np.array([n]), level, two_sided)[0]).sum())
        assert stats.binomtest(hits, fleets, level).pvalue > 1e-3, (level, hits / fleets)
    # The p-values in the upper tail (p ≤ 0.2) are uniform there: Kolmogorov–Smirnov.
    p = max_z_sf(t, n, two_sided)
    tail = p[p <= 0.2] / 0.2
    assert stats.kstest(tail, "uniform").pvalue > 1e-3


def test_the_cutoff_tends_to_bonferroni_over_replicas_in_large_fleets():
    for n in (10_000, 100_000):
        for level in (0.01, 0.001):
            one = n_aware_cutoff(np.array([n]), level)[0]
            two = n_aware_cutoff(np.array([n]), level, True)[0]
            assert 1.0 <= one / stats.norm.isf(level / n) <= 1.03
            assert 1.0 <= two / stats.norm.isf(level / (2 * n)) <= 1.03


def test_cutoffs_are_continuous_where_the_table_ends_and_the_approximation_begins():
    for level in (0.01, 0.001):
        a, b = n_aware_cutoff(np.array([300, 301]), level)
        assert b == pytest.approx(a, rel=0.02)


def test_the_documented_cutoffs():
    c = n_aware_cutoff(np.array([3, 5, 10, 30, 1000]), 0.001)
    assert c.round(1).tolist() == pytest.approx([372.9, 36.5, 9.4, 5.6, 4.8], abs=0.15)
    assert mad_small_sample_factor(np.array([3]))[0] == 1.495


# Planted faults are still found.


@pytest.mark.parametrize("noise_shape", ["normal", "any"])
def test_one_replica_1_5x_slower_among_1000_is_found_in_every_fleet(noise_shape):
    values = fleet_values(50, 1000, "lognormal", seed=15)
    for s in ("ttft", "tpot", "e2e"):
        values[0, :, NAMES.index(s)] *= 1.5
    _, _, flag = _scored(values, floors=True, noise_shape=noise_shape)
    assert flag[0, :, NAMES.index("tpot")].all()
    assert not flag[1:].any()


@pytest.mark.parametrize(
    ("n", "noise_shape", "found"),
    # From summaries alone, the price of holding the level for any noise shape (the default) is
    # paid in small fleets: five replicas find a 2x slower one in 43 % of fleets, not 91 %.
    [
        (5, "normal", 0.9),
        (5, "any", 0.4),
        (10, "normal", 1.0),
        (10, "any", 1.0),
        (30, "normal", 1.0),
        (30, "any", 1.0),
    ],
)
def test_one_replica_2x_slower_is_found_in_small_fleets(n, noise_shape, found):
    values = fleet_values(200, n, "lognormal", seed=20 + n)
    values[0, :, NAMES.index("tpot")] *= 2.0
    _, _, flag = _scored(values, floors=True, noise_shape=noise_shape)
    assert flag[0, :, NAMES.index("tpot")].mean() >= found
    assert flag[1:].mean() == 0


def test_p_values_beyond_the_table_are_the_quadrature_for_every_value_at_once():
    from fleetwatch.fleet.outliers.stats.robust import _asymptotic_sf

    z = np.array([4.0, 5.0, 6.5])
    for two in (False, True):
        p = max_z_sf(z, 10_000, two)
        ref = [_asymptotic_sf(v, 10_000, two) for v in z]
        assert p == pytest.approx(ref, rel=1e-12)
        # The same largest-z p-value as the Bonferroni limit, within a few percent at n = 10,000.
        assert p[1] == pytest.approx(
            min(1.0, 10_000 * stats.norm.sf(5.0) * (2 if two else 1)), rel=0.1
        )
