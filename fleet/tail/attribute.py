"""``attribute_tail``: plan the cut, sum the requests, score each suspect, assemble the report;
``attribute_tail_by_model``: the same for each model's records apart; ``tail_report``: the report
from a plan and its sums, whichever way they were taken (in memory, or through a query engine:
``fleet.tail.engine``)."""

from __future__ import annotations

from functools import partial

import pandas as pd

from fleetwatch.fleet.by_model import ByModel, by_model
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.tail.cohorts import Target, ok_index, ok_requests
from fleetwatch.fleet.tail.examples import Example, from_requests
from fleetwatch.fleet.tail.model import fit_service
from fleetwatch.fleet.tail.report import Component, TailReport
from fleetwatch.fleet.tail.sums import Plan, TailSums, plan_from_requests
from fleetwatch.fleet.tail.suspects import FITTED, preemption, queueing

__all__ = ["attribute_tail", "attribute_tail_by_model", "check_options", "tail_report"]


def check_options(percentile: float, target: str) -> None:
    if not 50.0 <= percentile < 100.0:
        raise AnalysisError(f"percentile must be in [50, 100), got {percentile}")
    if target not in ("e2e", "ttft"):
        raise AnalysisError(f"tail target must be 'e2e' or 'ttft', got {target!r}")


def tail_report(
    plan: Plan, sums: TailSums, examples: dict[str, list[Example]] | None = None
) -> TailReport:
    """The report of a plan's tail from the second pass's sums (and the requests it lists)."""
    components = tuple(
        Component(k, *sums.means(sums.parts_tail[k], sums.parts_sum[k])) for k in sums.parts_sum
    )
    fit = fit_service(sums)
    suspects = [queueing(sums), preemption(sums)]
    suspects.extend(FITTED[name](fit, sums) for name in fit.features)
    suspects.sort(key=lambda s: -s.explained_s)
    tail_mean, body_mean = sums.means(sums.y_tail, sums.y_sum)
    return TailReport(
        target=plan.target,
        percentile=plan.percentile,
        threshold_s=plan.threshold,
        n_tail=sums.n_tail,
        n_body=sums.n_body,
        tail_mean_s=tail_mean,
        body_mean_s=body_mean,
        components=components,
        suspects=tuple(suspects),
        unexplained_s=(tail_mean - body_mean) - sum(s.explained_s for s in suspects),
        examples=examples or {},
    )


def attribute_tail(
    df: pd.DataFrame,
    *,
    percentile: float = 99.0,
    target: Target = "e2e",
    long_prompt_quantile: float = 0.9,
) -> TailReport:
    """Attribute the ``target`` latency tail of ok requests in ``df`` (a records frame)."""
    check_options(percentile, target)
    req = ok_requests(df)
    plan = plan_from_requests(req, percentile, target, long_prompt_quantile)
    sums = TailSums(plan)
    y = sums.add(req)
    listed = from_requests(df, ok_index(df), y, req.uncached, req.out_tokens, plan)
    return tail_report(plan, sums, listed)


def _of_model(
    model: str, df: pd.DataFrame, percentile: float, target: Target, long_prompt_quantile: float
) -> TailReport:
    return attribute_tail(
        df, percentile=percentile, target=target, long_prompt_quantile=long_prompt_quantile
    )


def attribute_tail_by_model(
    df: pd.DataFrame,
    *,
    percentile: float = 99.0,
    target: Target = "e2e",
    long_prompt_quantile: float = 0.9,
) -> TailReport | ByModel[TailReport]:
    """``attribute_tail`` over each model's records, each model's tail at its own
    ``percentile`` (a slower model's body is not another model's tail, nor its replicas bad
    replicas): the one report of a dataset of one model, else one per model."""
    check_options(percentile, target)
    run = partial(
        _of_model, percentile=percentile, target=target, long_prompt_quantile=long_prompt_quantile
    )
    return by_model(df, run)
