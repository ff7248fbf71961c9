"""Slow-replica detection: each replica against its fleet's median, with a suspected cause."""

from fleet.outliers.causes import Cause, Side
from fleet.outliers.config import DetectorConfig
from fleet.outliers.detect import detect
from fleet.outliers.prometheus import table_from_prometheus
from fleet.outliers.records import table_from_records
from fleet.outliers.report import Finding, OutlierReport, Pass
from fleet.outliers.signals import SIGNALS, SignalSpec
from fleet.outliers.snapshots import table_from_metrics_dir, table_from_metrics_text
from fleet.outliers.stats import n_aware_cutoff, robust_columns
from fleet.outliers.table import FleetTable
from fleet.outliers.traffic import different_traffic

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
