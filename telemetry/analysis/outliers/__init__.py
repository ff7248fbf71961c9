"""Slow-replica detection: each replica against its fleet's median, with a suspected cause."""

from telemetry.analysis.outliers.causes import Cause, Side
from telemetry.analysis.outliers.detect import (
    DetectorConfig,
    Finding,
    OutlierReport,
    Pass,
    detect,
)
from telemetry.analysis.outliers.signals import SIGNALS, SignalSpec
from telemetry.analysis.outliers.sources import (
    table_from_metrics_dir,
    table_from_metrics_text,
    table_from_prometheus,
    table_from_records,
)
from telemetry.analysis.outliers.stats import n_aware_cutoff, robust_columns
from telemetry.analysis.outliers.table import FleetTable
from telemetry.analysis.outliers.traffic import different_traffic

__all__ = [
    "SIGNALS",
    "Cause",
    "DetectorConfig",
    "Finding",
    "FleetTable",
    "OutlierReport",
    "Pass",
    "Side",
    "SignalSpec",
    "detect",
    "different_traffic",
    "n_aware_cutoff",
    "robust_columns",
    "table_from_metrics_dir",
    "table_from_metrics_text",
    "table_from_prometheus",
    "table_from_records",
]
