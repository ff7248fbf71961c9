"""Prometheus metrics for the step loop: cheap to record, computed at scrape time.

The hot path appends floats to lists and adds to plain numbers; ``ServingMetrics.collect`` turns
them into Prometheus metric families when scraped. See ``serving.py`` for every exported name.
"""

from fleetwatch.telemetry.metrics.drops import DropCounter
from fleetwatch.telemetry.metrics.histogram import BatchedHistogram
from fleetwatch.telemetry.metrics.labels import OTHER, LabelCap
from fleetwatch.telemetry.metrics.serving import SeriesKey, ServingMetrics

__all__ = [
    "OTHER",
    "BatchedHistogram",
    "DropCounter",
    "LabelCap",
    "SeriesKey",
    "ServingMetrics",
]
