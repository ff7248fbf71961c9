"""Peak memory bandwidth and FLOP/s: the denominators of MBU and MFU.

Declared peaks come from vendor datasheets (dense bf16 tensor FLOP/s, HBM bandwidth); a measured
bandwidth (a large tensor copy timed with torch) is the honest denominator on any other device,
including CPUs. Neither is guessed: an unknown device has no declared peak.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = ["DECLARED_PEAKS", "PeakRates", "declared_peak", "measure_memory_bandwidth"]


@dataclass(frozen=True, slots=True)
class PeakRates:
    """Peak bytes/s and FLOP/s of one device, and where the numbers come from."""

    bandwidth_bytes_per_s: float
    flops_per_s: float | None
    source: str


DECLARED_PEAKS: Final[tuple[tuple[str, PeakRates], ...]] = (
    # Matched in order against the NVML device name (case-insensitive substring).
    ("B200", PeakRates(8.0e12, 2.25e15, "datasheet: B200, dense bf16")),
    ("H200", PeakRates(4.8e12, 989e12, "datasheet: H200 SXM, dense bf16")),
    ("H100 80GB HBM3", PeakRates(3.35e12, 989e12, "datasheet: H100 SXM, dense bf16")),
    ("H100 NVL", PeakRates(3.9e12, 835e12, "datasheet: H100 NVL, dense bf16")),
    ("H100 PCIe", PeakRates(2.0e12, 756e12, "datasheet: H100 PCIe, dense bf16")),
    ("A100-SXM4-80GB", PeakRates(2.039e12, 312e12, "datasheet: A100 80GB SXM, dense bf16")),
    ("A100", PeakRates(1.555e12, 312e12, "datasheet: A100 40GB, dense bf16")),
    ("L40S", PeakRates(864e9, 362e12, "datasheet: L40S, dense bf16")),
)


def declared_peak(device_name: str) -> PeakRates | None:
    """The datasheet peak for an NVML device name, or None for an unknown device."""
    name = device_name.lower()
    for key, peak in DECLARED_PEAKS:
        if key.lower() in name:
            return peak
    return None


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
