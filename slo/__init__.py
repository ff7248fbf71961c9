"""SLOs for LLM serving: specs, error budgets, burn-rate alerts, Prometheus rules, backtests.

Pipeline (pure functions; files only in ``slo.cli``): ``load_spec`` -> ``SLOSpec`` ->
``generate_rules(spec, profile)`` -> ``render_rules`` / ``generate_promtool_tests``; and over
request records, ``report_spec`` and ``backtest_spec`` (Parquet files streamed by ``slo.stream``).
"""

from __future__ import annotations

import importlib
from typing import Any

from slo.errors import SLOSpecError
from slo.load import load_spec, read_spec
from slo.parse import parse_spec
from slo.spec import (
    Alerting,
    AvailabilitySLI,
    BurnWindow,
    GoodputSLI,
    LatencySLI,
    RatioSLI,
    Selector,
    ServiceLevelObjective,
    SLOSpec,
)
from slo.windows import WORKBOOK_WINDOWS, budget_fraction, scaled_windows

# numpy/pandas-backed names load on first use, so `fleetwatch --help` does not import pandas.
_LAZY = {
    "Backtest": "slo.backtest",
    "BinCounts": "slo.bins",
    "backtest_parquet": "slo.stream",
    "FiringInterval": "slo.backtest",
    "Timeline": "slo.burn",
    "window_counts": "slo.burn",
    "SLIEvents": "slo.events",
    "sli_events": "slo.events",
    "SLOReport": "slo.report",
    "backtest_spec": "slo.report",
    "report_spec": "slo.report",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'slo' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "WORKBOOK_WINDOWS",
    "Alerting",
    "AvailabilitySLI",
    "Backtest",
    "BinCounts",
    "BurnWindow",
    "FiringInterval",
    "GoodputSLI",
    "LatencySLI",
    "RatioSLI",
    "SLIEvents",
    "SLOReport",
    "SLOSpec",
    "SLOSpecError",
    "Selector",
    "ServiceLevelObjective",
    "Timeline",
    "backtest_parquet",
    "backtest_spec",
    "budget_fraction",
    "load_spec",
    "parse_spec",
    "read_spec",
    "report_spec",
    "scaled_windows",
    "sli_events",
    "window_counts",
]
