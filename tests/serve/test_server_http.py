"""The completion server against real clients on loopback."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import aiohttp
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from fleetwatch.engine_probe.engine import SamplingParams
from fleetwatch.engine_probe.serve import ServerConfig, start_server
from fleetwatch.engine_probe.serve.wire.text_ids import encode


def _body(prompt: Any, max_tokens: int, stream: bool = True, **extra: Any) -> dict[str, Any]:
    usage = {"stream_options": {"include_usage": True}} if stream else {}
    return {
        "model": "reference",
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": stream,
        "temperature": 0.0,
        **usage,
        **extra,
    }


def test_streaming_output_equals_the_in_process_engine(kit: Any) -> None:
    prompts: list[Any] = ["hello world, this is a prompt", [5, 6, 7, 8, 9, 10, 11], "another one"]
    reference = kit.make_engine()
    ids = [encode(p, 512) if isinstance(p, str) else p for p in prompts]
    expected = reference.generate(ids, max_tokens=24)
    sampled_ref = kit.make_engine().generate(
        [ids[0]], max_tokens=12, sampling=SamplingParams(temperature=0.9, top_p=0.9, seed=7)
    )

    async def go() -> tuple[list[list[int]], list[int], dict[str, Any], dict[str, Any]]:
        async with await start_server(kit.make_engine()) as h, aiohttp.ClientSession() as s:

            async def one(p: Any) -> list[int]:
                async with s.post(f"{h.url}/v1/completions", json=_body(p, 24)) as r:
                    assert r.status == 200
                    assert r.headers["Content-Type"].startswith("text/event-stream")
                    events, done = await kit.read_stream(r)
                assert done
                assert events[-1]["usage"]["completion_tokens"] == 24
                assert events[-1]["usage"]["prompt_tokens"] == len(
                    encode(p, 512) if isinstance(p, str) else p
                )
                return kit.tokens_of(events)

            got = await asyncio.gather(*(one(p) for p in prompts))
            async with s.post(
                f"{h.url}/v1/completions",
                json=_body(prompts[0], 12, temperature=0.9, top_p=0.9, seed=7),
            ) as r:
                sampled = kit.tokens_of((await kit.read_stream(r))[0])
            async with s.post(
                f"{h.url}/v1/completions", json=_body(prompts[1], 24, stream=False)
            ) as r:
                whole = await r.json()
            async with s.get(f"{h.url}/health") as r:
                health = await r.json()
        return list(got), sampled, whole, health

    got, sampled, whole, health = asyncio.run(go())
    assert got == [list(t) for t in expected]
    assert sampled == list(sampled_ref[0])
    assert whole["choices"][0]["token_ids"] == list(expected[1])
    assert len(whole["choices"][0]["text"]) == 24
    assert whole["usage"]["completion_tokens"] == 24
    assert health["status"] == "ok" and health["kv_usage"] == 0.0


def test_client_disconnect_aborts_and_frees_kv_blocks(kit: Any) -> None:
    async def go() -> tuple[float, float, float]:
        engine = kit.make_engine()
        async with await start_server(engine) as h:
            async with aiohttp.ClientSession() as s:
                resp = await s.post(f"{h.url}/v1/completions", json=_body("x" * 200, 3000))
                assert resp.status == 200
                await resp.content.readuntil(b"\n\n")  # the first token arrived
                used = engine.kv_usage
                resp.close()  # hang up mid-stream
            await kit.wait_for(lambda: engine.kv_usage == 0.0 and not engine.has_unfinished())
            text = h.registry.get_sample_value(
                "fleetwatch_http_stream_aborts_total",
                {"replica": engine.replica, "reason": "client_disconnect"},
            )
            return used, engine.kv_usage, float(text or 0)

    used, after, aborts = asyncio.run(go())
    assert used > 0
    assert after == 0.0
    assert aborts == 1


def test_overflowing_the_queue_answers_429_with_retry_after(kit: Any) -> None:
    async def go() -> tuple[int, str | None, dict[str, Any], int]:
        engine = kit.make_engine(max_num_seqs=1)
        async with (
            await start_server(engine, config=ServerConfig(max_queue=1)) as h,
            aiohttp.ClientSession() as s,
        ):
            url = f"{h.url}/v1/completions"
            running = await s.post(url, json=_body("a", 2000))
            await running.content.readuntil(b"\n\n")
            queued = asyncio.create_task(s.post(url, json=_body("b", 4)))
            await kit.wait_for(lambda: h.server.waiting == 1)
            async with s.post(url, json=_body("c", 4)) as r:
                status, retry, body = r.status, r.headers.get("Retry-After"), await r.json()
            running.close()  # frees the slot: the queued one runs
            q = await queued
            events, _ = await kit.read_stream(q)
            return status, retry, body, len(kit.tokens_of(events))

    status, retry, body, queued_tokens = asyncio.run(go())
    assert status == 429
    assert retry is not None and int(retry) >= 1
    assert "queue full" in body["error"]["message"]
    assert queued_tokens == 4


class _Arrivals:
    def __init__(self) -> None:
        self.count = 0

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None

    def on_request_arrived(self, t: float, info: Any) -> None:
        self.count += 1


def test_duplicate_idempotency_key_does_the_work_once(kit: Any) -> None:
    async def go() -> tuple[list[list[int]], int, int, int]:
        engine = kit.make_engine()
        arrivals = _Arrivals()
        engine.attach(arrivals)
        async with await start_server(engine) as h, aiohttp.ClientSession() as s:
            url = f"{h.url}/v1/completions"
            headers = {"Idempotency-Key": "order-42"}
            first = await s.post(url, json=_body("retry me", 200), headers=headers)
            head = await first.content.readuntil(b"\n\n")  # in flight: a retry arrives now
            async with s.post(url, json=_body("retry me", 200), headers=headers) as second:
                events2, _ = await kit.read_stream(second)
            events1, _ = await kit.read_stream(first, head)
            first.close()
            async with s.post(url, json=_body("retry me", 200), headers=headers) as third:
                events3, _ = await kit.read_stream(third)  # finished: replayed, not recomputed
            async with s.post(url, json=_body("other body", 200), headers=headers) as clash:
                clash_status = clash.status
            joins = h.registry.get_sample_value(
                "fleetwatch_http_idempotent_joins_total", {"replica": engine.replica}
            )
        return (
            [kit.tokens_of(events1), kit.tokens_of(events2), kit.tokens_of(events3)],
            arrivals.count,
            clash_status,
            int(joins or 0),
        )

    streams, arrived, clash, joins = asyncio.run(go())
    # the first reader may have received its first chunk separately; the whole stream is identical
    assert streams[0] == streams[1] == streams[2]
    assert len(streams[0]) == 200
    assert arrived == 2  # the work, once; and the refused clash, recorded as rejected
    assert joins == 2
    assert clash == 400


def test_slow_reader_is_dropped_and_its_request_aborted(kit: Any) -> None:
    async def go() -> tuple[float, float]:
        engine = kit.make_engine()
        config = ServerConfig(max_lag=8, write_buffer_bytes=512, socket_send_buffer_bytes=2048)
        async with await start_server(engine, config=config) as h:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
            sock.setblocking(False)
            loop = asyncio.get_running_loop()
            await loop.sock_connect(sock, ("127.0.0.1", h.port))
            payload = json.dumps(_body("slow", 3500)).encode()
            head = f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
            await loop.sock_sendall(sock, head.encode() + payload)
            key = {"replica": engine.replica, "reason": "slow_reader"}
            await kit.wait_for(
                lambda: (
                    (h.registry.get_sample_value("fleetwatch_http_stream_aborts_total", key) or 0)
                    >= 1
                ),
                30,
            )
            await kit.wait_for(lambda: engine.kv_usage == 0.0 and not engine.has_unfinished())
            sock.close()
            return h.registry.get_sample_value(
                "fleetwatch_http_stream_aborts_total", key
            ) or 0.0, engine.kv_usage

    drops, kv = asyncio.run(go())
    assert drops == 1
    assert kv == 0.0


def test_graceful_shutdown_drains_in_flight_streams(kit: Any) -> None:
    async def go() -> tuple[bool, int, int, int]:
        engine = kit.make_engine()
        h = await start_server(engine)
        async with aiohttp.ClientSession() as s:
            resp = await s.post(f"{h.url}/v1/completions", json=_body("drain me", 300))
            await resp.content.readuntil(b"\n\n")
            stopping = asyncio.create_task(h.stop(drain_timeout_s=60))
            await kit.wait_for(lambda: h.server.draining)
            rest, done = await kit.read_stream(resp)
            cut = await stopping
        return done, len(kit.tokens_of(rest)), cut, engine.num_running

    done, n, cut, running = asyncio.run(go())
    assert done and cut == 0 and running == 0
    assert n >= 290  # the remainder of the stream (the first chunk was read before)


def test_traceparent_continues_into_the_request_span_and_metrics_are_served(kit: Any) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    parent = "00f067aa0ba902b7"

    async def go() -> str:
        async with (
            await start_server(kit.make_engine(), tracer_provider=provider) as h,
            aiohttp.ClientSession() as s,
        ):
            hdr = {"traceparent": f"00-{trace_id}-{parent}-01"}
            async with s.post(
                f"{h.url}/v1/completions", json=_body("trace me", 5), headers=hdr
            ) as r:
                await kit.read_stream(r)
            h.instrumentation.flush()
            async with s.get(f"{h.url}/metrics") as r:
                return await r.text()

    metrics = asyncio.run(go())
    spans = exporter.get_finished_spans()
    assert spans
    assert any(f"{sp.context.trace_id:032x}" == trace_id for sp in spans)
    assert any(sp.parent is not None and f"{sp.parent.span_id:016x}" == parent for sp in spans)
    assert 'fleetwatch_http_responses_total{code="200"' in metrics
    assert "time_to_first_token" in metrics


def test_the_w3c_propagator_decides_whether_a_traceparent_is_continued(kit: Any) -> None:
    """The header reaches the engine as sent: a valid one is continued, while an invalid one
    (upper-case hex, an all-zero trace id, version ff, garbage) starts a new root trace."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    parent = "00f067aa0ba902b7"
    headers = {
        "valid": f"00-{trace_id}-{parent}-01",
        "upper_case": f"00-{trace_id.upper()}-{parent.upper()}-01",
        "zero_trace_id": f"00-{'0' * 32}-{parent}-01",
        "version_ff": f"ff-{trace_id}-{parent}-01",
        "garbage": "garbage",
    }

    async def go() -> dict[str, str]:
        ids: dict[str, str] = {}
        async with (
            await start_server(kit.make_engine(), tracer_provider=provider) as h,
            aiohttp.ClientSession() as s,
        ):
            for name, value in headers.items():
                async with s.post(
                    f"{h.url}/v1/completions",
                    json=_body("trace me", 3, stream=False),
                    headers={"traceparent": value},
                ) as r:
                    assert r.status == 200
                    await r.read()
                    ids[name] = r.headers["X-Request-Id"]
            h.instrumentation.flush()
        return ids

    ids = asyncio.run(go())
    roots = {
        sp.attributes["gen_ai.response.id"]: sp
        for sp in exporter.get_finished_spans()
        if sp.kind == SpanKind.SERVER and sp.attributes is not None
    }
    valid = roots[ids["valid"]]
    assert f"{valid.context.trace_id:032x}" == trace_id
    assert valid.parent is not None and valid.parent.is_remote
    assert f"{valid.parent.span_id:016x}" == parent
    for name in ("upper_case", "zero_trace_id", "version_ff", "garbage"):
        root = roots[ids[name]]
        assert root.parent is None, name
        assert f"{root.context.trace_id:032x}" != trace_id, name
    assert len({roots[i].context.trace_id for i in ids.values()}) == len(ids)


