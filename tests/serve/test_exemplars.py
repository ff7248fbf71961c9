"""From a slow bucket to its trace: ``engine serve``'s ``/metrics`` under OpenMetrics negotiation
carries exemplars on the TTFT and e2e histograms whose ``trace_id`` is a request span's, and each
request record carries the same trace id; the Prometheus text format stays as it was (no
exemplars), and a span that is not sampled leaves no trace id anywhere."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from fleetwatch.core.profiles import Signal, get_profile
from fleetwatch.telemetry.sink.records import MemoryRecordSink

OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
FLEETWATCH = get_profile("fleetwatch")
NAMES = {FLEETWATCH.metric(s).name: s for s in (Signal.TTFT, Signal.E2E)}


def _serve(kit: Any, provider: TracerProvider, n: int) -> tuple[MemoryRecordSink, str, str]:
    """``n`` requests through a live server; its records and /metrics in both formats."""
    sink = MemoryRecordSink()

    async def go() -> tuple[str, str]:
        async with (
            await start(kit, provider, sink) as h,
            aiohttp.ClientSession() as s,
        ):
            for i in range(n):
                body = {"prompt": f"exemplar {i}", "max_tokens": 4}
                async with s.post(f"{h.url}/v1/completions", json=body) as r:
                    assert r.status == 200
                    await r.read()
            h.instrumentation.flush()
            async with s.get(f"{h.url}/metrics", headers={"Accept": OPENMETRICS}) as r:
                assert r.headers["Content-Type"].startswith("application/openmetrics-text")
                om = await r.text()
            async with s.get(f"{h.url}/metrics") as r:
                assert r.headers["Content-Type"].startswith("text/plain")
                text = await r.text()
            return om, text

    om, text = asyncio.run(go())
    return sink, om, text


async def start(kit: Any, provider: TracerProvider, sink: MemoryRecordSink) -> Any:
    from fleetwatch.engine_probe.serve import start_server

    return await start_server(kit.make_engine(), tracer_provider=provider, record_sink=sink)


def _exemplars(om: str) -> dict[str, list[tuple[str, float, float]]]:
    """Per histogram (TTFT, e2e): (trace id, value, bucket bound) of each exemplar."""
    out: dict[str, list[tuple[str, float, float]]] = {name: [] for name in NAMES}
    for family in text_string_to_metric_families(om):
        for sample in family.samples:
            base = sample.name.removesuffix("_bucket")
            if base in NAMES and sample.exemplar is not None:
                le = float(sample.labels["le"])
                out[base].append((sample.exemplar.labels["trace_id"], sample.exemplar.value, le))
    return out


def test_exemplars_records_and_spans_name_the_same_traces(kit: Any) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sink, om, text = _serve(kit, provider, 6)

    roots = {
        f"{sp.context.trace_id:032x}": sp
        for sp in exporter.get_finished_spans()
        if sp.kind == SpanKind.SERVER
    }
    records = [r for r in sink.records if r.status.value == "ok"]
    assert len(records) == 6
    # Every record names its request's span.
    for record in records:
        assert record.trace_id in roots
        assert roots[record.trace_id].attributes["gen_ai.response.id"] == record.request_id
    by_trace = {r.trace_id: r for r in records}
    found = _exemplars(om)
    for name, exemplars in found.items():
        assert exemplars, name
        for trace_id, value, le in exemplars:
            record = by_trace[trace_id]
            observed = record.ttft_s if NAMES[name] is Signal.TTFT else record.e2e_s
            assert observed is not None
            assert abs(value - observed) < 1e-6  # records are in wall seconds (~1.7e9)
            assert value <= le  # in the bucket it is shown on
    # The Prometheus text format has no exemplars, and the same counts.
    assert "trace_id" not in text
    assert "# {" in om


def test_an_unsampled_request_leaves_no_trace_id(kit: Any) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sink, om, _ = _serve(kit, provider, 2)
    assert exporter.get_finished_spans() == ()
    assert [r.trace_id for r in sink.records] == [None, None]
    assert all(not v for v in _exemplars(om).values())
