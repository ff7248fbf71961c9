"""An asyncio micro-batcher that isolates failures and survives cancellation.

Callers ``await batcher.submit(item)``; one worker task gathers items and calls the batch function
with a list, flushing when the batch is full (size, or cost from ``cost_fn``), when the oldest item
has waited ``max_wait_s``, or when closing. Guarantees:

- A caller cancelled while waiting is dropped; the batch and the other callers are not affected.
  Results are only set on futures that are still pending.
- When the batch function raises, the default (``FailureMode.ISOLATE``) bisects the batch until the
  failing items are found: only their callers get the error. The batch function must therefore be
  safe to call again on a subset (pure or idempotent); otherwise use ``FailureMode.FAIL_BATCH``.
- The flush timer is a loop callback that sets an event; nothing is ever cancelled to flush.
- ``cost_fn`` runs in the submitting caller: an exception there fails that submit only.
- The queue is bounded: a full queue rejects at once (``BatcherFullError``), never waits.
- Should the worker die of a bug, every waiting caller gets an error (nobody hangs) and the next
  submit starts a new worker.

Time is the running loop's clock (``loop.time()``), so a loop with a virtual clock drives it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Generic, TypeVar

from resilience.batcher.metrics import BatcherMetrics, BoundBatcherMetrics
from resilience.errors import ResilienceConfigError

__all__ = [
    "BatchResultError",
    "BatcherClosedError",
    "BatcherConfig",
    "BatcherError",
    "BatcherFullError",
    "FailureMode",
    "ItemTooCostlyError",
    "MicroBatcher",
]

T = TypeVar("T")
R = TypeVar("R")
_log = logging.getLogger(__name__)


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
    caps the summed cost of a batch, e.g. tokens for ragged inputs; ``max_queue`` items wait at most."""

    max_batch_size: int = 64
    max_wait_s: float = 0.005
    max_queue: int = 10_000
    max_batch_cost: float | None = None
    failure_mode: FailureMode = FailureMode.ISOLATE

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
        if self.max_queue < 1:
            raise ResilienceConfigError(f"{where}: max_queue must be >= 1, got {self.max_queue}")
        if self.max_batch_cost is not None and not self.max_batch_cost > 0.0:
            raise ResilienceConfigError(
                f"{where}: max_batch_cost must be > 0, got {self.max_batch_cost}"
            )


class _Pending(Generic[T, R]):
    __slots__ = ("cost", "enqueued", "future", "item")

    def __init__(self, item: T, future: asyncio.Future[R], enqueued: float, cost: float) -> None:
        self.item = item
        self.future = future
        self.enqueued = enqueued
        self.cost = cost


