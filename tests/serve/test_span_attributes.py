"""The request span of a request served over HTTP: HTTP server attributes, request parameters,
and the caller's full W3C trace context (traceparent and tracestate)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from fleetwatch.engine_probe.serve import start_server
from fleetwatch.engine_probe.serve.request_context import answered_status

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


def _provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _roots(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {
        str(sp.attributes["gen_ai.response.id"]): sp
        for sp in exporter.get_finished_spans()
        if sp.kind == SpanKind.SERVER and sp.attributes is not None
    }


def test_http_attributes_request_parameters_and_tracestate_reach_the_span(kit: Any) -> None:
    provider, exporter = _provider()
    body = {"prompt": "trace me", "max_tokens": 5, "temperature": 0.7, "top_p": 0.9, "seed": 11}
    headers = {
        "traceparent": f"00-{TRACE_ID}-{PARENT}-01",
        "tracestate": "vendor=abc,other=x",
    }

    async def go() -> tuple[dict[str, tuple[int, str]], int]:
        seen: dict[str, tuple[int, str]] = {}
        async with (
            await start_server(kit.make_engine(), tracer_provider=provider) as h,
            aiohttp.ClientSession() as s,
        ):
            for stream in (True, False):
                async with s.post(
                    f"{h.url}/v1/completions", json={**body, "stream": stream}, headers=headers
                ) as r:
                    await r.read()
                    seen[r.headers["X-Request-Id"]] = (r.status, "stream" if stream else "whole")
            h.instrumentation.flush()
            return seen, h.port

    seen, port = asyncio.run(go())
    roots = _roots(exporter)
    assert set(seen) <= set(roots)
    for rid, (status, _) in seen.items():
        span = roots[rid]
        attrs = dict(span.attributes or {})
        assert attrs["http.request.method"] == "POST"
        assert attrs["http.route"] == "/v1/completions"
        assert attrs["http.response.status_code"] == status == 200
        assert attrs["server.address"] == "127.0.0.1"
        assert attrs["server.port"] == port
        assert attrs["gen_ai.request.temperature"] == 0.7
        assert attrs["gen_ai.request.top_p"] == 0.9
        assert attrs["gen_ai.request.seed"] == 11
        assert attrs["gen_ai.request.max_tokens"] == 5
        assert f"{span.context.trace_id:032x}" == TRACE_ID
        assert span.parent is not None and f"{span.parent.span_id:016x}" == PARENT
        # The caller's tracestate is continued, not dropped.
        assert span.context.trace_state.to_header() == "vendor=abc,other=x"


def test_the_span_status_code_is_the_one_the_client_got(kit: Any) -> None:
    from fleetwatch.engine_probe.engine import EngineConfig, FaultConfig, LLMEngine

    provider, exporter = _provider()

    async def go() -> dict[str, int]:
        codes: dict[str, int] = {}
        model = kit.make_engine().model_config
        failing = LLMEngine(
            model, EngineConfig(num_blocks=256, device="cpu"), faults=FaultConfig(error_rate=1.0)
        )
        async with (
            await start_server(failing, tracer_provider=provider) as h,
            aiohttp.ClientSession() as s,
        ):
            for stream in (True, False):
                body = {"prompt": "boom", "max_tokens": 6, "stream": stream}
                async with s.post(f"{h.url}/v1/completions", json=body) as r:
                    await r.read()
                    codes[r.headers.get("X-Request-Id") or f"stream={stream}"] = r.status
            h.instrumentation.flush()
        busy = kit.make_engine(max_num_seqs=1, max_waiting=0)
        async with (
            await start_server(busy, tracer_provider=provider) as h,
            aiohttp.ClientSession() as s,
        ):
            url = f"{h.url}/v1/completions"
            running = await s.post(url, json={"prompt": "a", "max_tokens": 2000, "stream": True})
            await running.content.readuntil(b"\n\n")
            async with s.post(url, json={"prompt": "b", "max_tokens": 4}) as r:
                codes["rejected"] = r.status
            running.close()
            await kit.wait_for(lambda: not busy.has_unfinished())
            h.instrumentation.flush()
        return codes

    codes = asyncio.run(go())
    assert codes["rejected"] == 429
    spans = [sp for sp in exporter.get_finished_spans() if sp.kind == SpanKind.SERVER]
    by_status: dict[str, list[int]] = {}
    for sp in spans:
        attrs = sp.attributes or {}
        by_status.setdefault(str(attrs["fleetwatch.status"]), []).append(
            int(attrs["http.response.status_code"])  # type: ignore[call-overload]
        )
    assert 429 in by_status["rejected"]
    # Injected faults fail at the first token: no output, so both answers were 500, streamed or not.
    assert sorted(c for k, c in codes.items() if k != "rejected") == [500, 500]
    assert by_status["error"] == [500, 500]


def test_the_status_rule_matches_the_responder() -> None:
    stream, whole = answered_status(True), answered_status(False)
    assert stream("ok", True) == whole("ok", True) == 200
    assert stream("rejected", False) == whole("rejected", False) == 429
    assert stream("aborted", False) == 503 and stream("error", False) == 500
    assert stream("error", True) == 200  # headers went out with the first output
    assert whole("error", True) == 500


def test_an_engine_used_directly_gets_no_http_attributes(kit: Any) -> None:
    from fleetwatch.telemetry.instrument import instrument

    provider, exporter = _provider()
    engine = kit.make_engine()
    inst = instrument(engine, tracer_provider=provider, metrics=False)
    engine.generate([[1, 2, 3]], max_tokens=3)
    inst.detach()
    (span,) = [sp for sp in exporter.get_finished_spans() if sp.kind == SpanKind.SERVER]
    attrs = dict(span.attributes or {})
    assert not any(k.startswith(("http.", "server.")) for k in attrs)
    assert attrs["gen_ai.request.temperature"] == 0.0 and attrs["gen_ai.request.top_p"] == 1.0
    assert "gen_ai.request.seed" not in attrs
