"""Traffic classes over HTTP: the header labels the request, the server's default covers the rest,
malformed values are refused, and the label stays bounded."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
import typer
from typer.testing import CliRunner

from fleetwatch.engine_probe.engine import EngineConfigError
from fleetwatch.engine_probe.serve import ServerConfig, start_server
from fleetwatch.engine_probe.serve.command.cli import serve
from fleetwatch.engine_probe.serve.request_context import TRAFFIC_CLASS_HEADER

REQUESTS = "fleetwatch_requests_total"


def _ok(registry: Any, traffic_class: str) -> float:
    labels = {"model": "reference", "replica": "replica-0", "traffic_class": traffic_class}
    return float(
        registry.get_sample_value(REQUESTS, {**labels, "status": "ok", "finish_reason": "length"})
        or 0.0
    )


def _post(session: aiohttp.ClientSession, url: str, headers: dict[str, str] | None = None) -> Any:
    body = {"model": "reference", "prompt": "hello", "max_tokens": 2}
    return session.post(f"{url}/v1/completions", json=body, headers=headers or {})


def test_the_header_sets_the_class_and_the_server_default_covers_the_rest(kit: Any) -> None:
    async def go() -> tuple[list[float], list[int], dict[str, Any]]:
        config = ServerConfig(traffic_class="batch")
        async with (
            await start_server(kit.make_engine(), config=config) as h,
            aiohttp.ClientSession() as s,
        ):
            codes = []
            for headers in ({TRAFFIC_CLASS_HEADER: "chat"}, {TRAFFIC_CLASS_HEADER: " chat "}, {}):
                async with _post(s, h.url, headers) as r:
                    codes.append(r.status)
                    await r.read()
            async with _post(s, h.url, {TRAFFIC_CLASS_HEADER: "a b{c}"}) as r:
                codes.append(r.status)
                refused = await r.json()
            h.instrumentation.flush()
            counts = [_ok(h.registry, tc) for tc in ("chat", "batch", "default")]
            return counts, codes, refused

    counts, codes, refused = asyncio.run(go())
    assert codes == [200, 200, 200, 400]
    assert counts == [2, 1, 0]
    assert refused["error"]["param"] == TRAFFIC_CLASS_HEADER
    assert TRAFFIC_CLASS_HEADER in refused["error"]["message"]


def test_class_values_beyond_the_cap_fold_into_other_and_are_counted(kit: Any) -> None:
    async def go() -> tuple[list[float], float]:
        options = {"max_label_values": 2}
        async with (
            await start_server(kit.make_engine(), telemetry_options=options) as h,
            aiohttp.ClientSession() as s,
        ):
            for tc in ("a", "b", "c", "d"):
                async with _post(s, h.url, {TRAFFIC_CLASS_HEADER: tc}) as r:
                    assert r.status == 200
                    await r.read()
            h.instrumentation.flush()
            overflow = h.registry.get_sample_value(
                "fleetwatch_telemetry_label_overflow_total",
                {"model": "reference", "replica": "replica-0", "label": "traffic_class"},
            )
            return [_ok(h.registry, tc) for tc in ("a", "b", "c", "other")], overflow

    counts, overflow = asyncio.run(go())
    assert counts == [1, 1, 0, 2]
    assert overflow == 2


@pytest.mark.parametrize("value", ["", "has space", "x" * 65])
def test_serve_rejects_a_malformed_default_class(value: str) -> None:
    app = typer.Typer()
    app.command("serve")(serve)
    app.command("other")(lambda: None)
    result = CliRunner().invoke(app, ["serve", "--traffic-class", value])
    assert isinstance(result.exception, EngineConfigError)
    assert "--traffic-class must be 1-64 letters" in str(result.exception)
