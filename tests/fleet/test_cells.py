"""The per-cell scores the detector reads for a few cells equal the whole-matrix formulas."""

from __future__ import annotations

import numpy as np

from fleetwatch.fleet.outliers.stats.robust import robust_columns


def test_cells_equal_the_whole_matrix_scores_with_nan_zero_median_and_missing_stderr():
    rng = np.random.default_rng(3)
    x = rng.lognormal(0, 0.3, (40, 5))
    x[3, 1] = np.nan
    x[:, 4] = 0.0  # median 0: ratio NaN
    x[7, 4] = 1.0
    se = np.abs(rng.normal(0, 0.05, x.shape))
    se[5, 2] = np.nan
    se[6, 2] = 0.0
    rel = np.full(5, 0.05)
    absf = np.zeros(5)
    rc = robust_columns(x, rel_floor=rel, abs_floor=absf, stderr=se)
    bare = robust_columns(x, rel_floor=rel, abs_floor=absf)
    dev = x - rc.median
    with np.errstate(all="ignore"):
        want_floor = np.where(dev == 0, 0.0, dev / rc.floor)
        want_own = np.where(se > 0, np.abs(dev) / se, np.inf)
        want_ratio = np.where(rc.median == 0, np.nan, x / rc.median)
    rows, cols = np.indices(x.shape).reshape(2, -1)
    np.testing.assert_array_equal(rc.z_floor[rows, cols], want_floor.ravel())
    np.testing.assert_array_equal(rc.z_own[rows, cols], want_own.ravel())
    np.testing.assert_array_equal(rc.ratio[rows, cols], want_ratio.ravel())
    assert rc.z_own[5, 2] == np.inf and rc.z_own[6, 2] == np.inf
    assert np.isnan(bare.z_own[3, 1]) and bare.z_own[0, 0] == np.inf
    assert isinstance(rc.ratio[0, 0], float)
