"""A real continuous-batching LLM engine in torch: paged KV cache, prefix caching, chunked
prefill, preemption that resumes. It reports its step loop through ``telemetry.hooks``, the
observer protocol every engine adapter calls.

Example::

    from engine_probe.engine import EngineConfig, LLMEngine, ModelConfig

    engine = LLMEngine(ModelConfig(), EngineConfig(num_blocks=512))
    outputs = engine.generate([[1, 2, 3], [4, 5]], max_tokens=16)

Names are resolved on first use, so importing ``engine_probe.engine.errors`` (as the command line
does) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine_probe.engine.async_engine import AsyncEngine
    from engine_probe.engine.config import EngineConfig, FaultConfig, ModelConfig, SamplingParams
    from engine_probe.engine.errors import EngineConfigError
    from engine_probe.engine.llm_engine import LLMEngine
    from engine_probe.engine.request import RequestOutput
    from telemetry.hooks import EngineObserver, RequestInfo, StepStats

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
    "EngineObserver": "telemetry.hooks",
    "RequestInfo": "telemetry.hooks",
    "StepStats": "telemetry.hooks",
    "LLMEngine": "llm_engine",
    "RequestOutput": "request",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    where = module if "." in module else f"{__name__}.{module}"
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
