"""The accelerators the bandwidth bound knows: the datasheet table in ``fleetwatch.telemetry.gpu.specs``."""

from __future__ import annotations

from fleetwatch.engine_probe.probe.errors import ProbeError
from fleetwatch.telemetry.gpu.specs import GPUS, GPUSpec, find_gpu

__all__ = ["GPUS", "GPUSpec", "get_gpu"]


def get_gpu(name: str) -> GPUSpec:
    """Look a GPU up by name, ignoring case, spaces, dashes and underscores (``h100 sxm`` works)."""
    spec = find_gpu(name)
    if spec is None:
        raise ProbeError(f"unknown GPU {name!r}: known are {', '.join(GPUS)}")
    return spec
