"""What ``fleetwatch engine serve`` asks of telemetry for each replica it serves.

- ``goodput``: the target (TTFT s, TPOT s) the exporter counts ``fleetwatch_goodput_requests_total``
  against; without one that counter is not exported at all, so a goodput SLO's rules report the
  metric missing instead of burning on a counter stuck at 0.
- ``gpu``: a GPU sampler labelled with the replica, so ``/metrics`` carries
  ``fleetwatch_gpu_available`` (1, or 0 with the reason when the host has no GPU or driver) and,
  on a GPU host, the device series the replica dashboard's GPU row reads.
- ``span_file``: spans as JSON lines (the ``OTEL_*`` variables work as well).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fleetwatch.engine_probe.engine.errors import EngineConfigError

__all__ = ["goodput_target", "telemetry_options"]


def goodput_target(text: str | None) -> tuple[float, float] | None:
    """``--goodput TTFT,TPOT`` as seconds; ``EngineConfigError`` naming the flag when malformed."""
    from fleetwatch.core.goodput import parse_goodput_target

    if text is None:
        return None
    try:
        return parse_goodput_target(text)
    except ValueError as exc:
        raise EngineConfigError(f"--goodput: {exc}") from None


def telemetry_options(
    replica: str,
    *,
    goodput: tuple[float, float] | None = None,
    span_file: Path | None = None,
    gpu: bool = True,
) -> dict[str, Any]:
    """Keyword arguments for ``fleetwatch.telemetry.instrument`` (through ``start_server``) for one replica."""
    options: dict[str, Any] = {}
    if gpu:
        from fleetwatch.telemetry.gpu import GpuSampler

        options["gpu"] = GpuSampler(labels={"replica": replica})
    if span_file is not None:
        options["span_file"] = span_file
    if goodput is not None:
        options["goodput"] = goodput
    return options
