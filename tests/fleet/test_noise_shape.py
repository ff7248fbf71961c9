"""``noise_shape="any"``: the outlier test's level held whatever the noise between healthy replicas.

With one number per replica the shape of the healthy spread is unknown. The detector's default,
``"any"``, takes the largest of the normal, Student-t₆ and two-cluster references' cutoffs
(``fleetwatch.fleet.outliers.stats.shapetable``); ``"normal"`` is exact for normal noise only. Measured here on
healthy fleets of every shape ``fleetwatch.scenarios.healthy_tables`` draws, and the shape tables
against fresh simulations with other seeds than the tables'.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fleetwatch.fleet.outliers import DetectorConfig, FleetTable, detect
from fleetwatch.fleet.outliers.stats.nulltable import simulate_max_dev
from fleetwatch.fleet.outliers.stats.robust import (
    max_z_sf,
    n_aware_cutoff,
    robust_columns,
    signal_level,
)
from fleetwatch.fleet.outliers.stats.score import score_matrix
from fleetwatch.fleet.outliers.stats.shapetable import draw, shape_isf
from fleetwatch.scenarios.healthy_tables import SHAPES, SHARES, SIGNALS, as_columns, fleet_values

ALPHA = DetectorConfig().alpha
NAMES = list(SIGNALS)
# Shares drawn as binomial counts tie (MAD = 0 where most do): only the floors decide them.
CONTINUOUS = [j for j, s in enumerate(NAMES) if s not in SHARES]
SPECS = [DetectorConfig().spec(NAMES[j]).ungated() for j in CONTINUOUS]


def _rate(values: np.ndarray, noise_shape: str) -> float:
    """Share of fleets with any finding from the statistical test alone (floors off) over the
    continuous signals, at family-wise ``ALPHA``."""
    n, fleets, _ = values.shape
    x = as_columns(values[:, :, CONTINUOUS])
    k = len(CONTINUOUS)
    rc = robust_columns(x, rel_floor=np.zeros(x.shape[1]), abs_floor=np.zeros(x.shape[1]))
    z = rc.z.reshape(n, fleets, k)
    level = signal_level(ALPHA, k)
    hit = np.zeros(fleets, dtype=bool)
    for j, spec in enumerate(SPECS):
        two = spec.worse == "both"
        oz = np.abs(z[:, :, j]) if two else (z[:, :, j] if spec.worse == "higher" else -z[:, :, j])
        hit |= oz.max(axis=0) > n_aware_cutoff(np.array([n]), level, two, noise_shape)[0]
    return float(hit.mean())


@pytest.mark.parametrize("n", [3, 5, 10, 30, 1000])
def test_the_level_holds_for_every_shape_and_the_least_favourable_reaches_it(n):
    fleets = 2_000 if n == 1000 else 20_000
    rates = {
        shape: _rate(fleet_values(fleets, n, shape, seed=900 + n + SHAPES.index(shape)), "any")
        for shape in SHAPES
    }
    assert max(rates.values()) <= 1.5 * ALPHA, rates
    assert max(rates.values()) >= ALPHA / 1.5, rates


@pytest.mark.parametrize(("n", "shape"), [(10, "bimodal"), (30, "heavy"), (1000, "heavy")])
def test_the_normal_cutoff_alone_cries_wolf_on_that_noise(n, shape):
    # Why "any" is the default: the normal reference's cutoff is exact for normal noise only.
    values = fleet_values(2_000, n, shape, seed=950 + n)
    assert _rate(values, "normal") > 2 * ALPHA
    assert _rate(values, "any") <= 1.5 * ALPHA


@pytest.mark.parametrize("shape", ["t6", "clusters"])
@pytest.mark.parametrize("n", [3, 7, 18, 45, 120])
@pytest.mark.parametrize("two_sided", [False, True])
def test_shape_tables_hold_their_level_in_fresh_simulations(shape, n, two_sided):
    # 18, 45 and 120 are not tabulated: read between sizes, linear in 1/n.
    fleets = 40_000
    one, two = simulate_max_dev(
        n, fleets, np.random.default_rng([n, 77]), noise=lambda g, s, dt: draw(shape, g, s, dt)
    )
    t = two if two_sided else one
    for level in (0.1, 0.01):
        hits = int((t > shape_isf(shape, level, n, two_sided)).sum())
        assert stats.binomtest(hits, fleets, level).pvalue > 1e-3, (level, hits / fleets)


def test_t6_beyond_the_table_continues_the_table():
    # n > 300: a closed form over t6's tail with the median's and MAD's errors, against the
    # simulated row at 300.
    for level in (0.01, 0.001):
        for two in (False, True):
            a, b = shape_isf("t6", level, 300, two), shape_isf("t6", level, 301, two)
            assert b == pytest.approx(a, rel=0.03)


def test_cutoffs_and_p_values_agree_and_are_never_below_the_normal_ones():
    n = np.array([3, 5, 10, 30, 1000])
    normal = n_aware_cutoff(n, 0.001)
    wide = n_aware_cutoff(n, 0.001, noise_shape="any")
    assert (wide >= normal).all()
    assert wide.round(1).tolist() == pytest.approx([870.3, 84.2, 18.9, 10.4, 16.8], abs=0.15)
    for size, c in zip(n.tolist(), wide.tolist(), strict=True):
        assert max_z_sf(np.array([c]), size, noise_shape="any")[0] == pytest.approx(0.001, rel=0.05)
        z = np.array([-1.0, 0.0, 2 * c, np.inf, np.nan])
        p = max_z_sf(z, size, noise_shape="any")
        assert p[0] == p[1] == 1.0 and p[3] == 0.0 and np.isnan(p[4])
        assert p[2] >= max_z_sf(z[2:3], size)[0]


def test_detect_applies_the_same_rule_and_says_so():
    values = fleet_values(40, 10, "bimodal", seed=5)
    specs = [DetectorConfig().spec(s).ungated() for s in NAMES]
    cfg = DetectorConfig(signals={s.name: s for s in specs})
    assert cfg.noise_shape == "any"  # the default
    level = signal_level(ALPHA, len(NAMES))
    _, _, flag = score_matrix(as_columns(values), specs * 40, level, noise_shape="any")
    flag = flag.reshape(10, 40, len(NAMES))
    idx = pd.Index([f"r{i}" for i in range(10)])
    for f in range(40):
        table = FleetTable(
            values=pd.DataFrame(values[:, f, :], index=idx, columns=NAMES),
            volume=pd.Series(1000.0, index=idx),
        )
        report = detect(table, cfg)
        first = {(x.replica, x.signal) for x in report.findings if x.found_in == "fleet"}
        rows, cols = np.nonzero(flag[:, f, :])
        assert first == {(f"r{i}", NAMES[j]) for i, j in zip(rows, cols, strict=True)}
        assert not any("noise shape" in note for note in report.notes)
    # The looser reference says what its level rests on.
    normal = detect(table, DetectorConfig(signals=cfg.signals, noise_shape="normal"))
    assert any("only for normal noise" in note for note in normal.notes), normal.render()
    with pytest.raises(ValueError, match="noise_shape"):
        DetectorConfig(noise_shape="heavy")
