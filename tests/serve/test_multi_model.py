"""Several models behind one server on loopback: the request's ``model`` picks one, models load on
demand within a byte budget, a model serving a stream is pinned, refusals say why."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetwatch.engine_probe.engine import EngineConfig, ModelConfig
from fleetwatch.engine_probe.serve.front.config import ServerConfig
from fleetwatch.engine_probe.serve.multi.lifecycle import start_multi_model_server
from fleetwatch.engine_probe.serve.multi.server import (
    MultiModelServer,
    ServedModel,
    parse_model_flag,
)

pytestmark = pytest.mark.timeout(120)

SMALL = ModelConfig(
    num_layers=2,
    hidden_size=64,
    intermediate_size=128,
    num_heads=4,
    num_kv_heads=2,
    vocab_size=512,
    max_position_embeddings=4096,
)
BIG = ModelConfig(
    num_layers=4,
    hidden_size=128,
    intermediate_size=256,
    num_heads=4,
    num_kv_heads=2,
    vocab_size=512,
    max_position_embeddings=4096,
)
HUGE = ModelConfig(
    num_layers=8,
    hidden_size=256,
    intermediate_size=512,
    num_heads=4,
    num_kv_heads=2,
    vocab_size=512,
    max_position_embeddings=4096,
)


def _served(name: str, model: ModelConfig) -> ServedModel:
    engine = EngineConfig(num_blocks=256, max_num_seqs=8, device="cpu", model_name=name)
    return ServedModel(name, model, engine)


MODELS = [_served("small", SMALL), _served("big", BIG), _served("huge", HUGE)]
BUDGET = MODELS[0].size_bytes + MODELS[1].size_bytes - 1  # one of small, big at a time


def _body(model: str, max_tokens: int = 4, stream: bool = False) -> dict[str, Any]:
    return {"model": model, "prompt": "hello", "max_tokens": max_tokens, "stream": stream}


def _metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):  # a valid exposition, or this raises
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _value(m: dict[Any, float], name: str, **labels: str) -> float | None:
    return m.get((name, tuple(sorted({"replica": "replica-0", **labels}.items()))))


def test_sizes_differ_and_the_budget_holds_one_at_a_time() -> None:
    small, big, huge = (m.size_bytes for m in MODELS)
    assert small < big < BUDGET < small + big and huge > BUDGET


def test_models_load_on_demand_evict_and_refuse_with_reasons(kit: Any) -> None:
    server = MultiModelServer(MODELS, BUDGET, config=ServerConfig(drain_timeout_s=5))

    async def go() -> dict[str, Any]:
        got: dict[str, Any] = {}
        async with (
            await start_multi_model_server(server) as h,
            aiohttp.ClientSession() as s,
        ):
            url = f"{h.url}/v1/completions"
            async with s.get(f"{h.url}/ready") as r:
                got["ready"] = r.status
            async with s.post(url, json=_body("small")) as r:
                got["small"] = (r.status, (await r.json())["model"])
            async with s.get(f"{h.url}/health") as r:
                got["health"] = await r.json()
            async with s.post(
                f"{h.url}/v1/chat/completions",
                json={
                    "model": "big",
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 3,
                },
            ) as r:
                got["big"] = (r.status, (await r.json())["model"])
            got["resident_after_big"] = server.cache.resident_names()
            async with s.post(url, json=_body("nope")) as r:
                got["unknown"] = (r.status, (await r.json())["error"]["code"])
            async with s.post(url, json=_body("huge")) as r:
                got["huge"] = (r.status, r.headers.get("Retry-After"), await r.json())
            lease = await server.cache.acquire("big")  # a request in flight on big
            async with s.post(url, json=_body("small")) as r:
                got["pinned"] = (r.status, r.headers.get("Retry-After"), await r.json())
            server.cache.release(lease)
            async with s.post(url, json=_body("small")) as r:
                got["after_release"] = r.status
            async with s.get(f"{h.url}/metrics") as r:
                got["metrics"] = _metrics(await r.text())
            async with s.get(f"{h.url}/v1/models") as r:
                got["models"] = [m["id"] for m in (await r.json())["data"]]
        return got

    got = asyncio.run(go())
    assert got["ready"] == 200
    assert got["small"] == (200, "small")
    assert got["health"]["models"]["small"] == {"resident": True, "requests": 0}
    assert got["big"] == (200, "big")
    assert got["resident_after_big"] == ["big"]
    assert got["unknown"] == (404, "model_not_found")
    status, retry, err = got["huge"]
    assert (status, retry, err["error"]["code"]) == (503, None, "model_too_large")
    assert "needs" in err["error"]["message"] and str(BUDGET) in err["error"]["message"]
    status, retry, err = got["pinned"]
    assert (status, retry, err["error"]["code"]) == (503, "1", "model_cache_full")
    assert "big" in err["error"]["message"]
    assert got["after_release"] == 200
    assert got["models"] == ["small", "big", "huge"]

    m = got["metrics"]
    assert _value(m, "fleetwatch_model_cache_loads_total", model="small") == 2
    assert _value(m, "fleetwatch_model_cache_evictions_total", model="small") == 1
    assert _value(m, "fleetwatch_model_cache_evictions_total", model="big") == 1
    assert _value(m, "fleetwatch_model_cache_load_seconds_count", model="big") == 1
    assert _value(m, "fleetwatch_model_cache_resident", model="small") == 1
    assert _value(m, "fleetwatch_model_cache_resident_bytes") == MODELS[0].size_bytes
    refusals = "fleetwatch_model_cache_refusals_total"
    assert _value(m, refusals, model="huge", reason="too_large") == 1
    assert _value(m, refusals, model="small", reason="all_pinned") == 1
    for phase in ("weights_load", "kv_cache_alloc", "warmup", "readiness"):
        assert _value(m, "fleetwatch_engine_startup_seconds", model="big", phase=phase) is not None
    # the resident model's own engine metrics, merged in and labelled with it
    assert any(
        name == "fleetwatch_requests_total" and ("model", "small") in labels and v == 1
        for (name, labels), v in m.items()
    )


def test_a_model_streaming_is_pinned_until_its_client_goes(kit: Any) -> None:
    server = MultiModelServer(MODELS[:2], BUDGET)

    async def go() -> dict[str, Any]:
        got: dict[str, Any] = {}
        async with (
            await start_multi_model_server(server) as h,
            aiohttp.ClientSession() as s,
        ):
            url = f"{h.url}/v1/completions"
            # 3000 tokens: the stream cannot end while this test looks at it
            stream = await s.post(url, json=_body("small", 3000, stream=True))
            assert stream.status == 200
            await stream.content.readline()  # the stream has begun
            got["pins"] = server.cache.pins("small")
            async with s.post(url, json=_body("big")) as r:
                got["big_while_streaming"] = (r.status, (await r.json())["error"]["code"])
            got["pins_still"] = server.cache.pins("small")
            stream.close()  # the client goes: the handler is cancelled, its lease ends
            await kit.wait_for(lambda: server.cache.pins("small") == 0)
            async with s.post(url, json=_body("big")) as r:
                got["big_after"] = r.status
            got["resident"] = server.cache.resident_names()
        return got

    got = asyncio.run(go())
    assert got["pins"] == 1 and got["pins_still"] == 1
    assert got["big_while_streaming"] == (503, "model_cache_full")
    assert got["big_after"] == 200
    assert got["resident"] == ["big"]


@pytest.mark.parametrize("bad", ["small", "=x", "a=", "a\nb=default"])
def test_model_flag_wants_name_equals_config(bad: str) -> None:
    with pytest.raises(ValueError, match="--model"):
        parse_model_flag(bad)


def test_model_flag_parses() -> None:
    assert parse_model_flag("chat=/models/c.json") == ("chat", "/models/c.json")
