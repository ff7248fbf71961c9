"""Every request the HTTP front refuses is one ``rejected`` record, span and count, so the
availability SLO over the server's own metrics sees front-door 429s (promtool on the scrape)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.parser import text_string_to_metric_families

from fleetwatch.core.profiles import get_profile
from fleetwatch.engine_probe.serve import ServerConfig, start_server
from fleetwatch.slo.load import load_spec
from fleetwatch.slo.rules import generate_rules, render_rules
from fleetwatch.slo.rules.render import dump_yaml
from fleetwatch.telemetry.sink import MemoryRecordSink
from tests.promtool_run import promtool_test

BURST = 40
QUEUE = 2


def _body(prompt: str, max_tokens: int) -> dict[str, Any]:
    return {"model": "reference", "prompt": prompt, "max_tokens": max_tokens, "stream": True}


class Run:
    """What one run saw from the client, and what the server recorded, spanned and exported."""

    statuses: list[int]
    others: dict[str, int]
    metrics: str
    records: list[Any]
    spans: list[Any]


def _run(kit: Any) -> Run:
    """A request holds the only slot; a burst of ``BURST`` arrives: ``QUEUE`` wait, the rest are
    refused 429. Then one each of: invalid (400), too large (413), draining (503)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sink = MemoryRecordSink()
    out = Run()

    async def go() -> None:
        engine = kit.make_engine(max_num_seqs=1)
        config = ServerConfig(max_queue=QUEUE, max_body_bytes=4096)
        h = await start_server(engine, config=config, tracer_provider=provider, record_sink=sink)
        async with aiohttp.ClientSession() as s:
            url = f"{h.url}/v1/completions"
            holder = await s.post(url, json=_body("hold", 3000))
            await holder.content.readuntil(b"\n\n")  # the slot is taken

            async def one(i: int) -> int:
                async with s.post(url, json=_body(f"burst {i}", 4)) as r:
                    await r.read()
                    return r.status

            burst = [asyncio.create_task(one(i)) for i in range(BURST)]
            await kit.wait_for(lambda: sum(t.done() for t in burst) >= BURST - QUEUE)
            holder.close()  # the slot frees: the queued ones run
            out.statuses = list(await asyncio.gather(*burst))
            async with s.post(url, data=b'{"prompt": 5}') as r:
                invalid = r.status
            async with s.post(url, data=b"x" * 8192) as r:
                large = r.status
            h.server.door.draining = True  # what stop() does first: refuse new work
            async with s.post(url, json=_body("late", 2)) as r:
                draining = r.status
            h.server.door.draining = False
            out.others = {"invalid": invalid, "large": large, "draining": draining}

            def settled() -> bool:
                h.instrumentation.flush(10)
                return len(sink.records) == BURST + 4 and not engine.has_unfinished()

            await kit.wait_for(settled, 30)
            async with s.get(f"{h.url}/metrics") as r:
                out.metrics = await r.text()
        await h.stop(drain_timeout_s=10)

    asyncio.run(go())
    out.records = list(sink.records)
    out.spans = [sp for sp in exporter.get_finished_spans() if sp.kind == SpanKind.SERVER]
    return out


@pytest.fixture(scope="module")
def run(kit: Any) -> Run:
    return _run(kit)


