"""Records-mode outliers per model: each model's replicas judged as their own fleet.

A 70B model's replicas are slower than an 8B model's on every request; judged as one fleet, the
healthy 70B replicas would be blamed. ``detect_by_model`` judges each model apart and, for a
dataset of several models, reports them grouped by model, every finding naming its model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import partial
from typing import Any

import pandas as pd

from fleetwatch.fleet.by_model import ByModel, by_model, gathered
from fleetwatch.fleet.outliers.config import DetectorConfig
from fleetwatch.fleet.outliers.detect import detect
from fleetwatch.fleet.outliers.report import Finding, OutlierReport
from fleetwatch.fleet.outliers.sources.records import table_from_records
from fleetwatch.fleet.outliers.table import FleetTable

__all__ = ["OutliersByModel", "detect_by_model", "detect_tables", "findings_of", "verbose"]


class OutliersByModel(ByModel[OutlierReport]):
    """Outlier reports per model; the JSON adds the overall verdict and names each finding's
    model."""

    __slots__ = ()

    @property
    def verdict(self) -> str:
        verdicts = {r.verdict for _, r in self.reports}
        for v in ("outliers", "no outlier"):
            if v in verdicts:
                return v
        return "insufficient data"

    def to_dict(self) -> dict[str, Any]:
        models = []
        for m, r in self.reports:
            doc = {"model": m, **r.to_dict()}
            doc["findings"] = [{"model": m, **f} for f in doc["findings"]]
            models.append(doc)
        return {"verdict": self.verdict, "models": models, "notes": list(self.notes)}


def findings_of(report: OutlierReport | ByModel[OutlierReport]) -> tuple[Finding, ...]:
    """Every finding of ``report``, across its models."""
    if isinstance(report, OutlierReport):
        return report.findings
    return tuple(f for _, r in report for f in r.findings)


def verbose(report: OutlierReport | ByModel[OutlierReport]) -> Any:
    """``report`` rendering every finding with its evidence (``--verbose``)."""
    if isinstance(report, OutlierReport):
        return dataclasses.replace(report, verbose=True)
    reports = tuple((m, dataclasses.replace(r, verbose=True)) for m, r in report.reports)
    return dataclasses.replace(report, reports=reports)


def detect_by_model(
    df: pd.DataFrame,
    config: DetectorConfig | None = None,
    *,
    quantile: float = 0.5,
    fingerprint: pd.DataFrame | None = None,
    host: Mapping[str, str] | pd.Series | None = None,
    where: str = "records",
) -> OutlierReport | OutliersByModel:
    """``detect`` over each model's records (``table_from_records``): the one report a dataset
    of one model always got, else one per model."""

    def judge(model: str, part: pd.DataFrame) -> OutlierReport:
        table = table_from_records(
            part, quantile=quantile, fingerprint=fingerprint, host=host, where=where
        )
        return detect(table, config)

    report = by_model(df, judge)
    if isinstance(report, OutlierReport):
        return report
    return OutliersByModel(report.reports, report.notes)


def detect_tables(
    tables: list[tuple[str, FleetTable]], config: DetectorConfig | None = None
) -> OutlierReport | OutliersByModel:
    """``detect`` over one table per model (``tables_from_engine``): the one report of a single
    model, else one per model, a model the detector refuses being a note."""
    if len(tables) == 1:
        return detect(tables[0][1], config)
    report = gathered([(m, partial(detect, t, config)) for m, t in tables], [])
    return OutliersByModel(report.reports, report.notes)
