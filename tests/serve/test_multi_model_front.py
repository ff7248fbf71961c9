"""The several-model front: a request is checked before it may cost a load, and one tenant gate
covers every model (a tenant's budget does not multiply with the models it asks for)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from fleetwatch.engine_probe.serve.front.config import ServerConfig
from fleetwatch.engine_probe.serve.front.tenants import TenantLimits
from fleetwatch.engine_probe.serve.multi.lifecycle import start_multi_model_server
from fleetwatch.engine_probe.serve.multi.server import MultiModelServer
from fleetwatch.engine_probe.serve.request_context import TENANT_HEADER
from tests.serve.test_multi_model import BUDGET, MODELS

pytestmark = pytest.mark.timeout(120)


def _body(model: str, **fields: Any) -> dict[str, Any]:
    return {"model": model, "prompt": "hello", "max_tokens": 4, **fields}


def test_invalid_requests_for_an_unloaded_model_load_nothing(kit: Any) -> None:
    server = MultiModelServer(MODELS[:2], BUDGET)
    bad = [
        (_body("small", max_tokens=-1), {}),
        (_body("small", temperature=9), {}),
        (_body("small", prompt=[10**6]), {}),  # a token id outside the vocabulary
        (_body("big", max_tokens=10**7), {}),  # past the context
        ({"model": "big", "messages": "hi"}, {}),
        (_body("big"), {"Idempotency-Key": "x" * 10_000}),
        (_body("big"), {TENANT_HEADER: "no spaces{}"}),
    ]

    async def go() -> tuple[list[int], list[str], int]:
        statuses = []
        async with (
            await start_multi_model_server(server) as h,
            aiohttp.ClientSession() as s,
        ):
            for body, headers in bad:
                path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
                async with s.post(f"{h.url}{path}", json=body, headers=headers) as r:
                    statuses.append(r.status)
            resident = server.cache.resident_names()
            async with s.post(f"{h.url}/v1/completions", json=_body("small")) as r:
                ok = r.status
        return statuses, resident, ok

    statuses, resident, ok = asyncio.run(go())
    assert statuses == [400] * len(bad)
    assert resident == []  # nothing loaded, nothing evicted for them
    assert ok == 200


def test_one_tenant_gate_covers_every_model_and_outlives_reloads(kit: Any) -> None:
    limits = TenantLimits(rate_per_s=0.01, burst=100.0)
    server = MultiModelServer(MODELS[:2], BUDGET, config=ServerConfig(tenants=limits))

    async def go() -> dict[str, int]:
        got = {}
        async with (
            await start_multi_model_server(server) as h,
            aiohttp.ClientSession() as s,
        ):
            url = f"{h.url}/v1/completions"
            acme = {TENANT_HEADER: "acme"}
            async with s.post(url, json=_body("small", max_tokens=60), headers=acme) as r:
                got["small"] = r.status
            # big is another engine; acme has used 60+ of its 100 on small: refused here too
            async with s.post(url, json=_body("big", max_tokens=60), headers=acme) as r:
                got["big"] = r.status
            async with s.post(url, json=_body("big", max_tokens=60)) as r:
                got["big_default"] = r.status  # (evicts small)
            async with s.post(url, json=_body("small", max_tokens=60), headers=acme) as r:
                got["small_reloaded"] = r.status  # a reload does not refill acme's bucket
        return got

    got = asyncio.run(go())
    assert got == {"small": 200, "big": 429, "big_default": 200, "small_reloaded": 429}


def test_close_waits_for_a_load_in_progress_and_unloads_it(kit: Any) -> None:
    server = MultiModelServer(MODELS[:2], BUDGET)
    unloaded: list[str] = []
    unload = server._unload

    async def counted(name: str, loaded: Any) -> None:
        unloaded.append(name)
        await unload(name, loaded)

    server._unload = counted  # type: ignore[method-assign]

    async def go() -> None:
        request = asyncio.ensure_future(server.cache.acquire("small"))
        await kit.wait_for(lambda: server.cache.resident_bytes > 0)  # the load has begun
        request.cancel()  # its client went: the load goes on, owned by the cache
        await server.close()

    asyncio.run(go())
    assert unloaded == ["small"]
