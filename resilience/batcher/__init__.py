"""asyncio micro-batcher: size/wait/cost flushing, bounded queue, failure isolation by bisection."""

from fleetwatch.resilience.batcher.batcher import MicroBatcher
from fleetwatch.resilience.batcher.config import (
    BatcherClosedError,
    BatcherConfig,
    BatcherError,
    BatcherFullError,
    BatchResultError,
    FailureMode,
    ItemTooCostlyError,
)
from fleetwatch.resilience.batcher.metrics import BatcherMetrics, BoundBatcherMetrics
from fleetwatch.resilience.batcher.waker import LoopWaker, Waker, WakerFactory, thread_waker

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
    "LoopWaker",
    "MicroBatcher",
    "Waker",
    "WakerFactory",
    "thread_waker",
]
