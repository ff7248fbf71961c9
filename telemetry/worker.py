"""A bounded queue drained by one daemon thread: the producer never blocks, overflow is counted.

Used wherever the step loop hands work to slower code (span building and export, record files).
The producer's ``submit`` is a deque append and a length check; when the queue is full the item is
dropped and counted, never waited for. A handler that raises loses its batch (counted) and the
worker keeps running.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from fleetwatch.telemetry.metrics.drops import DropCounter

__all__ = ["BoundedWorker"]

T = TypeVar("T")
_log = logging.getLogger(__name__)


class BoundedWorker(Generic[T]):
    """Calls ``handler(batch)`` on a background thread with up to ``max_batch`` queued items.

    Threading: ``submit`` may be called from any thread and never blocks or raises; ``flush``
    waits (up to ``timeout`` s) until everything submitted before it was handled; ``close`` drains
    and stops the thread. Drops (full queue, handler failure) are counted under ``stage``; a
    handler exception with an integer ``lost`` attribute counts that many instead of the batch.
    ``on_idle`` (optional) runs on the worker thread after every wake-up that found nothing to do,
    at least every ``interval_s``: time-based work, such as sealing an aged file, happens without
    traffic.
    """

    def __init__(
        self,
        handler: Callable[[Sequence[T]], None],
        *,
        stage: str,
        drops: DropCounter,
        max_queue: int = 8192,
        max_batch: int = 512,
        interval_s: float = 0.5,
        name: str = "fleetwatch-telemetry",
        on_idle: Callable[[], None] | None = None,
    ) -> None:
        self.handler = handler
        self.on_idle = on_idle
        self.stage = stage
        self.drops = drops
        self.max_queue = max_queue
        self.max_batch = max_batch
        self.interval_s = interval_s
        self._queue: deque[T] = deque()
        self._wake = threading.Event()
        self._cond = threading.Condition()
        self._submitted = 0
        self._done = 0
        self._closed = False
        self._failures_logged = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: T) -> None:
        if self._closed or len(self._queue) >= self.max_queue:
            self.drops.add(self.stage)
            return
        self._queue.append(item)
        self._submitted += 1
        if len(self._queue) >= self.max_batch:
            self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if not self._queue and self.on_idle is not None:
                self._idle()
            self._drain()
            if self._closed and not self._queue:
                self._drain()
                return

    def _idle(self) -> None:
        assert self.on_idle is not None
        try:
            self.on_idle()
        except Exception:
            if self._failures_logged < 3:
                self._failures_logged += 1
                _log.warning("telemetry %s idle work failed", self.stage, exc_info=True)

    def _drain(self) -> None:
        q = self._queue
        while q:
            batch: list[T] = []
            while q and len(batch) < self.max_batch:
                batch.append(q.popleft())
            try:
                self.handler(batch)
            except Exception as exc:
                # A handler may say how many items it lost (a sink losing a buffered file).
                lost = getattr(exc, "lost", None)
                self.drops.add(self.stage, lost if isinstance(lost, int) else len(batch))
                if self._failures_logged < 3:
                    self._failures_logged += 1
                    _log.warning(
                        "telemetry %s handler failed; batch dropped", self.stage, exc_info=True
                    )
            with self._cond:
                self._done += len(batch)
                self._cond.notify_all()

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until every item submitted so far was handled (or dropped); False on timeout."""
        target = self._submitted
        self._wake.set()
        with self._cond:
            return self._cond.wait_for(lambda: self._done >= target, timeout)

    @property
    def pending(self) -> int:
        """Items submitted and not handled yet."""
        return len(self._queue)

    def close(self, timeout: float | None = 30.0) -> bool:
        """Stop taking items, handle what is queued and end the thread; False when the thread
        was still busy after ``timeout`` seconds (it is a daemon: it never holds up the exit)."""
        self._closed = True
        self._wake.set()
        self._thread.join(timeout)
        return not self._thread.is_alive()
