"""Peak memory bandwidth and FLOP/s: the denominators of MBU and MFU.

Declared peaks come from vendor datasheets (dense bf16 tensor FLOP/s, HBM bandwidth); a measured
bandwidth (a large tensor copy timed with torch) is the honest denominator on any other device,
including CPUs. Neither is guessed: an unknown device has no declared peak.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from fleetwatch.telemetry.gpu.specs import find_gpu

__all__ = ["PeakRates", "declared_peak", "measure_memory_bandwidth"]


@dataclass(frozen=True, slots=True)
class PeakRates:
    """Peak bytes/s and FLOP/s of one device, and where the numbers come from."""

    bandwidth_bytes_per_s: float
    flops_per_s: float | None
    source: str


def declared_peak(device_name: str) -> PeakRates | None:
    """The datasheet peak (``fleetwatch.telemetry.gpu.specs``) for an NVML device name, or None for an
    unknown device."""
    spec = find_gpu(device_name)
    if spec is None:
        return None
    return PeakRates(spec.bandwidth_bps, spec.bf16_flops, f"datasheet: {spec.source}, dense bf16")


def measure_memory_bandwidth(
    device: str = "cpu",
    *,
    nbytes: int = 256 << 20,
    repeats: int = 5,
    clock: Callable[[], float] = time.perf_counter,
) -> PeakRates:
    """Best-of-``repeats`` copy bandwidth of ``device`` in bytes/s (read + write counted).

    Takes about ``repeats`` × (2 × ``nbytes`` ÷ bandwidth) seconds; run it once at start-up.
    """
    import torch

    dev = torch.device(device)
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=dev).fill_(1.0)
    dst = torch.empty_like(src)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    dst.copy_(src)
    sync()
    best = float("inf")
    for _ in range(max(1, repeats)):
        t0 = clock()
        dst.copy_(src)
        sync()
        best = min(best, clock() - t0)
    return PeakRates(2.0 * src.numel() * 4 / best, None, f"measured: {device} copy")
