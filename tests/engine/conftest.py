"""Small shapes so the whole engine test run stays within its time budget on two CPU cores."""

from __future__ import annotations

import random

import pytest
import torch

from fleetwatch.engine_probe.engine import EngineConfig, LLMEngine, ModelConfig

TINY = ModelConfig(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    max_position_embeddings=512,
    seed=3,
)


@pytest.fixture(autouse=True, scope="session")
def _threads() -> None:
    torch.set_num_threads(1)


@pytest.fixture
def tiny() -> ModelConfig:
    return TINY


def _make_engine(**overrides: object) -> LLMEngine:
    """The tiny model with small blocks; engine kwargs (faults, clock, sleep, observer, model)
    and EngineConfig fields may both be passed."""
    fields: dict[str, object] = {"num_blocks": 256, "block_size": 4, "max_num_batched_tokens": 64}
    fields.update(overrides)
    kwargs = {k: fields.pop(k) for k in ("faults", "clock", "sleep", "observer") if k in fields}
    model = fields.pop("model", TINY)
    return LLMEngine(model, EngineConfig(**fields), **kwargs)  # type: ignore[arg-type]


def _prompts(n: int, lo: int, hi: int, seed: int = 0, vocab: int = 512) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


@pytest.fixture
def make_engine():  # type: ignore[no-untyped-def]
    """Factory: ``make_engine(num_blocks=..., faults=..., clock=..., ...)`` on the tiny model."""
    return _make_engine


@pytest.fixture
def make_prompts():  # type: ignore[no-untyped-def]
    """Factory: ``make_prompts(n, min_len, max_len, seed)`` random token-id prompts."""
    return _prompts
