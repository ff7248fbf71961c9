"""The reference engine served on loopback inside this process (``fleetwatch probe run --engine reference``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

__all__ = ["serve_reference"]


@asynccontextmanager
async def serve_reference(
    config: Path | None = None, **engine_options: Any
) -> AsyncIterator[tuple[str, Any]]:
    """Yield (URL, ModelConfig) of a reference engine served on 127.0.0.1 at a free port.

    ``config`` is a Hugging Face ``config.json`` giving the model's shape (random weights).
    """
    from fleetwatch.engine_probe.engine import EngineConfig, LLMEngine, ModelConfig
    from fleetwatch.engine_probe.serve.lifecycle import start_server

    model = ModelConfig.from_hf_config(config) if config is not None else ModelConfig()
    engine = LLMEngine(model, EngineConfig(**engine_options))
    handle = await start_server(engine, "127.0.0.1", 0)
    try:
        yield handle.url, model
    finally:
        await handle.stop(drain_timeout_s=5.0)
