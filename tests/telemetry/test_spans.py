"""Span trees from real engine runs: normal, preempted, aborted, failed; traceparent; timestamps."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import CollectorRegistry

from fleetwatch.telemetry.instrument import instrument

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def _trees(spans: list[ReadableSpan]) -> dict[str, tuple[ReadableSpan, dict[str, ReadableSpan]]]:
    roots = {s.context.span_id: s for s in spans if s.kind == SpanKind.SERVER}
    out: dict[str, tuple[ReadableSpan, dict[str, ReadableSpan]]] = {}
    for root in roots.values():
        children = {
            s.name: s
            for s in spans
            if s.parent is not None and s.parent.span_id == root.context.span_id
        }
        out[str(root.attributes["gen_ai.response.id"])] = (root, children)
    return out


@pytest.fixture(scope="module")
def traced_run(make_engine, mixed_workload):
    """One real run shared by the span-tree tests: ok, preempted, aborted and failed requests."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    engine = make_engine(num_blocks=12, error_rate=0.3)
    inst = instrument(engine, tracer_provider=provider, registry=CollectorRegistry())
    _, run = mixed_workload(
        engine,
        request_kw=lambda i: {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"} if i == 1 else {},
    )
    inst.detach()
    return engine, run, _trees(list(exporter.get_finished_spans()))


def test_each_request_gets_one_server_span_with_queue_prefill_decode_children(traced_run):
    engine, run, trees = traced_run
    assert set(trees) == set(run.final)
    ok = [rid for rid, out in run.final.items() if out.status == "ok"]
    assert ok
    for rid in ok:
        root, children = trees[rid]
        assert root.name == f"text_completion {engine.model_name}"
        assert set(children) == {"queue", "prefill", "decode"}
        # Phases tile the request: queue ends where prefill starts, prefill where decode starts.
        assert children["queue"].start_time == root.start_time
        assert children["queue"].end_time == children["prefill"].start_time
        assert children["prefill"].end_time == children["decode"].start_time
        assert children["decode"].end_time == root.end_time
        a = root.attributes
        assert a["gen_ai.request.model"] == engine.model_name
        assert a["gen_ai.operation.name"] == "text_completion"
        assert a["gen_ai.usage.input_tokens"] == 40
        assert a["gen_ai.usage.output_tokens"] == len(run.tokens[rid]) == 40
        assert a["gen_ai.request.max_tokens"] == 40
        assert a["gen_ai.response.finish_reasons"] == ("length",)
        assert "gen_ai.usage.cache_read.input_tokens" in a
        assert a["fleetwatch.replica"] == engine.replica
        assert a["fleetwatch.traffic_class"] == "default"
        assert a["fleetwatch.batch_size_at_admission"] >= 1
        assert root.status.status_code == StatusCode.UNSET
        assert "error.type" not in a


def test_preempted_request_carries_preemption_and_resume_events(traced_run):
    _, _, trees = traced_run
    preempted = [(r, c) for r, c in trees.values() if r.attributes["fleetwatch.preemptions"] > 0]
    assert preempted, "the tiny KV cache should force at least one preemption"
    for root, _ in preempted:
        names = [e.name for e in root.events]
        assert names.count("preempted") == root.attributes["fleetwatch.preemptions"]
        assert "resumed" in names
        assert all(root.start_time <= e.timestamp <= root.end_time for e in root.events)
        assert root.attributes["fleetwatch.preemption_stall_s"] > 0


def test_aborted_request_is_not_an_error_but_says_abort(traced_run):
    _, run, trees = traced_run
    [rid] = [r for r, o in run.final.items() if o.status == "aborted"]
    root, children = trees[rid]
    assert root.attributes["fleetwatch.status"] == "aborted"
    assert root.attributes["gen_ai.response.finish_reasons"] == ("abort",)
    assert root.status.status_code == StatusCode.UNSET
    assert "queue" in children
    assert children[max(children, key=lambda n: children[n].end_time)].end_time == root.end_time


def test_failed_request_has_error_type_and_error_status(traced_run):
    _, run, trees = traced_run
    failed = [r for r, o in run.final.items() if o.status == "error"]
    assert failed
    for rid in failed:
        root, _ = trees[rid]
        assert root.attributes["error.type"] == run.final[rid].error_type == "InjectedFault"
        assert root.status.status_code == StatusCode.ERROR


def test_incoming_traceparent_is_continued(traced_run):
    _, _, trees = traced_run
    continued = [r for r, _ in trees.values() if r.parent is not None]
    assert len(continued) == 1
    root = continued[0]
    assert format(root.context.trace_id, "032x") == TRACE_ID
    assert format(root.parent.span_id, "016x") == PARENT_ID
    assert root.parent.is_remote
    others = [r for r, _ in trees.values() if r is not root]
    assert all(format(r.context.trace_id, "032x") != TRACE_ID for r in others)


def test_span_times_are_engine_event_times_plus_the_captured_offset(tracing, small_model):
    provider, exporter = tracing
    ticks = iter(range(10_000_000))

    def clock() -> float:  # a deterministic engine clock: 1 ms per reading
        return next(ticks) / 1000.0

    from fleetwatch.engine_probe.engine import EngineConfig, LLMEngine

    engine = LLMEngine(
        small_model, EngineConfig(num_blocks=64, block_size=16, num_threads=1), clock=clock
    )
    inst = instrument(
        engine, tracer_provider=provider, registry=CollectorRegistry(), clock=clock,
        wall_clock=lambda: 1_700_000_000.0,
    )  # fmt: skip
    engine.generate([[1, 2, 3]], max_tokens=4)
    inst.detach()
    [root] = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]
    # offset = wall - engine clock at instrument time; every time is a whole ms after it.
    assert (root.start_time - round(inst.offset_s * 1e9)) % 1_000_000 == 0
    assert root.end_time > root.start_time
    assert root.attributes["fleetwatch.ttft_s"] > 0
