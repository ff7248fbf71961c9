"""Helpers for the serve tests: small real engines, servers on loopback, a stream reader."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from engine_probe.engine import EngineConfig, LLMEngine, ModelConfig

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
    from engine_probe.probe.sse import SSEParser

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


class Kit:
    """The helpers above, handed to tests as the ``kit`` fixture (importlib mode has no conftest imports)."""

    make_engine = staticmethod(make_engine)
    read_stream = staticmethod(read_stream)
    tokens_of = staticmethod(tokens_of)
    wait_for = staticmethod(wait_for)


@pytest.fixture
def kit() -> type[Kit]:
    return Kit
