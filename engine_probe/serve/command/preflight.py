"""What ``fleetwatch engine serve`` checks before it binds a port: the record folder and span
file can be written, torch is installed, every replica's engine fits in memory, and the KV cache
can hold one request as long as the model's context."""

from __future__ import annotations

from pathlib import Path

from fleetwatch.core.preflight import output_dir, output_file
from fleetwatch.engine_probe.engine.config import EngineConfig, ModelConfig
from fleetwatch.engine_probe.engine.preflight import (
    check_fits_memory,
    check_holds_request,
    require_torch,
)

__all__ = ["check_serve"]


def check_serve(
    model: ModelConfig,
    engine: EngineConfig,
    *,
    replicas: int,
    records: Path | None,
    span_file: Path | None,
) -> None:
    """Raise (``OSError`` naming the path, or ``EngineConfigError``) on the first problem."""
    if records is not None:
        output_dir(records)
    if span_file is not None:
        output_file(span_file)
    check_holds_request(
        model,
        engine,
        model.max_position_embeddings,
        f"a request of the model's full context ({model.max_position_embeddings} tokens)",
    )
    require_torch()
    check_fits_memory(model, engine, replicas=replicas)
