"""A real continuous-batching LLM engine in torch: paged KV cache, prefix caching, chunked
prefill, preemption that resumes. It reports its step loop through ``fleetwatch.telemetry.hooks``, the
observer protocol every engine adapter calls.

Example::

    from fleetwatch.engine_probe.engine import EngineConfig, LLMEngine, ModelConfig

    engine = LLMEngine(ModelConfig(), EngineConfig(num_blocks=512))
    outputs = engine.generate([[1, 2, 3], [4, 5]], max_tokens=16)

Names are resolved on first use, so importing ``fleetwatch.engine_probe.engine.errors`` (as the command line
does) does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetwatch.core.lazy import lazy_attributes, lazy_dir

if TYPE_CHECKING:
    from fleetwatch.engine_probe.engine.async_engine import AsyncEngine
    from fleetwatch.engine_probe.engine.config import (
        EngineConfig,
        FaultConfig,
        ModelConfig,
        SamplingParams,
    )
    from fleetwatch.engine_probe.engine.errors import EngineConfigError
    from fleetwatch.engine_probe.engine.llm_engine import LLMEngine
    from fleetwatch.engine_probe.engine.params import RequestParams
    from fleetwatch.engine_probe.engine.request import RequestOutput
    from fleetwatch.telemetry.hooks import EngineObserver, RequestInfo, StepStats

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
    "RequestParams",
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
    "EngineObserver": "fleetwatch.telemetry.hooks",
    "RequestInfo": "fleetwatch.telemetry.hooks",
    "StepStats": "fleetwatch.telemetry.hooks",
    "LLMEngine": "llm_engine",
    "RequestOutput": "request",
    "RequestParams": "params",
}


__getattr__ = lazy_attributes(__name__, _WHERE)
__dir__ = lazy_dir(__all__)
