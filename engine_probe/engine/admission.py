"""Admission: whether the model can ever serve a request, and whether the engine takes it now.

``check_request`` reads only configuration (any thread may call it) and raises
``EngineConfigError``; ``rejection`` names why a valid request is turned away at arrival.
"""

from __future__ import annotations

from collections.abc import Sequence

from fleetwatch.engine_probe.engine.config import EngineConfig, ModelConfig, SamplingParams
from fleetwatch.engine_probe.engine.errors import EngineConfigError
from fleetwatch.engine_probe.engine.scheduler import Scheduler

__all__ = ["check_request", "rejection"]


def check_request(
    model: ModelConfig,
    prompt_token_ids: Sequence[int],
    max_tokens: int,
    sampling: SamplingParams | None = None,
) -> None:
    """Raise ``EngineConfigError`` if the request can never be served by ``model``."""
    if len(prompt_token_ids) == 0:
        raise EngineConfigError("request: prompt_token_ids is empty")
    vocab = model.vocab_size
    lo, hi = min(prompt_token_ids), max(prompt_token_ids)
    if lo < 0 or hi >= vocab:
        bad = lo if lo < 0 else hi
        raise EngineConfigError(f"request: token id {bad} outside the vocabulary [0, {vocab})")
    if max_tokens < 1:
        raise EngineConfigError(f"request: max_tokens must be >= 1, got {max_tokens}")
    limit = model.max_position_embeddings
    if len(prompt_token_ids) + max_tokens > limit:
        raise EngineConfigError(
            f"request: prompt ({len(prompt_token_ids)} tokens) + max_tokens ({max_tokens}) "
            f"exceeds the model's {limit} positions"
        )
    if (
        sampling is not None
        and sampling.eos_token_id is not None
        and not 0 <= sampling.eos_token_id < vocab
    ):
        raise EngineConfigError(
            f"request: eos_token_id {sampling.eos_token_id} outside the vocabulary"
        )


def rejection(scheduler: Scheduler, config: EngineConfig, num_tokens: int) -> str | None:
    """Why a request of ``num_tokens`` (prompt + max_tokens) is rejected now, or None:
    ``KVCapacityExceeded`` (larger than the whole KV pool) or ``QueueFull`` (``max_waiting``)."""
    if scheduler.blocks_for(num_tokens) > config.num_blocks:
        return "KVCapacityExceeded"
    if config.max_waiting is not None and len(scheduler.waiting) >= config.max_waiting:
        return "QueueFull"
    return None
