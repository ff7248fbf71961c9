"""An asyncio micro-batcher's queue and flush loop; it isolates failures and survives cancellation.

Callers ``await batcher.submit(item)``; one worker task gathers items and calls the batch function
with a list, flushing when the batch is full (size, or cost from ``cost_fn``), when the oldest item
has waited ``max_wait_s``, or when closing. Guarantees:

- A caller cancelled while waiting is dropped; the batch and the other callers are not affected.
  Results are only set on futures that are still pending.
- When the batch function raises, the default (``FailureMode.ISOLATE``) bisects the batch until the
  failing items are found: only their callers get the error. The batch function must therefore be
  safe to call again on a subset (pure or idempotent); otherwise use ``FailureMode.FAIL_BATCH``.
- The flush timer is a loop callback that sets an event; nothing is ever cancelled to flush.
  Selectors sleep in whole milliseconds, so a thread (``waker``) also wakes the loop ``spin_s``
  before the deadline and the worker yields to the loop until it is due: a lone item waits
  ``max_wait_s`` (0.5 ms means 0.5 ms), not the ~1.1 ms floor of a bare loop timer.
- ``cost_fn`` runs in the submitting caller: an exception there fails that submit only.
- The queue is bounded: a full queue rejects at once (``BatcherFullError``), never waits.
- Should the worker die of a bug, every waiting caller gets an error (nobody hangs) and the next
  submit starts a new worker.

Time is the running loop's clock (``loop.time()``), so a loop with a virtual clock drives it;
``waker`` makes the precise wake-up (a ``WakerFactory``; the default, ``thread_waker``, gives a
thread only to loops on ``time.monotonic``), so such a loop can be handed a waker on its clock.
Batches run in ``fleetwatch.resilience.batcher.runner``; configuration and errors are in ``config``.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Generic, TypeVar

from fleetwatch.resilience.batcher.config import (
    BatcherClosedError,
    BatcherConfig,
    BatcherFullError,
    ItemTooCostlyError,
)
from fleetwatch.resilience.batcher.metrics import BatcherMetrics, BoundBatcherMetrics
from fleetwatch.resilience.batcher.runner import BatchRunner, Pending
from fleetwatch.resilience.batcher.waker import WakerFactory, thread_waker
from fleetwatch.resilience.errors import ResilienceConfigError

__all__ = ["MicroBatcher"]

T = TypeVar("T")
R = TypeVar("R")
_log = logging.getLogger(__name__)


class MicroBatcher(Generic[T, R]):
    """Batch concurrent ``submit(item)`` calls into calls of ``batch_fn(items) -> results``.

    Example::

        async def embed(texts: list[str]) -> list[list[float]]: ...

        async with MicroBatcher(embed, BatcherConfig(max_batch_size=32, max_wait_s=0.01)) as b:
            vector = await b.submit("hello")

    ``batch_fn`` returns one result per item, in order. Bind the batcher to one event loop.
    ``waker(loop, name)`` makes the worker's precise wake-up (``spin_s`` before a deadline), or
    returns None to leave it to the loop timer; it is called when a worker starts.
    """

    def __init__(
        self,
        batch_fn: Callable[[list[T]], Awaitable[Sequence[R]]],
        config: BatcherConfig | None = None,
        *,
        cost_fn: Callable[[T], float] | None = None,
        metrics: BatcherMetrics | None = None,
        name: str = "default",
        waker: WakerFactory = thread_waker,
    ) -> None:
        self.config = config = config or BatcherConfig()
        if config.max_batch_cost is not None and cost_fn is None:
            raise ResilienceConfigError(f"micro-batcher {name!r}: max_batch_cost needs a cost_fn")
        self.name = name
        self._fn = batch_fn
        self._cost_fn = cost_fn
        self._make_waker = waker
        self._queue: deque[Pending[T, R]] = deque()
        self._queued_cost = 0.0
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._closing = False
        self._max_queue = config.max_queue
        self._max_size = config.max_batch_size
        self._m: BoundBatcherMetrics | None = metrics.bind(name, self._depth) if metrics else None
        self._runner = BatchRunner(batch_fn, config, name, self._m)

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
            queue.append(Pending(item, future, loop.time(), 0.0))
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
        queue.append(Pending(item, future, loop.time(), cost))
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
        spin = self.config.spin_s
        waker = self._make_waker(loop, f"micro-batcher {self.name} waker") if spin > 0.0 else None
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
                    now = loop.time()
                    if now < deadline:
                        when = deadline - spin  # sleep until then, yield from then on
                        if now >= when:
                            await asyncio.sleep(0)  # yield; the loop comes back here at once
                            if loop.time() != now:
                                continue
                            # a clock that stands still while we yield (a virtual or coarse one):
                            # only a timer moves it
                            when = deadline
                        wake.clear()
                        timer = loop.call_at(when, wake.set)
                        if waker is not None:
                            waker.arm(when, wake)
                        try:
                            await wake.wait()
                        finally:
                            timer.cancel()
                            if waker is not None:
                                waker.disarm()
                        continue
                batch = self._take()
                if batch:
                    await self._runner.run(batch, loop.time())
        finally:
            if waker is not None:
                waker.close()
            self._fail_queued(BatcherClosedError(f"micro-batcher {self.name!r}: worker stopped"))

    def _take(self) -> list[Pending[T, R]]:
        queue = self._queue
        cfg = self.config
        limit = cfg.max_batch_cost
        batch: list[Pending[T, R]] = []
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
