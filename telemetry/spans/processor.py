"""A span processor with a bounded queue whose drops are counted, for an engine's step loop.

The SDK's ``BatchSpanProcessor`` also drops when full, but only logs it; here every span that
does not reach an exporter (full queue, exporter raising or returning FAILURE) is counted in
``fleetwatch_telemetry_dropped_total{stage="spans"}``.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from telemetry.metrics.drops import DropCounter
from telemetry.worker import BoundedWorker

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
    ) -> None:
        self.exporter = exporter
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
        self._worker.close()
        self.exporter.shutdown()
