"""One batch through the batch function: its call, its results, bisection of a failing batch.

With ``FailureMode.ISOLATE`` a batch whose function raises is halved and each half run again,
down to single items, so only the failing items' callers get the error; with
``FailureMode.FAIL_BATCH`` every caller in the batch gets it. Results are set only on futures that
are still pending (a cancelled caller is counted, not answered).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from fleetwatch.resilience.batcher.config import (
    BatcherConfig,
    BatcherError,
    BatchResultError,
    FailureMode,
)
from fleetwatch.resilience.batcher.metrics import BoundBatcherMetrics

__all__ = ["BatchRunner", "Pending"]

T = TypeVar("T")
R = TypeVar("R")


class Pending(Generic[T, R]):
    """One queued item and the future its caller waits on."""

    __slots__ = ("cost", "enqueued", "future", "item")

    def __init__(self, item: T, future: asyncio.Future[R], enqueued: float, cost: float) -> None:
        self.item = item
        self.future = future
        self.enqueued = enqueued
        self.cost = cost


class BatchRunner(Generic[T, R]):
    """Runs batches for one ``MicroBatcher``: one batch at a time, from its worker task."""

    def __init__(
        self,
        batch_fn: Callable[[list[T]], Awaitable[Sequence[R]]],
        config: BatcherConfig,
        name: str,
        metrics: BoundBatcherMetrics | None,
    ) -> None:
        self._fn = batch_fn
        self._config = config
        self._name = name
        self._m = metrics

    async def run(self, batch: list[Pending[T, R]], now: float) -> None:
        """Run ``batch`` (taken from the queue at ``now``) and settle its futures."""
        m = self._m
        if m is not None:
            m.batch_size.observe(len(batch))
            m.fill_ratio.observe(len(batch) / self._config.max_batch_size)
            for pending in batch:
                m.queue_wait.observe(now - pending.enqueued)
        if self._config.failure_mode is FailureMode.FAIL_BATCH:
            try:
                results = await self._invoke(batch)
            except Exception as exc:
                self._settle_error(batch, exc)
            else:
                self._settle(batch, results)
        else:
            await self._isolate(batch)

    async def _invoke(self, batch: list[Pending[T, R]]) -> Sequence[R]:
        try:
            results = await self._fn([p.item for p in batch])
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the worker itself is being cancelled
            error = BatcherError(f"micro-batcher {self._name!r}: the batch function was cancelled")
            self._count_batch_failure()
            raise error from None
        except Exception:
            self._count_batch_failure()
            raise
        if len(results) != len(batch):
            self._count_batch_failure()
            raise BatchResultError(
                f"micro-batcher {self._name!r}: batch function returned {len(results)} results for {len(batch)} items"
            )
        return results

    def _count_batch_failure(self) -> None:
        if self._m is not None:
            self._m.batch_failures.inc()

    async def _isolate(self, batch: list[Pending[T, R]]) -> None:
        live = [p for p in batch if not p.future.done()]
        self._count_cancelled(len(batch) - len(live))
        if not live:
            return
        try:
            results = await self._invoke(live)
        except Exception as exc:
            if len(live) == 1:
                self._settle_error(live, exc)
                return
            middle = len(live) // 2
            await self._isolate(live[:middle])
            await self._isolate(live[middle:])
            return
        self._settle(live, results)

    def _settle(self, batch: list[Pending[T, R]], results: Sequence[R]) -> None:
        done = 0
        for pending, result in zip(batch, results, strict=True):
            if not pending.future.done():
                pending.future.set_result(result)
                done += 1
        if self._m is not None:
            self._m.success.inc(done)
            if done < len(batch):
                self._m.cancelled.inc(len(batch) - done)

    def _settle_error(self, batch: list[Pending[T, R]], error: BaseException) -> None:
        failed = 0
        for pending in batch:
            if not pending.future.done():
                pending.future.set_exception(error)
                failed += 1
        if self._m is not None:
            self._m.failure.inc(failed)

    def _count_cancelled(self, n: int) -> None:
        if self._m is not None and n:
            self._m.cancelled.inc(n)
