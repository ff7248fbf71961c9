"""Shared helpers for telemetry tests: a real engine workload and an in-memory tracer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from fleetwatch.engine_probe.engine import (
    EngineConfig,
    FaultConfig,
    LLMEngine,
    ModelConfig,
    RequestParams,
)

SMALL_MODEL = ModelConfig(
    vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2
)


@dataclass
class Run:
    """What the engine returned: tokens and the final output per request id."""

    tokens: dict[str, list[int]] = field(default_factory=dict)
    final: dict[str, Any] = field(default_factory=dict)
    steps: int = 0


def make_engine(
    *,
    num_blocks: int = 64,
    max_num_seqs: int = 8,
    error_rate: float = 0.0,
    seed: int = 1,
    **kw: Any,
) -> LLMEngine:
    return LLMEngine(
        SMALL_MODEL,
        EngineConfig(
            num_blocks=num_blocks, block_size=16, max_num_seqs=max_num_seqs, num_threads=1, **kw
        ),
        faults=FaultConfig(error_rate=error_rate, seed=seed),
    )


def drive(
    engine: LLMEngine,
    prompts: Sequence[Sequence[int]],
    max_tokens: int | Sequence[int],
    *,
    abort: dict[int, int] | None = None,
    request_kw: Callable[[int], dict[str, Any]] | None = None,
) -> tuple[list[str], Run]:
    """Add every prompt, step until done; ``abort`` maps step number -> prompt index to abort,
    ``request_kw(i)`` gives the ``RequestParams`` fields of prompt ``i``."""
    run = Run()
    ids = []
    for i, p in enumerate(prompts):
        mt = max_tokens if isinstance(max_tokens, int) else max_tokens[i]
        params = RequestParams(**(request_kw(i) if request_kw else {}))
        rid = engine.add_request(p, max_tokens=mt, params=params)
        ids.append(rid)
        run.tokens[rid] = []
    while engine.has_unfinished():
        for out in engine.step():
            run.tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
            if out.finished:
                run.final[out.request_id] = out
        run.steps += 1
        if abort and run.steps in abort:
            engine.abort(ids[abort[run.steps]])
    return ids, run


def mixed_workload(engine: LLMEngine, **kw: Any) -> tuple[list[str], Run]:
    """Six requests on a tiny KV cache (forces preemption), one aborted at step 3."""
    prompts = [[(i % 200) + 1] * 40 for i in range(6)]
    return drive(engine, prompts, 40, abort={3: 5}, **kw)


@pytest.fixture
def tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.fixture(name="make_engine", scope="session")
def _make_engine_fixture() -> Callable[..., LLMEngine]:
    return make_engine


@pytest.fixture(name="mixed_workload", scope="session")
def _mixed_workload_fixture() -> Callable[..., tuple[list[str], Run]]:
    return mixed_workload


@pytest.fixture(name="drive", scope="session")
def _drive_fixture() -> Callable[..., tuple[list[str], Run]]:
    return drive


@pytest.fixture(name="small_model", scope="session")
def _small_model_fixture() -> ModelConfig:
    return SMALL_MODEL
