"""asyncio micro-batcher: size/wait/cost flushing, bounded queue, failure isolation by bisection."""

from resilience.batcher.batcher import (
    BatcherClosedError,
    BatcherConfig,
    BatcherError,
    BatcherFullError,
    BatchResultError,
    FailureMode,
    ItemTooCostlyError,
    MicroBatcher,
)
from resilience.batcher.metrics import BatcherMetrics, BoundBatcherMetrics

__all__ = [
    "BatchResultError",
    "BatcherClosedError",
    "BatcherConfig",
    "BatcherError",
    "BatcherFullError",
    "BatcherMetrics",
    "BoundBatcherMetrics",
    "FailureMode",
    "ItemTooCostlyError",
    "MicroBatcher",
]
