"""Attach telemetry to an engine: the public entry point and its handle."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.trace import TracerProvider
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.registry import Collector

from fleetwatch.core.deadline import Deadline, run_bounded
from fleetwatch.core.records import RequestRecord, Status
from fleetwatch.telemetry.instrument.observer import TelemetryObserver
from fleetwatch.telemetry.metrics.drops import DropCounter
from fleetwatch.telemetry.metrics.serving import Series, ServingMetrics
from fleetwatch.telemetry.request_state import RequestState, record_gaps
from fleetwatch.telemetry.sink.records import RecordSink
from fleetwatch.telemetry.spans.builder import SpanBuilder
from fleetwatch.telemetry.spans.provider import tracer_provider as provider_from_env
from fleetwatch.telemetry.worker import BoundedWorker

__all__ = ["Instrumentation", "instrument"]

_log = logging.getLogger(__name__)


class _Attachable(Protocol):
    def attach(self, observer: Any) -> Callable[[], None]: ...


class _BackgroundCollector(Collector, Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


class Instrumentation:
    """The handle ``instrument`` returns: flush, detach, and the parts for inspection.

    ``observer`` is what the engine calls; ``metrics`` the registered collector (None when metrics
    are off); ``drops`` counts what was dropped rather than slowing the engine.
    """

    def __init__(
        self,
        *,
        observer: TelemetryObserver,
        engine: _Attachable,
        detach_engine: Callable[[], None],
        metrics: ServingMetrics | None,
        registry: CollectorRegistry | None,
        worker: BoundedWorker[RequestState] | None,
        record_sink: RecordSink | None,
        gpu: _BackgroundCollector | None,
        drops: DropCounter,
        capture_text: bool,
        offset_s: float,
        owned_provider: SdkTracerProvider | None = None,
        shutdown_timeout_s: float = 5.0,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        self.observer = observer
        self.tracer_provider = tracer_provider
        """The provider spans go to (given or built from the environment); None: no spans."""
        self.shutdown_timeout_s = shutdown_timeout_s
        """The default deadline of ``detach`` (seconds)."""
        self.shutdown_failures: dict[str, int] = {}
        """Detach steps (requests, records, spans, gpu) that failed or ran past the deadline."""
        self.metrics = metrics
        self.registry = registry
        self.record_sink = record_sink
        self.gpu = gpu
        self.drops = drops
        self.capture_text = capture_text
        self.offset_s = offset_s
        """Epoch seconds minus engine-clock seconds, captured when instrumenting."""
        self._worker = worker
        self._owned_provider = owned_provider
        self._detach_engine: Callable[[], None] | None = detach_engine
        self._engine = engine
        self._detached = False

    @property
    def attached(self) -> bool:
        """Whether the observer is attached to the engine right now."""
        return self._detach_engine is not None

    def pause(self) -> None:
        """Stop observing (telemetry off: the engine is back to its no-observer path) while
        keeping metrics, exporters and sinks. Requests in flight are forgotten: they get no span
        or record. ``resume`` re-attaches."""
        if self._detach_engine is not None:
            self._detach_engine()
            self._detach_engine = None
            self.observer.requests.clear()

    def resume(self) -> None:
        """Observe the engine again after ``pause`` (requests already running are ignored)."""
        if self._detach_engine is None and not self._detached:
            self._detach_engine = self._engine.attach(self.observer)

    def annotate_text(
        self, request_id: str, *, input_text: str | None = None, output_text: str | None = None
    ) -> None:
        """Attach prompt/output text to a live request's span. Ignored unless ``capture_text``:
        text never reaches metrics or records, and reaches spans only when opted in."""
        if not self.capture_text:
            return
        s = self.observer.requests.get(request_id)
        if s is None:
            return
        if s.text is None:
            s.text = {}
        if input_text is not None:
            s.text["input"] = input_text
        if output_text is not None:
            s.text["output"] = output_text

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Bin pending metric observations and hand every finished request to its spans and
        records; False when the export side did not catch up within ``timeout`` seconds."""
        if self.metrics is not None:
            self.metrics.flush()
        ok = True
        if self._worker is not None:
            ok = self._worker.flush(timeout)
        if self.record_sink is not None and ok:
            self.record_sink.flush()
        if self._owned_provider is not None and ok:
            ms = 30_000 if timeout is None else int(timeout * 1000)
            ok = self._owned_provider.force_flush(ms)
        return ok

    def detach(
        self, timeout: float | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> bool:
        """Stop observing the engine, drain records and spans, unregister the collectors, all
        within ``timeout`` seconds (default: ``shutdown_timeout_s``) on ``clock``: each step
        waits at most what is left of that one deadline. True when everything finished in time.

        Never raises and never waits past the deadline: a step that fails or is still running
        (a span exporter stuck on a collector that never answers, a stalled disk) is counted in
        ``shutdown_failures`` by step and logged in one line; what it held is lost (records
        still queued are counted as dropped). Blocking: call it off an event loop
        (``asyncio.to_thread``).
        """
        if self._detached:
            return True
        self.pause()
        self._detached = True
        deadline = Deadline.after(self.shutdown_timeout_s if timeout is None else timeout, clock)
        failed: dict[str, str] = {}

        def step(name: str, fn: Callable[[], object]) -> None:
            exc = run_bounded(fn, deadline.left(), name)
            if exc is not None:
                failed[name] = f"{type(exc).__name__}: {exc}"[:200]

        if self.metrics is not None:
            self.metrics.flush()
        worker = self._worker
        if worker is not None:
            flushed = worker.flush(deadline.left())
            if not (worker.close(deadline.left()) and flushed):
                failed["requests"] = f"{worker.pending} finished requests not handed over in time"
                self.drops.add("requests", worker.pending)
        sink = self.record_sink
        if sink is not None:
            step("records", sink.close)
        if self.gpu is not None:  # local and quick: before the network, which may take it all
            step("gpu", self.gpu.stop)
        if self._owned_provider is not None:
            lost_before = self.drops.get("spans")
            step("spans", self._owned_provider.shutdown)
            lost = self.drops.get("spans") - lost_before
            if lost > 0 and "spans" not in failed:  # the exporter gave up inside the deadline
                failed["spans"] = f"{lost} spans not exported"
        if self.registry is not None:
            for c in (self.metrics, self.gpu):
                if c is not None:
                    self.registry.unregister(c)
        for name in failed:
            self.shutdown_failures[name] = self.shutdown_failures.get(name, 0) + 1
        if failed:
            _log.warning(
                "telemetry detach: %s",
                "; ".join(f"{k}: {v}" for k, v in failed.items()),
            )
        return not failed

    def __enter__(self) -> Instrumentation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()


def instrument(
    engine: _Attachable,
    *,
    tracer_provider: TracerProvider | None = None,
    registry: CollectorRegistry | None = None,
    record_sink: RecordSink | None = None,
    gpu: _BackgroundCollector | None = None,
    goodput: tuple[float, float] | None = None,
    capture_text: bool = False,
    max_label_values: int = 64,
    tenant_label: bool = False,
    metrics: bool = True,
    replica: str | None = None,
    model: str | None = None,
    clock: Callable[[], float] | None = None,
    wall_clock: Callable[[], float] = time.time,
    record_times: Literal["wall", "engine"] = "wall",
    peak_bandwidth_bytes_per_s: float | None = None,
    peak_flops_per_s: float | None = None,
    drops: DropCounter | None = None,
    env: Mapping[str, str] | None = None,
    span_file: str | os.PathLike[str] | None = None,
    max_queue: int = 8192,
    shutdown_timeout_s: float = 5.0,
) -> Instrumentation:
    """Attach one observer to ``engine`` that feeds spans, metrics and records.

    Engine-neutral: ``engine`` needs only ``attach(observer) -> detach`` (the protocol in
    ``fleetwatch.telemetry.hooks``); ``replica``/``model`` default to ``engine.replica`` and
    ``engine.model_name``, ``clock`` to ``engine.clock`` or ``time.monotonic`` (it must be the
    clock the engine stamps events with: span times are engine time + (wall - engine) offset).

    - Spans: on ``tracer_provider``; when None, from the ``OTEL_*`` environment (``env``) and/or
      ``span_file`` (JSON lines); when neither is configured no span is built at all.
    - Metrics: a ``ServingMetrics`` collector registered in ``registry`` (default: the global
      ``prometheus_client.REGISTRY``), unless ``metrics=False``. ``goodput`` = (TTFT s, TPOT s)
      enables the goodput counter; without a target it is not exported at all (SLO rules read
      its absence as missing metrics, not as every request failing the target).
      ``tenant_label`` adds a capped ``tenant`` label.
    - Records: every finished request to ``record_sink`` in wall-clock seconds
      (``record_times="engine"`` keeps engine-clock seconds).
    - ``gpu``: a GPU sampler (``fleetwatch.telemetry.gpu.GpuSampler``) registered and started alongside.

    Spans and records are built on a background thread from a bounded queue (``max_queue``):
    the step loop never waits, and what does not fit is counted in
    ``fleetwatch_telemetry_dropped_total``. ``detach`` (and each span processor's shutdown)
    finishes within ``shutdown_timeout_s`` whatever the exporters do.
    """
    replica = replica if replica is not None else str(getattr(engine, "replica", "replica-0"))
    model = model if model is not None else str(getattr(engine, "model_name", "unknown"))
    engine_clock = clock or getattr(engine, "clock", None) or time.monotonic
    offset_s = wall_clock() - engine_clock()
    drops = drops if drops is not None else DropCounter()
    owned: SdkTracerProvider | None = None
    if tracer_provider is None:
        owned = provider_from_env(
            env=env,
            span_file=span_file,
            drops=drops,
            max_queue=max_queue,
            shutdown_timeout_s=shutdown_timeout_s,
        )
        tracer_provider = owned

    serving: ServingMetrics | None = None
    target = registry if registry is not None else REGISTRY
    if metrics:
        serving = ServingMetrics(
            model,
            replica,
            tenant_label=tenant_label,
            max_label_values=max_label_values,
            peak_bandwidth_bytes_per_s=peak_bandwidth_bytes_per_s,
            peak_flops_per_s=peak_flops_per_s,
            drops=drops,
            goodput=goodput is not None,
        )
        target.register(serving)
    if gpu is not None:
        target.register(gpu)
        gpu.start()

    builder: SpanBuilder | None = None
    if tracer_provider is not None:
        builder = SpanBuilder(
            tracer_provider.get_tracer("fleetwatch.telemetry"),
            model=model,
            replica=replica,
            offset_s=offset_s,
            capture_text=capture_text,
        )
    record_offset = offset_s if record_times == "wall" else 0.0
    worker: BoundedWorker[RequestState] | None = None
    if builder is not None or record_sink is not None:
        worker = BoundedWorker(
            _finished_handler(builder, record_sink, model, replica, record_offset),
            stage="requests",
            drops=drops,
            max_queue=max_queue,
            name="fleetwatch-telemetry",
            # An empty write lets a rotating sink seal an aged file while no request finishes.
            on_idle=(lambda: record_sink.write(())) if record_sink is not None else None,
        )
    observer = TelemetryObserver(
        serving,
        worker.submit if worker is not None else None,
        goodput=goodput,
        gaps=record_sink is not None,
    )
    detach = engine.attach(observer)
    return Instrumentation(
        observer=observer,
        engine=engine,
        detach_engine=detach,
        metrics=serving,
        registry=target if serving is not None or gpu is not None else None,
        worker=worker,
        record_sink=record_sink,
        gpu=gpu,
        drops=drops,
        capture_text=capture_text,
        offset_s=offset_s,
        owned_provider=owned,
        shutdown_timeout_s=shutdown_timeout_s,
        tracer_provider=tracer_provider,
    )


def _finished_handler(
    builder: SpanBuilder | None,
    sink: RecordSink | None,
    model: str,
    replica: str,
    record_offset: float,
) -> Callable[[Sequence[RequestState]], None]:
    def handle(batch: Sequence[RequestState]) -> None:
        traces: list[str | None] = [None] * len(batch)
        if builder is not None:
            for i, s in enumerate(batch):
                traces[i] = trace = builder.emit(s)
                if trace is not None and s.series is not None:
                    exemplify(s, s.series, trace)
        if sink is not None:
            sink.write(
                [
                    to_record(s, model, replica, record_offset, trace_id=trace)
                    for s, trace in zip(batch, traces, strict=True)
                ]
            )

    return handle


def exemplify(s: RequestState, series: Series, trace_id: str) -> None:
    """Make the request's trace the exemplar of its TTFT and e2e buckets (OpenMetrics
    exposition), so a slow bucket leads to a trace."""
    if s.first_token is not None:
        series.ttft.exemplify(s.first_token - s.arrival, trace_id)
    series.e2e.exemplify(s.finished - s.arrival, trace_id)


def to_record(
    s: RequestState,
    model: str,
    replica: str,
    offset_s: float = 0.0,
    *,
    trace_id: str | None = None,
) -> RequestRecord:
    """The foundation's ``RequestRecord`` for a finished request (times + ``offset_s``)."""

    def at(t: float | None) -> float | None:
        return None if t is None else t + offset_s

    info = s.info
    return RequestRecord(
        request_id=info.request_id,
        replica=replica,
        model=model,
        arrival_s=s.arrival + offset_s,
        scheduled_s=at(s.scheduled),
        first_token_s=at(s.first_token),
        finished_s=s.finished + offset_s,
        prompt_tokens=info.prompt_tokens,
        output_tokens=s.output_tokens,
        cached_prompt_tokens=min(s.cached_tokens, info.prompt_tokens),
        preemptions=s.preemptions,
        preemption_stall_s=s.stall,
        max_itl_s=s.max_itl,
        itl_buckets=record_gaps(s),
        status=Status(s.status),
        finish_reason=s.finish_reason,
        error_type=s.error_type,
        traffic_class=info.traffic_class,
        tenant=info.tenant,
        trace_id=trace_id,
    )
