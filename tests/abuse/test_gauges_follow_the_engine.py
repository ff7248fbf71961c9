"""The running/waiting/KV gauges on /metrics say what /health says, after abort storms too.

Before: a client abort changed the engine's state without a step, so the gauges kept the last
step's values (``num_requests_running 4``, ``kv_cache_usage_ratio 0.031`` while /health said 0).
Now the engine reports its state whenever it changes without a step (a ``StepStats`` with no
tokens). Storms are seeded; every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from fleetwatch.telemetry.instrument import instrument

GAUGES = (
    "fleetwatch_num_requests_running",
    "fleetwatch_num_requests_waiting",
    "fleetwatch_kv_cache_usage_ratio",
)


def _gauges(registry: CollectorRegistry, engine: Any) -> tuple[float, ...]:
    base = {"model": engine.model_name, "replica": engine.replica}
    return tuple(float(registry.get_sample_value(n, base) or 0.0) for n in GAUGES)


def _truth(engine: Any) -> tuple[float, ...]:
    return (float(engine.num_running), float(engine.num_waiting), engine.kv_usage)


@pytest.mark.parametrize("seed", range(20))
def test_after_every_step_the_gauges_equal_the_engine(seed: int, tools: Any) -> None:
    rng = random.Random(seed)
    engine = tools.small_engine(num_blocks=64, max_num_seqs=4, max_waiting=8)
    registry = CollectorRegistry()
    inst = instrument(engine, registry=registry, env={})
    live: list[str] = []
    for _ in range(60):
        action = rng.random()
        if action < 0.35:
            prompt = [rng.randrange(1, 500) for _ in range(rng.randrange(1, 40))]
            live.append(engine.add_request(prompt, max_tokens=rng.randrange(1, 30)))
        elif action < 0.6 and live:
            for rid in rng.sample(live, rng.randrange(1, len(live) + 1)):
                engine.abort(rid)
                live.remove(rid)
        for out in engine.step():
            if out.finished and out.request_id in live:
                live.remove(out.request_id)
        assert _gauges(registry, engine) == pytest.approx(_truth(engine)), f"seed {seed}"
    for rid in list(live):
        engine.abort(rid)
    engine.step()
    assert _gauges(registry, engine) == (0.0, 0.0, 0.0)
    inst.detach()


async def _storm(url: str, rng: random.Random, session: aiohttp.ClientSession) -> None:
    async def one(finishes: bool, read_chunks: int) -> None:
        body = {
            "prompt": [rng.randrange(1, 500) for _ in range(rng.randrange(4, 64))],
            "max_tokens": rng.randrange(2, 8) if finishes else 2000,
            "stream": True,
        }
        async with session.post(f"{url}/v1/completions", json=body) as r:
            if finishes:
                await r.read()
                return
            n = 0
            async for _ in r.content.iter_any():
                n += 1
                if n >= read_chunks:
                    break
            r.close()  # the client goes away mid-stream: the server aborts the request

    jobs = [one(rng.random() < 0.3, rng.randrange(1, 6)) for _ in range(rng.randrange(6, 16))]
    await asyncio.gather(*jobs)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_metrics_agree_with_health_after_an_abort_storm(seed: int, tools: Any) -> None:
    from fleetwatch.engine_probe.serve import start_server

    rng = random.Random(seed)

    async def go() -> tuple[dict[str, Any], tuple[float, ...]]:
        engine = tools.small_engine(num_blocks=128, max_num_seqs=8)
        async with await start_server(engine) as h, aiohttp.ClientSession() as s:
            for _ in range(3):
                await _storm(h.url, rng, s)

            async def health() -> dict[str, Any]:
                async with s.get(f"{h.url}/health") as r:
                    got: dict[str, Any] = await r.json()
                    return got

            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while True:
                state = await health()
                gauges = _gauges(h.registry, engine)
                truth = (float(state["running"]), float(state["waiting"]), state["kv_usage"])
                if state["in_flight"] == 0 and state["running"] == 0 and gauges == truth:
                    return state, gauges
                if loop.time() > deadline:
                    return state, gauges
                await asyncio.sleep(0.02)

    state, gauges = asyncio.run(go())
    assert state["in_flight"] == 0 and state["running"] == 0 and state["waiting"] == 0
    assert gauges == (0.0, 0.0, 0.0), f"/metrics says {gauges} while /health says {state}"
