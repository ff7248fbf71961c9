"""Prometheus metrics for the step loop: cheap to record, computed at scrape time.

The hot path appends floats to lists and adds to plain numbers; ``ServingMetrics.collect`` turns
them into Prometheus metric families when scraped. See ``serving.py`` for every exported name.
"""

from telemetry.metrics.drops import DropCounter
from telemetry.metrics.histogram import BatchedHistogram
from telemetry.metrics.labels import OTHER, LabelCap
from telemetry.metrics.serving import SeriesKey, ServingMetrics

__all__ = [
    "OTHER",
    "BatchedHistogram",
    "DropCounter",
    "LabelCap",
    "SeriesKey",
    "ServingMetrics",
]
