"""``compare_runs``: check the inputs, keep the ok requests, match the workload when it changed,
test each metric, decide across metrics, build the report; ``compare_runs_by_model``: the same
for each model's records apart, matched by model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import pandas as pd

from fleetwatch.fleet.by_model import ByModel, per_model
from fleetwatch.fleet.compare.components import ComponentMove, component_moves
from fleetwatch.fleet.compare.decision import decide, error_verdict
from fleetwatch.fleet.compare.matching import Strata, like_for_like, make_strata
from fleetwatch.fleet.compare.report import CompareReport
from fleetwatch.fleet.compare.shape import ShapeCounts, judge_shape, shape_counts
from fleetwatch.fleet.compare.statistics import (
    MetricComparison,
    compare_metric,
    error_counts,
    error_rates_from_counts,
    values,
)
from fleetwatch.fleet.compare.workload import WorkloadCheck, matching_covariates, workload_checks
from fleetwatch.fleet.errors import AnalysisError

__all__ = [
    "METRICS",
    "StrataInfo",
    "check_options",
    "compare_runs",
    "compare_runs_by_model",
    "finish",
]

METRICS = ("ttft_s", "tpot_s", "e2e_s", "queue_s", "prefill_s", "decode_s")


def _ok(df: pd.DataFrame) -> pd.DataFrame:
    if "status" not in df.columns:
        return df
    return df[(df["status"].astype(str) == "ok").to_numpy()]


def _check(
    before: pd.DataFrame, after: pd.DataFrame, confidence: float, alpha: float, min_effect: float
) -> None:
    for label, df in (("before", before), ("after", after)):
        if "arrival_s" not in df.columns or df.empty:
            raise AnalysisError(f"{label}: no usable records (need arrival_s and at least one row)")
    check_options(confidence, alpha, min_effect)


def check_options(confidence: float, alpha: float, min_effect: float) -> None:
    """Refuse a confidence level, family-wise error or minimum effect out of range."""
    if not 0.5 < confidence < 1.0:
        raise AnalysisError(f"confidence must be in (0.5, 1), got {confidence}")
    if not 0.0 < alpha < 0.5:
        raise AnalysisError(f"family-wise error alpha must be in (0, 0.5), got {alpha}")
    if not 0.0 <= min_effect < 1.0:
        raise AnalysisError(f"min_effect must be in [0, 1), got {min_effect}")


def _median_like_for_like(
    b_ok: pd.DataFrame, a_ok: pd.DataFrame, metric: str, strata: Strata
) -> tuple[str, float, float]:
    vb, va = values(b_ok, metric), values(a_ok, metric)
    kb, ka = ~np.isnan(vb), ~np.isnan(va)
    (ratio,), coverage = like_for_like(vb[kb], va[ka], strata.before[kb], strata.after[ka], (50.0,))
    return metric, ratio, coverage


def compare_runs(
    before: pd.DataFrame,
    after: pd.DataFrame,
    *,
    percentiles: Sequence[float] = (50.0, 90.0, 99.0),
    metrics: Sequence[str] = METRICS,
    alpha: float = 0.01,
    min_effect: float = 0.05,
    confidence: float = 0.95,
    draws: int = 2000,
    seed: int = 0,
    ks_alpha: float = 0.001,
    ks_min_statistic: float = 0.1,
    rate_ratio: float = 1.2,
) -> CompareReport:
    """Compare two record frames.

    A metric is regressed when Holm across ``metrics`` rejects it at family-wise error
    ``alpha`` (1 %: the chance that two runs of one system list any regression) and a significant
    percentile rose by at least ``min_effect`` of its before value (5 %), like-for-like when the
    prompt or output mix changed (``fleetwatch.fleet.compare.decision``). ``confidence``, ``draws`` and
    ``seed`` shape the bootstrap intervals shown beside each shift; the decision does not depend
    on them.
    """
    _check(before, after, confidence, alpha, min_effect)
    rng = np.random.default_rng(seed)
    b_ok, a_ok = _ok(before), _ok(after)
    checks = workload_checks(
        before, after, ks_alpha=ks_alpha, ks_min_statistic=ks_min_statistic, rate_ratio=rate_ratio
    )
    covariates, unmatched = matching_covariates(checks)
    strata = make_strata(b_ok, a_ok, covariates) if covariates else None
    if covariates and strata is None:
        unmatched = tuple(w.name for w in checks if w.differs)
    codes = (strata.before, strata.after) if strata is not None else None
    comps = tuple(
        compare_metric(
            m, values(b_ok, m), values(a_ok, m), percentiles, draws, confidence, rng, codes
        )
        for m in metrics
    )
    matched = (
        tuple(_median_like_for_like(b_ok, a_ok, m, strata) for m in metrics if m in b_ok.columns)
        if strata is not None
        else ()
    )
    return finish(
        comps,
        matched=matched,
        components=component_moves(b_ok, a_ok),
        workload=checks,
        errors=(error_counts(before), error_counts(after)),
        shape=(shape_counts(before), shape_counts(after)),
        strata=strata,
        unmatched=unmatched,
        alpha=alpha,
        min_effect=min_effect,
        confidence=confidence,
        draws=draws,
        seed=seed,
    )


class StrataInfo(Protocol):
    """What a report says of the strata a comparison was matched in."""

    @property
    def covariates(self) -> tuple[str, ...]: ...

    @property
    def coverage(self) -> float: ...

    def describe(self) -> str: ...


def finish(
    comps: Sequence[MetricComparison],
    *,
    matched: Sequence[tuple[str, float, float]],
    components: tuple[ComponentMove, ...],
    workload: tuple[WorkloadCheck, ...],
    errors: tuple[tuple[int, int], tuple[int, int]],
    shape: tuple[ShapeCounts, ShapeCounts] | None = None,
    strata: StrataInfo | None,
    unmatched: tuple[str, ...],
    alpha: float,
    min_effect: float,
    confidence: float,
    draws: int,
    seed: int,
    resolution: float | None = None,
) -> CompareReport:
    """The report of metrics compared one by one: decided across them (``decision.decide``),
    with the rest of what was measured (``errors``: each run's errors and requests, judged by
    ``decision.error_verdict``; ``shape``: each run's output-shape counts, judged by
    ``shape.judge_shape``; ``resolution``: the width ratio of the buckets the latencies were
    counted in, None when exact)."""
    rate_b, rate_a, p_err = error_rates_from_counts(*errors)
    err_verdict, err_low, err_high = error_verdict(
        errors[0], errors[1], p_err, alpha=alpha, min_effect=min_effect, confidence=confidence
    )
    decided = decide(
        comps,
        alpha=alpha,
        min_effect=min_effect,
        matched=strata is not None,
        confounded=bool(unmatched),
        confidence=confidence,
    )
    signals = (
        judge_shape(*shape, alpha=alpha, min_effect=min_effect, confidence=confidence)
        if shape is not None
        else ()
    )
    return CompareReport(
        shape=signals,
        matched=tuple(matched),
        metrics=decided,
        components=components,
        workload=workload,
        error_rate_before=rate_b,
        error_rate_after=rate_a,
        error_rate_p=p_err,
        error_verdict=err_verdict,
        error_rise_ci=(err_low, err_high),
        confidence=confidence,
        draws=draws,
        seed=seed,
        alpha=alpha,
        min_effect=min_effect,
        matched_on=strata.covariates if strata is not None else (),
        strata=strata.describe() if strata is not None else None,
        strata_coverage=strata.coverage if strata is not None else None,
        unmatched=unmatched,
        resolution=resolution,
    )


def compare_runs_by_model(
    before: pd.DataFrame,
    after: pd.DataFrame,
    *,
    alpha: float = 0.01,
    min_effect: float = 0.05,
    confidence: float = 0.95,
    **options: Any,
) -> CompareReport | ByModel[CompareReport]:
    """``compare_runs`` for each model, its before records against its after records: a model's
    regression is not hidden by, nor blamed on, another model's traffic. The one report of two
    runs of one model each, else one per model found in both runs (``alpha`` holds per model);
    a model in one run only is noted. ``options``: the rest of ``compare_runs``'s."""
    _check(before, after, confidence, alpha, min_effect)

    def run(model: str, b: pd.DataFrame, a: pd.DataFrame) -> CompareReport:
        return compare_runs(
            b, a, alpha=alpha, min_effect=min_effect, confidence=confidence, **options
        )

    return per_model(before, after, run)
