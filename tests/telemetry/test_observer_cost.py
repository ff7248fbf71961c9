"""What telemetry does and does not do to stay cheap: histogram binning and folding each step into
the step metrics wait for a scrape (bounded), per-request gap counting happens only when something
writes records, and OTLP export goes out in batches."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from fleetwatch.core.records.schema import ITL_BOUNDS
from fleetwatch.telemetry.hooks import RequestInfo, StepStats
from fleetwatch.telemetry.instrument import TelemetryObserver, instrument
from fleetwatch.telemetry.metrics import ServingMetrics
from fleetwatch.telemetry.sink import MemoryRecordSink
from fleetwatch.telemetry.spans.processor import BoundedSpanProcessor
from fleetwatch.telemetry.spans.provider import (
    otlp_export_interval_s,
    span_processors,
    tracer_provider,
)


def _decode(obs: TelemetryObserver, ids: list[str], steps: int) -> None:
    for rid in ids:
        obs.on_request_arrived(0.0, RequestInfo(rid, 4, steps + 1))
        obs.on_request_scheduled(0.0, rid, len(ids))
        obs.on_first_token(0.01, rid)
    for k in range(steps):
        obs.on_tokens(0.01 + 0.02 * (k + 1), ids)


def test_the_step_loop_leaves_binning_to_the_scrape_until_the_bound() -> None:
    m = ServingMetrics("m", "r0")
    reg = CollectorRegistry()
    reg.register(m)
    obs = TelemetryObserver(m, None, flush_every_tokens=8)
    ids = ["a", "b"]
    _decode(obs, ids, 3)  # 6 gaps: under the bound of 8 tokens
    itl = m.series("default").itl
    assert len(itl.pending) == 6
    labels = {"model": "m", "replica": "r0", "traffic_class": "default"}
    name = "fleetwatch_inter_token_latency_seconds"
    # a scrape sees every observation, binned or not
    assert reg.get_sample_value(f"{name}_count", labels) == 6
    assert itl.pending == []
    obs.on_tokens(1.0, ids)
    obs.on_tokens(1.1, ids)  # 8 tokens since the last bound check: the next step bins
    assert len(itl.pending) == 4
    obs.on_step(StepStats(1, 1.0, 1.1, 0, 2, 2, 0, 1, 8, 0, 0, 0, 0.0, 0.0))
    assert itl.pending == []
    assert reg.get_sample_value(f"{name}_count", labels) == 10


def test_steps_and_state_reports_wait_for_the_scrape_until_the_bound() -> None:
    m = ServingMetrics("m", "r0")
    obs = TelemetryObserver(m, None, flush_every_steps=3)
    step = StepStats(1, 1.0, 1.1, 0, 2, 2, 0, 1, 8, 0, 0, 0, 0.0, 0.0)
    idle = StepStats(1, 1.2, 1.2, 0, 0, 0, 0, 0, 8, 0, 0, 0, 0.0, 0.0)  # a state report
    obs.on_step(step)
    obs.on_step(idle)
    assert m.steps.pending == [step, idle]  # the step loop only appended them
    obs.on_step(idle)  # the third: a state report counts toward the bound like a step
    assert m.steps.pending == []
    assert m.steps.last == idle and m.steps.busy_s == 1.1 - 1.0  # the step alone


def test_gaps_are_counted_only_for_records() -> None:
    def run(sink: MemoryRecordSink | None) -> TelemetryObserver:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))

        class Engine:
            observer: TelemetryObserver | None = None

            def attach(self, observer: TelemetryObserver) -> object:
                self.observer = observer
                return lambda: None

        engine = Engine()
        inst = instrument(
            engine, tracer_provider=provider, registry=CollectorRegistry(), record_sink=sink
        )
        obs = inst.observer
        _decode(obs, ["a"], 4)
        s = obs.requests["a"]
        obs.on_request_finished(0.2, "a", "ok", "length", None, 5, 0)
        assert inst.flush()
        assert len(exporter.get_finished_spans()) == 4  # spans either way
        assert s.max_itl is not None
        if sink is None:
            assert s.gaps == [] and len(s.recent_gaps) == 0
        return obs

    run(None)
    sink = MemoryRecordSink()
    run(sink)
    [record] = sink.records
    assert record.itl_buckets is not None and sum(record.itl_buckets) == 4
    assert len(record.itl_buckets) == len(ITL_BOUNDS) + 1


def test_otlp_export_is_batched_every_5_s_unless_the_environment_says_otherwise() -> None:
    assert otlp_export_interval_s({}) == 5.0
    assert otlp_export_interval_s({"OTEL_BSP_SCHEDULE_DELAY": "250"}) == 0.25
    for bad in ("soon", "0", "-1", "inf", ""):
        assert otlp_export_interval_s({"OTEL_BSP_SCHEDULE_DELAY": bad}) == 5.0
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_BSP_SCHEDULE_DELAY": "750"}
    provider = tracer_provider(env=env)
    assert provider is not None
    [processor] = span_processors(provider)
    assert isinstance(processor, BoundedSpanProcessor) and processor.interval_s == 0.75
    provider.shutdown()
