"""Score a whole table at once: each cell's oriented robust z and which cells pass every test.

The z is oriented so that positive is worse (its absolute value for signals bad either way). A cell
is flagged when the statistical test passes and so do the second conditions: the spread floor, the
replica's own sampling error and the effect size (see ``signals``). Everything is vectorised over
cells, so many simulated fleets can be scored as the columns of one matrix.

The statistical test, per signal at its level (the family-wise ``alpha`` over signals × passes):

- without per-request samples, the robust z beyond the cutoff for the largest z of the fleet
  (``stats``) at the whole level;
- with them (records), each replica's requests against the rest's (``ranks``, Mann–Whitney) at
  the level over the replicas tested (Bonferroni). It gives small fleets power (three replicas,
  one 2× slower: found whatever the other two do), and it holds its level whatever the shape of
  the latencies. The cutoff does not stand beside it there: it assumes replica summaries that
  are normal around the fleet's, and medians of a few dozen requests from bimodal or
  heavy-tailed latencies are not (measured on healthy fleets of ten with 20 requests a replica:
  27 % and 1.6 % of fleets flagged on the three signals where 0.15 % was nominal; see
  BENCHMARKS.md). It also replaces the own-error gate, which it is: a test of the replica's
  requests, not of its one summary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from fleetwatch.fleet.outliers.signals import SignalSpec
from fleetwatch.fleet.outliers.stats.robust import (
    FLOOR_CUTOFF,
    OWN_CUTOFF,
    RobustColumns,
    robust_columns,
)

__all__ = ["effect_mask", "score_cells", "score_matrix"]

_SIGN = {"higher": 1.0, "lower": -1.0, "both": 0.0}


def score_matrix(
    x: np.ndarray[Any, Any],
    specs: Sequence[SignalSpec],
    level: float,
    stderr: np.ndarray[Any, Any] | None = None,
    rank_p: np.ndarray[Any, Any] | None = None,
    noise_shape: str = "normal",
) -> tuple[RobustColumns, np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Robust statistics, oriented z and the finding mask for ``x`` (replicas × signals).

    ``level``: the per-signal level of the statistical test (the detector passes its family-wise
    ``alpha`` divided by signals × passes). ``rank_p``: per cell the p-value of a test of the
    replica's own requests against the rest's (``ranks.rank_p_values``; for a share of counted
    requests, ``shares.share_counts``), NaN where a column has none; the columns with any are
    judged by it instead of the cutoff (module docstring).
    """
    sign = np.array([_SIGN[s.worse] for s in specs])
    two = sign == 0.0
    rc = robust_columns(
        x,
        rel_floor=np.array([s.rel_floor for s in specs]),
        abs_floor=np.array([s.abs_floor for s in specs]),
        stderr=stderr,
        alpha=level,
        two_sided=two,
        noise_shape=noise_shape,
    )
    stat = None
    ranked_cols = np.zeros(len(specs), dtype=bool)
    if rank_p is not None:
        rank_p = np.asarray(rank_p, dtype=np.float64)
        tested = (~np.isnan(rank_p)).sum(axis=0)
        ranked = tested > 0
        if ranked.any():
            rank_level = np.where(ranked, level / np.maximum(tested, 1), np.nan)
            rc = replace(rc, rank_p=rank_p, rank_level=rank_level)
            with np.errstate(invalid="ignore"):
                stat = rank_p <= rank_level
            ranked_cols = ranked
    with np.errstate(invalid="ignore"):
        oz = sign * rc.z
        if two.any():
            oz[:, two] = np.abs(rc.z[:, two])
        beyond = oz > rc.cutoff
        if stat is not None:
            beyond = np.where(ranked_cols, stat, beyond)
    # The statistical test passes in few cells; the other tests only where it does.
    rows, cols = np.nonzero(beyond)
    with np.errstate(invalid="ignore"):
        keep = (
            (np.abs(rc.z_floor[rows, cols]) >= FLOOR_CUTOFF)
            & ((rc.z_own[rows, cols] >= OWN_CUTOFF) | ranked_cols[cols])
            & ~np.isnan(x[rows, cols])
        )
    rows, cols = rows[keep], cols[keep]
    flag = np.zeros(x.shape, dtype=bool)
    flag[rows, cols] = _effect(x[rows, cols], rc.median[cols], *_gates(specs, cols))
    return rc, oz, flag


def _gates(
    specs: Sequence[SignalSpec], cols: np.ndarray[Any, Any] | None = None
) -> tuple[np.ndarray[Any, Any], ...]:
    sign = np.array([_SIGN[s.worse] for s in specs])
    m = np.array([s.min_effect for s in specs])
    absolute = np.array([s.gate == "absolute" for s in specs])
    if cols is None:
        return sign, m, absolute
    return sign[cols], m[cols], absolute[cols]


def _effect(
    x: np.ndarray[Any, Any],
    median: np.ndarray[Any, Any],
    sign: np.ndarray[Any, Any],
    m: np.ndarray[Any, Any],
    absolute: np.ndarray[Any, Any],
) -> np.ndarray[Any, Any]:
    two = sign == 0.0
    with np.errstate(invalid="ignore", divide="ignore"):
        d = x - median
        eff_abs = np.where(two, np.abs(d) >= m, sign * d >= m)
        r = np.where(median != 0, x / median, np.nan)
        eff_ratio = np.where(
            two, (r >= m) | (r <= 1.0 / m), np.where(sign > 0, r >= m, r <= 1.0 / m)
        )
        return np.asarray(np.where(absolute, eff_abs, eff_ratio))


def effect_mask(
    x: np.ndarray[Any, Any], median: np.ndarray[Any, Any], specs: Sequence[SignalSpec]
) -> np.ndarray[Any, Any]:
    """Cells at least ``min_effect`` worse than ``median`` (per column; either way for signals
    bad either way): a ratio to the median, or a difference for ``gate="absolute"``."""
    return _effect(x, median, *_gates(specs))


def score_cells(
    frame: pd.DataFrame,
    stderr: pd.DataFrame | None,
    specs: list[SignalSpec],
    level: float,
    rank_p: np.ndarray[Any, Any] | None = None,
    noise_shape: str = "normal",
) -> tuple[RobustColumns, np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Robust statistics and the finding mask for every cell of ``frame`` (see ``score_matrix``)."""
    x = frame.to_numpy(dtype=np.float64, na_value=np.nan)
    se = None
    if stderr is not None and len(stderr.columns):
        se = stderr.reindex(index=frame.index, columns=frame.columns).to_numpy(
            dtype=np.float64, na_value=np.nan
        )
    return score_matrix(x, specs, level, se, rank_p, noise_shape)
