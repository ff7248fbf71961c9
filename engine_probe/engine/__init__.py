"""A real continuous-batching LLM engine in torch: paged KV cache, prefix caching, chunked
prefill, preemption that resumes. ``hooks`` defines how observers see its step loop.

Example::

    from engine_probe.engine import EngineConfig, LLMEngine, ModelConfig

    engine = LLMEngine(ModelConfig(), EngineConfig(num_blocks=512))
    outputs = engine.generate([[1, 2, 3], [4, 5]], max_tokens=16)

Names are resolved on first use, so importing ``engine_probe.engine.hooks`` or ``.errors``
(as telemetry and the command line do) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine_probe.engine.async_engine import AsyncEngine
    from engine_probe.engine.config import EngineConfig, FaultConfig, ModelConfig, SamplingParams
    from engine_probe.engine.errors import EngineConfigError
    from engine_probe.engine.hooks import EngineObserver, RequestInfo, StepStats
    from engine_probe.engine.llm_engine import LLMEngine
    from engine_probe.engine.request import RequestOutput

__all__ = [
    "AsyncEngine",
    "EngineConfig",
    "EngineConfigError",
    "EngineObserver",
    "FaultConfig",
    "LLMEngine",
    "ModelConfig",
    "RequestInfo",
    "RequestOutput",
    "SamplingParams",
    "StepStats",
]

_WHERE = {
    "AsyncEngine": "async_engine",
    "EngineConfig": "config",
    "FaultConfig": "config",
    "ModelConfig": "config",
    "SamplingParams": "config",
    "EngineConfigError": "errors",
    "EngineObserver": "hooks",
    "RequestInfo": "hooks",
    "StepStats": "hooks",
    "LLMEngine": "llm_engine",
    "RequestOutput": "request",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
