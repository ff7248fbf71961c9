"""``attribute_tail``: select the tail, decompose it, score each suspect, assemble the report;
``attribute_tail_by_model``: the same for each model's records apart."""

from __future__ import annotations

from functools import partial

import pandas as pd

from fleetwatch.fleet.by_model import ByModel, by_model
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.tail.cohorts import Target, decompose, ok_requests, split
from fleetwatch.fleet.tail.model import fit_service
from fleetwatch.fleet.tail.report import Component, TailReport
from fleetwatch.fleet.tail.suspects import FITTED, preemption, queueing

__all__ = ["attribute_tail", "attribute_tail_by_model"]


def attribute_tail(
    df: pd.DataFrame,
    *,
    percentile: float = 99.0,
    target: Target = "e2e",
    long_prompt_quantile: float = 0.9,
) -> TailReport:
    """Attribute the ``target`` latency tail of ok requests in ``df`` (a records frame)."""
    if not 50.0 <= percentile < 100.0:
        raise AnalysisError(f"percentile must be in [50, 100), got {percentile}")
    if target not in ("e2e", "ttft"):
        raise AnalysisError(f"tail target must be 'e2e' or 'ttft', got {target!r}")
    req = ok_requests(df)
    y, parts = decompose(req, target)
    c = split(y, percentile, target)
    components = tuple(Component(k, *c.means(v)) for k, v in parts.items())
    fit = fit_service(req, parts, c, target, long_prompt_quantile)
    suspects = [queueing(req, parts, c), preemption(req, parts, c)]
    suspects.extend(FITTED[name](fit, c) for name in fit.features)
    suspects.sort(key=lambda s: -s.explained_s)
    return TailReport(
        target=target,
        percentile=percentile,
        threshold_s=c.threshold,
        n_tail=c.n_tail,
        n_body=c.n_body,
        tail_mean_s=c.tail_mean_s,
        body_mean_s=c.body_mean_s,
        components=components,
        suspects=tuple(suspects),
        unexplained_s=c.excess_s - sum(s.explained_s for s in suspects),
    )


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
    if not 50.0 <= percentile < 100.0:
        raise AnalysisError(f"percentile must be in [50, 100), got {percentile}")
    if target not in ("e2e", "ttft"):
        raise AnalysisError(f"tail target must be 'e2e' or 'ttft', got {target!r}")
    run = partial(
        _of_model, percentile=percentile, target=target, long_prompt_quantile=long_prompt_quantile
    )
    return by_model(df, run)
