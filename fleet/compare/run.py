"""``compare_runs``: check the inputs, keep the ok requests, run each comparison, build the report."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from fleet.compare.components import component_moves
from fleet.compare.report import CompareReport
from fleet.compare.statistics import compare_metric, error_rates, sorted_values
from fleet.compare.workload import matched_ratio, workload_checks
from fleet.errors import AnalysisError

__all__ = ["METRICS", "compare_runs"]

METRICS = ("ttft_s", "tpot_s", "e2e_s", "queue_s", "prefill_s", "decode_s")


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    if "status" not in df.columns:
        return df
    return df[(df["status"].astype(str) == "ok").to_numpy()]


def _check(before: pd.DataFrame, after: pd.DataFrame, confidence: float) -> None:
    for label, df in (("before", before), ("after", after)):
        if "arrival_s" not in df.columns or df.empty:
            raise AnalysisError(f"{label}: no usable records (need arrival_s and at least one row)")
    if not 0.5 < confidence < 1.0:
        raise AnalysisError(f"confidence must be in (0.5, 1), got {confidence}")


def compare_runs(
    before: pd.DataFrame,
    after: pd.DataFrame,
    *,
    percentiles: Sequence[float] = (50.0, 90.0, 99.0),
    metrics: Sequence[str] = METRICS,
    confidence: float = 0.95,
    draws: int = 2000,
    seed: int = 0,
    min_effect: float = 0.05,
    ks_alpha: float = 0.001,
    ks_min_statistic: float = 0.1,
    rate_ratio: float = 1.2,
) -> CompareReport:
    """Compare two record frames. ``min_effect``: a significant shift counts as a regression
    only when it is at least this share of the before value (5 %)."""
    _check(before, after, confidence)
    rng = np.random.default_rng(seed)
    b_ok, a_ok = _ok(before), _ok(after)
    comps = tuple(
        compare_metric(
            m,
            sorted_values(b_ok, m),
            sorted_values(a_ok, m),
            percentiles,
            draws,
            confidence,
            min_effect,
            rng,
        )
        for m in metrics
    )
    checks = workload_checks(
        before, after, ks_alpha=ks_alpha, ks_min_statistic=ks_min_statistic, rate_ratio=rate_ratio
    )
    err_before, err_after, err_p = error_rates(before, after)
    matched = tuple((m, *matched_ratio(b_ok, a_ok, m)) for m in metrics if m in b_ok.columns)
    return CompareReport(
        matched=matched,
        metrics=comps,
        components=component_moves(b_ok, a_ok),
        workload=checks,
        error_rate_before=err_before,
        error_rate_after=err_after,
        error_rate_p=err_p,
        confidence=confidence,
        draws=draws,
        seed=seed,
    )