@pytest.mark.parametrize("rejected_by", ["engine"])
def test_engine_side_rejection_is_also_429(rejected_by: str, kit: Any) -> None:
    async def go() -> list[int]:
        engine = kit.make_engine(max_num_seqs=1, max_waiting=0)
        async with await start_server(engine) as h, aiohttp.ClientSession() as s:
            url = f"{h.url}/v1/completions"
            running = await s.post(url, json=_body("a", 2000))
            await running.content.readuntil(b"\n\n")
            async with s.post(url, json=_body("b", 4)) as r:
                status = r.status
            running.close()
            return [status]

    assert asyncio.run(go()) == [429]


def test_disconnect_while_queued_frees_the_slot_and_a_key_reruns_after_an_abort(kit: Any) -> None:
    async def go() -> tuple[int, int, int]:
        engine = kit.make_engine(max_num_seqs=1)
        arrivals = _Arrivals()
        engine.attach(arrivals)
        async with await start_server(engine) as h, aiohttp.ClientSession() as s:
            url = f"{h.url}/v1/completions"
            running = await s.post(url, json=_body("a", 2000))
            await running.content.readuntil(b"\n\n")
            queued = asyncio.create_task(
                s.post(url, json=_body("b", 5), headers={"Idempotency-Key": "k"})
            )
            await kit.wait_for(lambda: h.server.waiting == 1)
            queued.cancel()  # the client gives up while waiting for its first token
            await kit.wait_for(lambda: h.server.waiting == 0 and engine.num_waiting == 0)
            running.close()
            await kit.wait_for(lambda: not engine.has_unfinished())
            async with s.post(url, json=_body("b", 5), headers={"Idempotency-Key": "k"}) as r:
                events, done = await kit.read_stream(r)
            assert done
            return len(kit.tokens_of(events)), arrivals.count, int(engine.kv_usage * 1000)

    tokens, arrived, kv = asyncio.run(go())
    assert tokens == 5
    assert arrived == 3  # a, the abandoned b, and b again: aborted work is not replayed
    assert kv == 0


def test_injected_engine_errors_reach_the_client_as_errors_not_hangs(kit: Any) -> None:
    from fleetwatch.engine_probe.engine import EngineConfig, FaultConfig, LLMEngine
    from fleetwatch.engine_probe.probe.client import Prober, completion_body

    async def go() -> tuple[list[str], int]:
        model = kit.make_engine().model_config
        engine = LLMEngine(
            model, EngineConfig(num_blocks=256, device="cpu"), faults=FaultConfig(error_rate=1.0)
        )
        async with await start_server(engine) as h, Prober(h.url) as p:
            results = [await p.one(i, 0.0, completion_body("boom", 8)) for i in range(3)]
            async with aiohttp.ClientSession() as s, s.get(f"{h.url}/health") as r:
                health = r.status
        return [r.status for r in results], health

    statuses, health = asyncio.run(go())
    assert statuses == ["error"] * 3
    assert health == 200