def _requests_total(metrics: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for fam in text_string_to_metric_families(metrics):
        for s in fam.samples:
            if s.name == "fleetwatch_requests_total":
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def _by_status(series: dict[tuple[tuple[str, str], ...], float], status: str) -> float:
    return sum(v for k, v in series.items() if dict(k)["status"] == status)


def test_every_front_door_429_is_a_rejected_record_span_and_count(run: Run) -> None:
    refused = run.statuses.count(429)
    assert refused == BURST - QUEUE and run.statuses.count(200) == QUEUE
    assert run.others == {"invalid": 400, "large": 413, "draining": 503}
    rejected = [r for r in run.records if r.status == "rejected"]
    reasons = sorted(str(r.error_type) for r in rejected)
    expected = sorted(["QueueFull"] * refused + ["InvalidRequest", "RequestTooLarge", "Draining"])
    assert reasons == expected
    series = _requests_total(run.metrics)
    assert _by_status(series, "rejected") == refused + 3
    assert _by_status(series, "ok") == QUEUE
    assert _by_status(series, "aborted") == 1  # the holder hung up
    http_429 = sum(
        s.value
        for fam in text_string_to_metric_families(run.metrics)
        for s in fam.samples
        if s.name == "fleetwatch_http_responses_total" and s.labels["code"] == "429"
    )
    assert http_429 == refused
    error_spans = [
        sp
        for sp in run.spans
        if sp.status.status_code == StatusCode.ERROR
        and sp.attributes is not None
        and sp.attributes["fleetwatch.status"] == "rejected"
    ]
    assert len(error_spans) == refused + 3
    assert {sp.attributes["gen_ai.response.id"] for sp in error_spans} == {
        r.request_id for r in rejected
    }


_SPEC = """
version: fleetwatch/slo/v1
service: engine
slos:
  - name: availability
    objective: 99
    period: 30d
    sli: {{kind: availability, bad: [{bad}]}}
"""


@pytest.mark.parametrize("bad", ["error, rejected", "error"])
def test_the_availability_burn_rate_sees_front_door_429s(
    run: Run, bad: str, promtool: Path, tmp_path: Path
) -> None:
    """The server's scraped counters as promtool input series (zero, then the scraped value):
    the generated rules' error ratio is the refused share, and with ``rejected`` counted bad the
    page alert fires; a spec that does not count ``rejected`` sees no burn."""
    ruleset = generate_rules(load_spec(_SPEC.format(bad=bad)), get_profile("fleetwatch"))
    (tmp_path / "rules.yaml").write_text(render_rules(ruleset))
    series = _requests_total(run.metrics)
    total = sum(series.values())
    rejected = _by_status(series, "rejected") if "rejected" in bad else 0.0
    ratio = (rejected + _by_status(series, "error")) / total
    page = next(a for a in ruleset.alerts if a.severity == "page")
    inputs = [
        {
            "series": "fleetwatch_requests_total{"
            + ",".join(f'{k}="{v}"' for k, v in labels)
            + "}",
            "values": f"0 {value:g}x20",
        }
        for labels, value in series.items()
    ]
    # every counter is 0 then its final value, so each window's ratio is the refused share
    fires = [{"exp_labels": dict(page.labels), "exp_annotations": page.annotations_at(ratio)}]
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "30s",
                "input_series": inputs,
                "promql_expr_test": [
                    {
                        "expr": "round(slo:sli_error:ratio_rate5m * 1e6)",
                        "eval_time": "5m",
                        "exp_samples": [
                            {
                                "labels": '{service="engine",slo="availability",window="5m"}',
                                "value": round(ratio * 1e6),
                            }
                        ],
                    }
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "5m",
                        "alertname": page.name,
                        "exp_alerts": fires if "rejected" in bad else [],
                    }
                ],
            }
        ],
    }
    done = promtool_test(promtool, tmp_path, dump_yaml(test))
    assert done.returncode == 0, done.stdout + done.stderr
    if "rejected" in bad:
        assert ratio > 0.5  # 38 of the 42 finished requests were refused at the front door


def test_every_5xx_is_counted_and_spanned(kit: Any) -> None:
    """A fault in the handler is a JSON 500, counted, with an ``error`` record and span; an engine
    failure of a non-streaming request is a counted 500 that the engine records itself."""
    import dataclasses

    from fleetwatch.engine_probe.engine import EngineConfig, FaultConfig, LLMEngine

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    sink = MemoryRecordSink()

    def boom(raw: bytes, limits: Any) -> Any:
        raise RuntimeError("a bug")

    async def go() -> tuple[list[int], dict[str, Any], float]:
        engine = LLMEngine(
            kit.make_engine().model_config,
            EngineConfig(num_blocks=256, device="cpu"),
            faults=FaultConfig(error_rate=1.0),
        )
        h = await start_server(engine, tracer_provider=provider, record_sink=sink)
        chat = h.server.apis["/v1/chat/completions"]
        h.server.apis["/v1/chat/completions"] = dataclasses.replace(chat, parse=boom)
        async with aiohttp.ClientSession() as s:
            body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
            async with s.post(f"{h.url}/v1/chat/completions", json=body) as r:
                crashed, error = r.status, (await r.json())["error"]
            body = {"prompt": "x", "max_tokens": 2}
            async with s.post(f"{h.url}/v1/completions", json=body) as r:
                failed = r.status

            def settled() -> bool:
                h.instrumentation.flush(10)
                return len(sink.records) == 2

            await kit.wait_for(settled, 30)
        fives = h.registry.get_sample_value(
            "fleetwatch_http_responses_total", {"replica": engine.replica, "code": "500"}
        )
        await h.stop(drain_timeout_s=10)
        return [crashed, failed], error, float(fives or 0)

    codes, error, fives = asyncio.run(go())
    assert codes == [500, 500] and fives == 2
    assert error["type"] == "server_error" and error["code"] == "internal_error"
    by_type = {r.error_type: r for r in sink.records}
    assert by_type["RuntimeError"].status == "error"  # the crash, recorded by the server
    assert [r.status for r in sink.records].count("error") == 2
    spans = [sp for sp in exporter.get_finished_spans() if sp.kind == SpanKind.SERVER]
    assert len(spans) == 2 and all(sp.status.status_code == StatusCode.ERROR for sp in spans)
