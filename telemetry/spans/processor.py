"""A span processor with a bounded queue whose drops are counted, for an engine's step loop.

The SDK's ``BatchSpanProcessor`` also drops when full, but only logs it; here every span that
does not reach an exporter (full queue, exporter raising or returning FAILURE) is counted in
``fleetwatch_telemetry_dropped_total{stage="spans"}``.

``shutdown`` is bounded by ``shutdown_timeout_s`` (default 5 s) whatever the exporter does: an
OTLP collector that accepts connections and never answers would otherwise hold it for the
exporter's own timeout and retries. Spans not exported by then are counted as dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from fleetwatch.core.deadline import Deadline, run_bounded
from fleetwatch.telemetry.metrics.drops import DropCounter
from fleetwatch.telemetry.worker import BoundedWorker

__all__ = ["BoundedSpanProcessor"]


class BoundedSpanProcessor(SpanProcessor):
    """Queue ended spans (never blocking) and export them in batches on a background thread.

    >>> from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    >>> p = BoundedSpanProcessor(InMemorySpanExporter(), max_queue=1024)
    >>> p.shutdown()
    """

    STAGE = "spans"

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        drops: DropCounter | None = None,
        max_queue: int = 8192,
        max_batch: int = 512,
        interval_s: float = 1.0,
        shutdown_timeout_s: float = 5.0,
    ) -> None:
        self.exporter = exporter
        self.shutdown_timeout_s = shutdown_timeout_s
        self._shut = False
        self.drops = drops if drops is not None else DropCounter()
        self._worker: BoundedWorker[ReadableSpan] = BoundedWorker(
            self._export,
            stage=self.STAGE,
            drops=self.drops,
            max_queue=max_queue,
            max_batch=max_batch,
            interval_s=interval_s,
            name="fleetwatch-span-export",
        )

    @property
    def interval_s(self) -> float:
        """Seconds between exports when the queue does not fill a batch sooner."""
        return self._worker.interval_s

    def _export(self, batch: Sequence[ReadableSpan]) -> None:
        result = self.exporter.export(batch)
        if result is not SpanExportResult.SUCCESS:
            self.drops.add(self.STAGE, len(batch))

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        self._worker.submit(span)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._worker.flush(timeout_millis / 1000.0)

    def shutdown(self) -> None:
        """Export what is queued and shut the exporter down, within ``shutdown_timeout_s``;
        a second call returns at once (the SDK calls it again at exit)."""
        if self._shut:
            return
        self._shut = True
        deadline = Deadline.after(self.shutdown_timeout_s)
        self._worker.close(deadline.left())
        left = self._worker.pending
        if left:
            self.drops.add(self.STAGE, left)
        run_bounded(self.exporter.shutdown, deadline.left(), "span-exporter-shutdown")
