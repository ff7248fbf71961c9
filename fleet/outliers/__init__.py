"""Slow-replica detection: each replica against its fleet's median, with a suspected cause."""

from fleetwatch.fleet.outliers.config import DetectorConfig
from fleetwatch.fleet.outliers.detect import detect
from fleetwatch.fleet.outliers.judging.causes import Cause, Side
from fleetwatch.fleet.outliers.judging.traffic import different_traffic
from fleetwatch.fleet.outliers.report import Finding, OutlierReport, Pass
from fleetwatch.fleet.outliers.signals import SIGNALS, SignalSpec
from fleetwatch.fleet.outliers.sources.prometheus import (
    table_from_prometheus,
    tables_from_prometheus,
)
from fleetwatch.fleet.outliers.sources.records import table_from_records
from fleetwatch.fleet.outliers.sources.snapshots import (
    table_from_metrics_dir,
    table_from_metrics_text,
)
from fleetwatch.fleet.outliers.stats.robust import n_aware_cutoff, robust_columns
from fleetwatch.fleet.outliers.table import FleetTable

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
    "tables_from_prometheus",
]
