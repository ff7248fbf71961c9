"""A real continuous-batching LLM engine in torch: paged KV cache, prefix caching, chunked
prefill, preemption that resumes. ``hooks`` defines how observers see its step loop.

Example::

    from engine_probe.engine import EngineConfig, LLMEngine, ModelConfig

    engine = LLMEngine(ModelConfig(), EngineConfig(num_blocks=512))
    outputs = engine.generate([[1, 2, 3], [4, 5]], max_tokens=16)
"""

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
