"""What the vLLM plugin does with finished requests, kept free of vLLM so it is tested without it.

``observe`` runs on vLLM's output-handling loop: it counts outcomes and goodput (a few dict
updates) and hands each finished request to a ``BoundedWorker``, which never blocks and counts
what it drops. The worker thread rebuilds records (``reconstruct.py``), writes them through a
``RecordSink`` and builds spans with the shared ``SpanBuilder``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.trace import TracerProvider
from opentelemetry.util.types import AttributeValue
from prometheus_client import REGISTRY, CollectorRegistry

from fleetwatch.core.records import RequestRecord, Status
from fleetwatch.telemetry.adapters.vllm.metrics import OutcomeMetrics
from fleetwatch.telemetry.adapters.vllm.reconstruct import (
    FinishedRequest,
    operation_of,
    outcome_of,
    phases_of,
    record_from_finished,
)
from fleetwatch.telemetry.adapters.vllm.settings import AdapterSettings
from fleetwatch.telemetry.hooks import RequestInfo
from fleetwatch.telemetry.metrics.drops import DropCounter
from fleetwatch.telemetry.request_state import RequestState
from fleetwatch.telemetry.sink.records import RecordSink, RotatingRecordSink
from fleetwatch.telemetry.spans.builder import SpanBuilder
from fleetwatch.telemetry.spans.provider import tracer_provider as provider_from_env
from fleetwatch.telemetry.worker import BoundedWorker

__all__ = ["VllmExporter", "meets_goodput"]

Finished = tuple[float, int, FinishedRequest]
"""(iteration timestamp, engine index, vLLM's FinishedRequestStats)."""


def meets_goodput(f: FinishedRequest, targets: tuple[float, float]) -> bool:
    """Whether a finished request was ok and met both (TTFT s, TPOT s) targets, judged on the
    same reconstructed TTFT and TPOT its record carries."""
    status, _, _ = outcome_of(f)
    if status is not Status.OK or f.num_generation_tokens <= 0:
        return False
    p = phases_of(f, 0.0)
    assert p.first_token_s is not None
    ttft_target, tpot_target = targets
    if p.first_token_s - p.arrival_s > ttft_target:
        return False
    n = f.num_generation_tokens
    return n < 2 or (p.finished_s - p.first_token_s) / (n - 1) <= tpot_target


class _VllmState(RequestState):
    """A ``RequestState`` with vLLM-only span attributes."""

    __slots__ = ("extra",)

    def __init__(self, t: float, info: RequestInfo) -> None:
        super().__init__(t, info, None, gaps=False)
        self.extra: dict[str, AttributeValue] = {}


class _VllmSpanBuilder(SpanBuilder):
    def attributes(self, s: RequestState) -> dict[str, AttributeValue]:
        attrs = super().attributes(s)
        if isinstance(s, _VllmState):
            attrs.update(s.extra)
        return attrs


def state_for_span(
    record: RequestRecord, f: FinishedRequest, engine_idx: int, now_s: float
) -> RequestState:
    """The span builder's input for one record (times stay wall seconds: offset 0)."""
    info = RequestInfo(
        request_id=record.request_id,
        prompt_tokens=record.prompt_tokens,
        max_tokens=int(getattr(f, "max_tokens_param", None) or 0),
        traffic_class=record.traffic_class,
        operation=operation_of(record.request_id),
    )
    s = _VllmState(record.arrival_s, info)
    s.scheduled = record.scheduled_s
    s.first_token = record.first_token_s
    s.finished = s.last_token = record.finished_s
    s.status = record.status.value
    s.finish_reason = record.finish_reason
    s.error_type = record.error_type
    s.output_tokens = record.output_tokens
    s.cached_tokens = record.cached_prompt_tokens
    s.prefill_tokens = record.prompt_tokens - record.cached_prompt_tokens
    s.preemptions = record.preemptions
    p = phases_of(f, now_s)
    s.extra = {
        "fleetwatch.vllm.engine": engine_idx,
        "fleetwatch.vllm.queued_s": p.queued_s,
        "fleetwatch.vllm.frontend_s": p.frontend_s,
        "fleetwatch.vllm.derived_times": ("scheduled", "first_token"),
    }
    return s


class VllmExporter:
    """Records, spans and outcome metrics for one vLLM front end (all its DP engines).

    ``registry`` (default: prometheus_client's global one, which vLLM serves on /metrics) gets
    the ``OutcomeMetrics`` collector; ``sink`` and ``tracer_provider`` override what
    ``settings`` would build (tests pass in-memory ones).
    """

    def __init__(
        self,
        settings: AdapterSettings,
        *,
        model: str,
        engines: Sequence[int] = (0,),
        registry: CollectorRegistry | None = None,
        sink: RecordSink | None = None,
        tracer_provider: TracerProvider | None = None,
        env: Mapping[str, str] | None = None,
        max_queue: int = 8192,
    ) -> None:
        self.settings = settings
        self.model = model
        self.engines = list(engines) or [0]
        self.drops = DropCounter()
        self.goodput = settings.goodput
        self.metrics: OutcomeMetrics | None = None
        self._registry = registry if registry is not None else REGISTRY
        if settings.metrics:
            self.metrics = OutcomeMetrics(
                model, self.engines, goodput=settings.goodput is not None, drops=self.drops
            )
            self._registry.register(self.metrics)
        if sink is None and settings.records_dir is not None:
            sink = RotatingRecordSink(
                settings.records_dir,
                fmt=settings.records_format,
                max_age_s=settings.records_max_age_s,
                prefix=f"vllm-{os.getpid()}",
            )
        self.sink = sink
        self._owned: SdkTracerProvider | None = None
        if tracer_provider is None:
            self._owned = provider_from_env(
                env=env,
                span_file=settings.span_file,
                drops=self.drops,
                service_name="vllm",
                max_queue=max_queue,
            )
            tracer_provider = self._owned
        self.builder: SpanBuilder | None = None
        if tracer_provider is not None:
            self.builder = _VllmSpanBuilder(
                tracer_provider.get_tracer("fleetwatch.vllm"),
                model=model,
                replica=settings.replica,
                offset_s=0.0,
                provider_name="vllm",
            )
        self._worker: BoundedWorker[Finished] | None = None
        if self.sink is not None or self.builder is not None:
            sink_ref = self.sink
            self._worker = BoundedWorker(
                self._handle,
                stage="requests",
                drops=self.drops,
                max_queue=max_queue,
                name="fleetwatch-vllm",
                on_idle=(lambda: sink_ref.write(())) if sink_ref is not None else None,
            )

    # --- hot path: vLLM's output loop -----------------------------------------------------------

    def observe(self, now_s: float, engine_idx: int, finished: Sequence[Any]) -> None:
        """Requests vLLM reported finished at ``now_s`` (its iteration timestamp)."""
        m = self.metrics
        targets = self.goodput
        worker = self._worker
        for f in finished:
            if m is not None:
                status, reason, _ = outcome_of(f)
                good = targets is not None and meets_goodput(f, targets)
                m.count(engine_idx, status.value, reason, good=good)
            if worker is not None:
                worker.submit((now_s, engine_idx, f))

    def rejected(self, engine_idx: int | None = None) -> None:
        """One request refused at admission (it never reached an engine)."""
        if self.metrics is not None:
            idx = self.engines[0] if engine_idx is None else engine_idx
            self.metrics.count(idx, Status.REJECTED.value, "none", good=False)

    # --- worker thread --------------------------------------------------------------------------

    def _handle(self, batch: Sequence[Finished]) -> None:
        records: list[RequestRecord] = []
        n = len(self.engines)
        for now_s, engine_idx, f in batch:
            record = record_from_finished(
                f,
                now_s,
                model=self.model,
                replica=self.settings.replica_for(engine_idx, n),
                traffic_class=self.settings.traffic_class,
            )
            if self.builder is not None:
                trace = self.builder.emit(state_for_span(record, f, engine_idx, now_s))
                if trace is not None:
                    record = dataclasses.replace(record, trace_id=trace)
            records.append(record)
        if self.sink is not None:
            self.sink.write(records)

    # --- lifecycle ------------------------------------------------------------------------------

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Write every request observed so far (records sealed into a file, spans exported)."""
        ok = True
        if self._worker is not None:
            ok = self._worker.flush(timeout)
        if self.sink is not None and ok:
            self.sink.flush()
        if self._owned is not None and ok:
            ok = self._owned.force_flush(30_000 if timeout is None else int(timeout * 1000))
        return ok

    def close(self, timeout: float | None = 30.0) -> None:
        """Drain and stop; records still buffered are written. Safe to call twice."""
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.close(timeout)
        if self.sink is not None:
            self.sink.close()
        if self._owned is not None:
            self._owned.shutdown()
            self._owned = None
        if self.metrics is not None:
            with contextlib.suppress(KeyError):
                self._registry.unregister(self.metrics)
            self.metrics = None
