"""The micro-batcher's configuration, its failure modes and the errors its callers can get."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from fleetwatch.resilience.errors import ResilienceConfigError

__all__ = [
    "BatchResultError",
    "BatcherClosedError",
    "BatcherConfig",
    "BatcherError",
    "BatcherFullError",
    "FailureMode",
    "ItemTooCostlyError",
]


class BatcherError(Exception):
    """A submission was refused or could not be completed."""


class BatcherFullError(BatcherError):
    """The queue was full; the item was not queued."""


class BatcherClosedError(BatcherError):
    """The batcher was closed (or its worker stopped) before the item ran."""


class ItemTooCostlyError(BatcherError):
    """The item's cost alone is over the batch cost budget, so no batch could hold it."""


class BatchResultError(BatcherError):
    """The batch function returned a number of results different from the number of items."""


class FailureMode(enum.Enum):
    ISOLATE = "isolate"  # bisect: only failing items' callers get the error
    FAIL_BATCH = "fail_batch"  # every caller in the batch gets the error


@dataclass(frozen=True, slots=True)
class BatcherConfig:
    """``max_wait_s`` counts from the oldest waiting item; ``max_batch_cost`` (with ``cost_fn``)
    caps the summed cost of a batch, e.g. tokens for ragged inputs; ``max_queue`` items wait at most.

    ``spin_s``: asyncio's selector loops sleep in whole milliseconds (epoll, poll), so a loop
    timer alone fires up to ~1 ms late and never sooner than ~1 ms after it was set. The worker
    therefore also arms a thread (``fleetwatch.resilience.batcher.waker``) to wake the loop ``spin_s`` before
    the deadline, then yields to the loop (``asyncio.sleep(0)``; other tasks and I/O keep running)
    until the deadline; the spin absorbs the thread's wake-up lag. Each flush made by the deadline
    costs up to ``spin_s`` of CPU plus one thread wake-up (tens of µs); flushes of full batches
    cost nothing extra. 0 turns both off and leaves the loop timer alone: the cheapest, with
    deadlines up to ~1 ms late (any wait under 1 ms takes ~1.1 ms). On a loop whose clock is not
    ``time.monotonic`` (a virtual clock; uvloop) only the loop timer and the spin are used, unless
    the batcher is given a waker on that clock (``MicroBatcher(waker=...)``).
    """

    max_batch_size: int = 64
    max_wait_s: float = 0.005
    max_queue: int = 10_000
    max_batch_cost: float | None = None
    failure_mode: FailureMode = FailureMode.ISOLATE
    spin_s: float = 0.0002

    def __post_init__(self) -> None:
        where = "micro-batcher config"
        if self.max_batch_size < 1:
            raise ResilienceConfigError(
                f"{where}: max_batch_size must be >= 1, got {self.max_batch_size}"
            )
        if not self.max_wait_s >= 0.0 or math.isinf(self.max_wait_s):
            raise ResilienceConfigError(
                f"{where}: max_wait_s must be a finite number >= 0, got {self.max_wait_s}"
            )
        if not 0.0 <= self.spin_s <= 0.1:
            raise ResilienceConfigError(
                f"{where}: spin_s must be between 0 and 0.1 seconds, got {self.spin_s}"
            )
        if self.max_queue < 1:
            raise ResilienceConfigError(f"{where}: max_queue must be >= 1, got {self.max_queue}")
        if self.max_batch_cost is not None and not self.max_batch_cost > 0.0:
            raise ResilienceConfigError(
                f"{where}: max_batch_cost must be > 0, got {self.max_batch_cost}"
            )
