"""Restart-from-zero preemption never contradicts the stream: tokens already handed out are
replayed on the restart (forced, not re-sampled), so what a client was streamed is exactly the
sequence the engine finally produced, and no token is streamed twice."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest
import torch

import fleetwatch.engine_probe.engine.llm_engine as llm_engine_module
from fleetwatch.engine_probe.engine import LLMEngine, RequestParams, SamplingParams
from fleetwatch.engine_probe.engine.event_log import EventLog
from fleetwatch.engine_probe.engine.request import Request

SP = SamplingParams(temperature=0.9, top_p=0.95, seed=77)
PARAMS = RequestParams(sampling=SP)


def _stream(engine: LLMEngine, prompts: list[list[int]], max_tokens: int):
    """Per-request streamed tokens (as outputs arrive) and the engine's final output tokens."""
    ids = [engine.add_request(p, max_tokens=max_tokens, params=PARAMS) for p in prompts]
    streamed: dict[str, list[int]] = {rid: [] for rid in ids}
    final: dict[str, list[int]] = {}
    live: dict[str, Request] = {}
    while len(final) < len(ids):
        live.update(engine._requests)
        for out in engine.step():
            assert out.request_id not in final, "output after finish"
            streamed[out.request_id].extend(out.new_token_ids)
            if out.finished:
                req = live[out.request_id]
                final[out.request_id] = req.tokens[req.num_prompt :]
    return [streamed[r] for r in ids], [final[r] for r in ids]


def _preemptions(log: EventLog) -> int:
    return sum(s.preemptions for s in log.steps)


@pytest.mark.parametrize("policy", ["restart", "recompute"])
def test_tight_cache_stream_equals_final_output(make_engine, make_prompts, policy) -> None:
    prompts = make_prompts(30, 6, 14, seed=4)
    engine = make_engine(num_blocks=20, preemption=policy)
    log = EventLog()
    engine.attach(log)
    streamed, final = _stream(engine, prompts, 20)
    assert _preemptions(log) > 0
    assert streamed == final
    assert all(len(t) == 20 for t in streamed)
    roomy = make_engine(num_blocks=1024).generate(prompts, 20, sampling=SP)
    assert streamed == roomy  # seeded sampling: same tokens as an uninterrupted run
    assert engine.scheduler.pool.num_used == 0


def test_restart_replays_streamed_tokens_even_when_resampling_would_differ(
    make_engine, make_prompts, monkeypatch
) -> None:
    """A sampler whose draws depend on how often it was called (as floating-point differences
    between batch shapes can make a real one): the restart still reproduces what was streamed."""
    calls = {"n": 0}
    real = llm_engine_module.sample

    def drifting(logits: torch.Tensor, requests: Sequence[Request], seed: int) -> list[int]:
        calls["n"] += 1
        rng = random.Random(calls["n"])
        return [rng.randrange(logits.shape[-1]) for _ in real(logits, requests, seed)]

    monkeypatch.setattr(llm_engine_module, "sample", drifting)
    prompts = make_prompts(30, 6, 14, seed=4)
    engine = make_engine(num_blocks=20, preemption="restart")
    log = EventLog()
    engine.attach(log)
    streamed, final = _stream(engine, prompts, 20)
    assert _preemptions(log) > 0
    assert streamed == final
    assert all(len(t) == 20 for t in streamed)


def test_recompute_mode_unchanged_by_replay(make_engine, make_prompts) -> None:
    prompts = make_prompts(30, 6, 14, seed=4)
    engine = make_engine(num_blocks=20)
    log = EventLog()
    engine.attach(log)
    tight = engine.generate(prompts, 20, sampling=SP)
    assert _preemptions(log) > 0
    assert tight == make_engine(num_blocks=1024).generate(prompts, 20, sampling=SP)
