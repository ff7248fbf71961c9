"""Prometheus metrics for micro-batchers (children bound once per batcher name).

- ``fleetwatch_batcher_batch_size{batcher}``: histogram, items per batch run.
- ``fleetwatch_batcher_fill_ratio{batcher}``: histogram, batch size / max batch size (0..1).
- ``fleetwatch_batcher_queue_wait_seconds{batcher}``: histogram, submit → batch start per item.
- ``fleetwatch_batcher_queue_depth{batcher}``: gauge, items waiting (read at scrape time).
- ``fleetwatch_batcher_items_total{batcher,outcome}``: ``success|failure|cancelled``.
- ``fleetwatch_batcher_rejected_total{batcher,reason}``: ``full|closed|too_costly|cost_error``.
- ``fleetwatch_batcher_batch_failures_total{batcher}``: batch-function calls that raised
  (bisection retries included).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["BatcherMetrics", "BoundBatcherMetrics"]

_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
_FILL_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
_WAIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
REJECT_REASONS = ("full", "closed", "too_costly", "cost_error")


@dataclass(frozen=True, slots=True)
class BoundBatcherMetrics:
    batch_size: Histogram
    fill_ratio: Histogram
    queue_wait: Histogram
    depth: Gauge
    success: Counter
    failure: Counter
    cancelled: Counter
    rejected: dict[str, Counter]
    batch_failures: Counter


class BatcherMetrics:
    """The metric families, registered once in ``registry``."""

    def __init__(self, registry: CollectorRegistry = REGISTRY, prefix: str = "fleetwatch") -> None:
        p = f"{prefix}_batcher"
        self.batch_size = Histogram(
            f"{p}_batch_size",
            "Items per batch run.",
            ["batcher"],
            buckets=_SIZE_BUCKETS,
            registry=registry,
        )
        self.fill_ratio = Histogram(
            f"{p}_fill_ratio",
            "Batch size over max batch size (0..1).",
            ["batcher"],
            buckets=_FILL_BUCKETS,
            registry=registry,
        )
        self.queue_wait = Histogram(
            f"{p}_queue_wait_seconds",
            "Time from submit to the start of the item's batch.",
            ["batcher"],
            buckets=_WAIT_BUCKETS,
            registry=registry,
        )
        self.depth = Gauge(
            f"{p}_queue_depth", "Items waiting for a batch.", ["batcher"], registry=registry
        )
        self.items = Counter(
            f"{p}_items",
            "Items by outcome (success, failure, cancelled).",
            ["batcher", "outcome"],
            registry=registry,
        )
        self.rejected = Counter(
            f"{p}_rejected",
            "Submissions refused (full, closed, too_costly, cost_error).",
            ["batcher", "reason"],
            registry=registry,
        )
        self.batch_failures = Counter(
            f"{p}_batch_failures",
            "Batch-function calls that raised.",
            ["batcher"],
            registry=registry,
        )

    def bind(self, batcher: str, depth: Callable[[], float]) -> BoundBatcherMetrics:
        gauge = self.depth.labels(batcher)
        gauge.set_function(depth)
        return BoundBatcherMetrics(
            batch_size=self.batch_size.labels(batcher),
            fill_ratio=self.fill_ratio.labels(batcher),
            queue_wait=self.queue_wait.labels(batcher),
            depth=gauge,
            success=self.items.labels(batcher, "success"),
            failure=self.items.labels(batcher, "failure"),
            cancelled=self.items.labels(batcher, "cancelled"),
            rejected={r: self.rejected.labels(batcher, r) for r in REJECT_REASONS},
            batch_failures=self.batch_failures.labels(batcher),
        )
