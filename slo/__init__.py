"""SLOs for LLM serving: specs, error budgets, burn-rate alerts, Prometheus rules, backtests.

Pipeline (pure functions; files only in ``fleetwatch.slo.cli``): ``load_spec`` -> ``SLOSpec`` ->
``generate_rules(spec, profile)`` -> ``render_rules`` / ``generate_promtool_tests``; and over
request records, ``report_spec`` and ``backtest_spec`` (Parquet files streamed by ``fleetwatch.slo.stream``).
"""

from __future__ import annotations

from fleetwatch.core.lazy import lazy_attributes, lazy_dir
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.load import load_spec, read_spec
from fleetwatch.slo.parse import parse_spec
from fleetwatch.slo.spec import (
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
from fleetwatch.slo.windows import WORKBOOK_WINDOWS, budget_fraction, scaled_windows

# numpy/pandas-backed names load on first use, so `fleetwatch --help` does not import pandas.
_LAZY = {
    "Backtest": "fleetwatch.slo.backtest",
    "BinCounts": "fleetwatch.slo.bins",
    "backtest_parquet": "fleetwatch.slo.stream",
    "FiringInterval": "fleetwatch.slo.backtest",
    "Timeline": "fleetwatch.slo.burn",
    "window_counts": "fleetwatch.slo.burn",
    "SLIEvents": "fleetwatch.slo.events",
    "sli_events": "fleetwatch.slo.events",
    "SLOReport": "fleetwatch.slo.report",
    "backtest_spec": "fleetwatch.slo.report",
    "report_spec": "fleetwatch.slo.report",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


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
__dir__ = lazy_dir(__all__)
