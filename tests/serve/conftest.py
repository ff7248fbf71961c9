"""Helpers for the serve tests: small real engines, servers on loopback, a stream reader."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import pytest

from fleetwatch.engine_probe.engine import EngineConfig, LLMEngine, ModelConfig

MODEL = ModelConfig(
    num_layers=2,
    hidden_size=64,
    intermediate_size=128,
    num_heads=4,
    num_kv_heads=2,
    vocab_size=512,
    max_position_embeddings=4096,
)


def make_engine(**engine_options: Any) -> LLMEngine:
    options: dict[str, Any] = {"num_blocks": 1024, "max_num_seqs": 32, "device": "cpu"}
    options.update(engine_options)
    return LLMEngine(MODEL, EngineConfig(**options))


async def read_stream(
    resp: aiohttp.ClientResponse, prefix: bytes = b""
) -> tuple[list[dict[str, Any]], bool]:
    """All JSON events of an SSE response (after ``prefix``, bytes already read), and whether it ended with [DONE]."""
    from fleetwatch.engine_probe.probe.sse import SSEParser

    parser = SSEParser()
    events: list[dict[str, Any]] = []
    done = False
    for payload in parser.feed(prefix):
        events.append(json.loads(payload))
    async for data in resp.content.iter_any():
        for payload in parser.feed(data):
            if payload == "[DONE]":
                done = True
            else:
                events.append(json.loads(payload))
    return events, done


def tokens_of(events: list[dict[str, Any]]) -> list[int]:
    out: list[int] = []
    for e in events:
        for c in e.get("choices", []):
            out.extend(c.get("token_ids", []))
    return out


async def wait_for(cond: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Poll ``cond`` on the event loop until true (fails the test after ``timeout_s``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


@contextlib.contextmanager
def live_server(engine: Any, **options: Any) -> Iterator[Any]:
    """``start_server(engine, **options)`` on its own event-loop thread, for blocking clients
    (the official ``openai`` SDK); yields the ``ServerHandle``, stops it (draining) on exit."""
    from fleetwatch.engine_probe.serve import start_server

    loop = asyncio.new_event_loop()
    ready = threading.Event()
    box: dict[str, Any] = {}

    async def main() -> None:
        try:
            box["handle"] = await start_server(engine, **options)
        except BaseException as exc:
            box["error"] = exc
            ready.set()
            return
        box["stop"] = asyncio.Event()
        ready.set()
        await box["stop"].wait()
        await box["handle"].stop(drain_timeout_s=10)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(60), "server did not start"
    if "error" in box:
        raise box["error"]
    try:
        yield box["handle"]
    finally:
        loop.call_soon_threadsafe(box["stop"].set)
        thread.join(60)
        loop.close()


class Kit:
    """The helpers above, handed to tests as the ``kit`` fixture (importlib mode has no conftest imports)."""

    model = MODEL
    make_engine = staticmethod(make_engine)
    read_stream = staticmethod(read_stream)
    tokens_of = staticmethod(tokens_of)
    wait_for = staticmethod(wait_for)
    live_server = staticmethod(live_server)


@pytest.fixture(scope="session")
def kit() -> type[Kit]:
    return Kit
