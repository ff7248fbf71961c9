"""Instrumentation through the asyncio front: events arrive on the engine's own thread."""

from __future__ import annotations

import asyncio

from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry

from fleetwatch.engine_probe.engine import AsyncEngine, RequestParams
from fleetwatch.telemetry.instrument import instrument
from fleetwatch.telemetry.sink import MemoryRecordSink


def test_streamed_requests_get_spans_records_and_metrics(make_engine, tracing):
    provider, exporter = tracing
    engine = make_engine()
    reg = CollectorRegistry()
    sink = MemoryRecordSink()
    inst = instrument(engine, tracer_provider=provider, registry=reg, record_sink=sink)

    async def main() -> list[int]:
        async with AsyncEngine(engine) as aengine:

            async def one(i: int) -> int:
                n = 0
                params = RequestParams(traffic_class="chat", tenant=f"t{i}")
                async for out in aengine.generate([i + 1] * 8, max_tokens=5, params=params):
                    n += len(out.new_token_ids)
                return n

            return list(await asyncio.gather(*(one(i) for i in range(4))))

    counts = asyncio.run(main())
    inst.flush()
    labels = {"model": engine.model_name, "replica": engine.replica, "traffic_class": "chat"}
    assert reg.get_sample_value("fleetwatch_generation_tokens_total", labels) == 20
    inst.detach()
    assert counts == [5, 5, 5, 5]
    roots = [s for s in exporter.get_finished_spans() if s.kind == SpanKind.SERVER]
    assert len(roots) == 4 and {r.attributes["fleetwatch.traffic_class"] for r in roots} == {"chat"}
    assert sorted(r.output_tokens for r in sink.records) == [5, 5, 5, 5]