class MicroBatcher(Generic[T, R]):
    """Batch concurrent ``submit(item)`` calls into calls of ``batch_fn(items) -> results``.

    Example::

        async def embed(texts: list[str]) -> list[list[float]]: ...

        async with MicroBatcher(embed, BatcherConfig(max_batch_size=32, max_wait_s=0.01)) as b:
            vector = await b.submit("hello")

    ``batch_fn`` returns one result per item, in order. Bind the batcher to one event loop.
    """

    def __init__(
        self,
        batch_fn: Callable[[list[T]], Awaitable[Sequence[R]]],
        config: BatcherConfig | None = None,
        *,
        cost_fn: Callable[[T], float] | None = None,
        metrics: BatcherMetrics | None = None,
        name: str = "default",
    ) -> None:
        self.config = config = config or BatcherConfig()
        if config.max_batch_cost is not None and cost_fn is None:
            raise ResilienceConfigError(f"micro-batcher {name!r}: max_batch_cost needs a cost_fn")
        self.name = name
        self._fn = batch_fn
        self._cost_fn = cost_fn
        self._queue: deque[_Pending[T, R]] = deque()
        self._queued_cost = 0.0
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._closing = False
        self._max_queue = config.max_queue
        self._max_size = config.max_batch_size
        self._m: BoundBatcherMetrics | None = metrics.bind(name, self._depth) if metrics else None

    def _depth(self) -> float:
        return float(len(self._queue))

    @property
    def depth(self) -> int:
        """Items waiting (cancelled ones not yet dropped included)."""
        return len(self._queue)

    @property
    def closed(self) -> bool:
        return self._closing

    # ----- callers -----------------------------------------------------------------------------

    async def submit(self, item: T) -> R:
        """Queue ``item`` and wait for its result (or its own error)."""
        queue = self._queue
        if self._cost_fn is None and not self._closing and len(queue) < self._max_queue:
            loop = asyncio.get_running_loop()
            worker = self._worker
            if worker is None or worker.done():
                self._start(loop)
            future: asyncio.Future[R] = loop.create_future()
            queue.append(_Pending(item, future, loop.time(), 0.0))
            n = len(queue)
            if n == 1 or n >= self._max_size:
                self._wake.set()
            return await future
        return await self._submit_checked(item)

    async def _submit_checked(self, item: T) -> R:
        m = self._m
        if self._closing:
            if m is not None:
                m.rejected["closed"].inc()
            raise BatcherClosedError(f"micro-batcher {self.name!r} is closed")
        cfg = self.config
        cost = 0.0
        if self._cost_fn is not None:
            try:
                cost = float(self._cost_fn(item))
            except Exception:
                if m is not None:
                    m.rejected["cost_error"].inc()
                raise
            if cfg.max_batch_cost is not None and cost > cfg.max_batch_cost:
                if m is not None:
                    m.rejected["too_costly"].inc()
                raise ItemTooCostlyError(
                    f"micro-batcher {self.name!r}: item cost {cost} is over max_batch_cost {cfg.max_batch_cost}"
                )
        queue = self._queue
        if len(queue) >= cfg.max_queue:
            if m is not None:
                m.rejected["full"].inc()
            raise BatcherFullError(
                f"micro-batcher {self.name!r}: queue full ({cfg.max_queue} items)"
            )
        loop = asyncio.get_running_loop()
        worker = self._worker
        if worker is None or worker.done():
            self._start(loop)
        future: asyncio.Future[R] = loop.create_future()
        queue.append(_Pending(item, future, loop.time(), cost))
        self._queued_cost += cost
        if len(queue) == 1 or self._full():
            self._wake.set()
        return await future

    async def close(self, *, drain: bool = True) -> None:
        """Stop taking items; run what is queued (``drain``) or fail it with BatcherClosedError.

        Waits for the batch in flight. Cancelling the caller of ``close`` does not stop the worker.
        """
        self._closing = True
        closed = BatcherClosedError(f"micro-batcher {self.name!r} closed before the item ran")
        if not drain:
            self._fail_queued(closed)
        self._wake.set()
        worker = self._worker
        if worker is not None and not worker.done():
            await asyncio.shield(worker)
        self._fail_queued(closed)

    async def __aenter__(self) -> MicroBatcher[T, R]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close(drain=exc is None)

    # ----- worker ------------------------------------------------------------------------------

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._wake = asyncio.Event()
        if self._queue:
            self._wake.set()
        task = loop.create_task(self._run(), name=f"micro-batcher {self.name}")
        task.add_done_callback(self._worker_done)
        self._worker = task

    def _worker_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            _log.error("micro-batcher %r: worker stopped", self.name, exc_info=task.exception())

    def _fail_queued(self, error: BaseException) -> None:
        while self._queue:
            pending = self._queue.popleft()
            if not pending.future.done():
                pending.future.set_exception(error)
        self._queued_cost = 0.0

    def _drop_cancelled_head(self) -> None:
        queue = self._queue
        while queue and queue[0].future.done():
            self._queued_cost -= queue.popleft().cost
            self._count_cancelled(1)

    def _count_cancelled(self, n: int) -> None:
        if self._m is not None and n:
            self._m.cancelled.inc(n)

    def _full(self) -> bool:
        cfg = self.config
        return len(self._queue) >= cfg.max_batch_size or (
            cfg.max_batch_cost is not None and self._queued_cost >= cfg.max_batch_cost
        )

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        wake = self._wake
        queue = self._queue
        max_wait = self.config.max_wait_s
        try:
            while True:
                self._drop_cancelled_head()
                if not queue:
                    if self._closing:
                        return
                    wake.clear()
                    await wake.wait()
                    continue
                if not self._closing and not self._full():
                    deadline = queue[0].enqueued + max_wait
                    if loop.time() < deadline:
                        wake.clear()
                        timer = loop.call_at(deadline, wake.set)
                        try:
                            await wake.wait()
                        finally:
                            timer.cancel()
                        continue
                batch = self._take()
                if batch:
                    await self._execute(batch, loop.time())
        finally:
            self._fail_queued(BatcherClosedError(f"micro-batcher {self.name!r}: worker stopped"))

    def _take(self) -> list[_Pending[T, R]]:
        queue = self._queue
        cfg = self.config
        limit = cfg.max_batch_cost
        batch: list[_Pending[T, R]] = []
        if limit is None:
            size = cfg.max_batch_size
            popleft = queue.popleft
            append = batch.append
            dropped = 0
            while queue and len(batch) < size:
                pending = popleft()
                if pending.future.done():
                    dropped += 1
                else:
                    append(pending)
            self._count_cancelled(dropped)
            return batch
        cost = 0.0
        while queue and len(batch) < cfg.max_batch_size:
            pending = queue[0]
            if pending.future.done():
                self._queued_cost -= queue.popleft().cost
                self._count_cancelled(1)
                continue
            if batch and cost + pending.cost > limit:
                break
            queue.popleft()
            self._queued_cost -= pending.cost
            cost += pending.cost
            batch.append(pending)
        if not queue:
            self._queued_cost = 0.0  # no float drift
        return batch

    async def _execute(self, batch: list[_Pending[T, R]], now: float) -> None:
        m = self._m
        if m is not None:
            m.batch_size.observe(len(batch))
            m.fill_ratio.observe(len(batch) / self.config.max_batch_size)
            for pending in batch:
                m.queue_wait.observe(now - pending.enqueued)
        if self.config.failure_mode is FailureMode.FAIL_BATCH:
            try:
                results = await self._invoke(batch)
            except Exception as exc:
                self._settle_error(batch, exc)
            else:
                self._settle(batch, results)
        else:
            await self._isolate(batch)

    async def _invoke(self, batch: list[_Pending[T, R]]) -> Sequence[R]:
        try:
            results = await self._fn([p.item for p in batch])
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the worker itself is being cancelled
            error = BatcherError(f"micro-batcher {self.name!r}: the batch function was cancelled")
            self._count_batch_failure()
            raise error from None
        except Exception:
            self._count_batch_failure()
            raise
        if len(results) != len(batch):
            self._count_batch_failure()
            raise BatchResultError(
                f"micro-batcher {self.name!r}: batch function returned {len(results)} results for {len(batch)} items"
            )
        return results

    def _count_batch_failure(self) -> None:
        if self._m is not None:
            self._m.batch_failures.inc()

    async def _isolate(self, batch: list[_Pending[T, R]]) -> None:
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

    def _settle(self, batch: list[_Pending[T, R]], results: Sequence[R]) -> None:
        done = 0
        for pending, result in zip(batch, results, strict=True):
            if not pending.future.done():
                pending.future.set_result(result)
                done += 1
        if self._m is not None:
            self._m.success.inc(done)
            if done < len(batch):
                self._m.cancelled.inc(len(batch) - done)

    def _settle_error(self, batch: list[_Pending[T, R]], error: BaseException) -> None:
        failed = 0
        for pending in batch:
            if not pending.future.done():
                pending.future.set_exception(error)
                failed += 1
        if self._m is not None:
            self._m.failure.inc(failed)
