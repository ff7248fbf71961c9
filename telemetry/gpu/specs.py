"""Accelerator datasheets: memory, memory bandwidth and dense bf16 tensor FLOP/s.

One table for everything that needs a peak: MBU/MFU denominators (``fleetwatch.telemetry.gpu.peak``) and the
bandwidth bound (``fleetwatch.core.bound``). Figures are the vendors' datasheet numbers in
decimal units (1 GB = 1e9 bytes, 1 TB/s = 1e12 B/s), dense, i.e. without the 2:4 sparsity that
datasheets often quote first. Real kernels reach roughly 80-90 % of the bandwidth and less of the
FLOP/s: a peak is a ceiling, not a forecast.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["GPUS", "GPUSpec", "find_gpu"]


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One accelerator: ``memory_bytes``, ``bandwidth_bps`` (bytes/s), ``bf16_flops`` (FLOP/s).

    ``nvml_names`` are the device names NVML reports for it (``nvmlDeviceGetName``), matched
    whole: a name that is not listed is not this device, however similar.
    """

    name: str
    memory_bytes: float
    bandwidth_bps: float
    bf16_flops: float
    source: str
    nvml_names: tuple[str, ...] = ()

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity above which a kernel is compute-bound: peak FLOP/s ÷ bandwidth."""
        return self.bf16_flops / self.bandwidth_bps


GPUS: Final[Mapping[str, GPUSpec]] = {
    # NVIDIA H100 Tensor Core GPU datasheet (SXM5 column): 80 GB HBM3, 3.35 TB/s,
    # BF16 Tensor Core 1,979 TFLOPS with sparsity -> 989.4 dense.
    "H100-SXM": GPUSpec(
        "H100-SXM",
        80e9,
        3.35e12,
        989.4e12,
        "NVIDIA H100 datasheet, SXM5",
        ("NVIDIA H100 80GB HBM3",),
    ),
    # Same datasheet, NVL column: 94 GB HBM3, 3.9 TB/s, BF16 1,671 TFLOPS sparse -> 835.5 dense.
    "H100-NVL": GPUSpec(
        "H100-NVL", 94e9, 3.9e12, 835.5e12, "NVIDIA H100 datasheet, NVL", ("NVIDIA H100 NVL",)
    ),
    # Same datasheet, PCIe column: 80 GB HBM2e, 2 TB/s, BF16 1,513 TFLOPS sparse -> 756.5 dense.
    "H100-PCIe": GPUSpec(
        "H100-PCIe", 80e9, 2.0e12, 756.5e12, "NVIDIA H100 datasheet, PCIe", ("NVIDIA H100 PCIe",)
    ),
    # NVIDIA H200 Tensor Core GPU datasheet (SXM column): 141 GB HBM3e, 4.8 TB/s,
    # BF16 1,979 TFLOPS with sparsity -> 989.4 dense (same compute die as H100 SXM). Not the
    # H200 NVL board, and not GH200 (Grace Hopper, 96 or 144 GB: NVML says "NVIDIA GH200 480GB").
    "H200": GPUSpec(
        "H200", 141e9, 4.8e12, 989.4e12, "NVIDIA H200 datasheet, SXM", ("NVIDIA H200",)
    ),
    # NVIDIA HGX B200 / DGX B200 datasheet, per GPU: 180 GB HBM3e (1,440 GB per 8 GPUs),
    # 8 TB/s, BF16 4.5 PFLOPS with sparsity -> 2.25 dense.
    "B200": GPUSpec(
        "B200", 180e9, 8.0e12, 2.25e15, "NVIDIA HGX B200 datasheet, per GPU", ("NVIDIA B200",)
    ),
    # NVIDIA A100 Tensor Core GPU datasheet (80GB SXM column): 2,039 GB/s,
    # BF16 Tensor Core 312 TFLOPS dense (624 with sparsity).
    "A100": GPUSpec(
        "A100",
        80e9,
        2.039e12,
        312e12,
        "NVIDIA A100 datasheet, 80GB SXM",
        ("NVIDIA A100-SXM4-80GB",),
    ),
    # Same datasheet, 80GB PCIe column: 1,935 GB/s, 312 TFLOPS dense bf16.
    "A100-80GB-PCIe": GPUSpec(
        "A100-80GB-PCIe",
        80e9,
        1.935e12,
        312e12,
        "NVIDIA A100 datasheet, 80GB PCIe",
        ("NVIDIA A100 80GB PCIe",),
    ),
    # Same datasheet, 40GB columns (SXM and PCIe alike): 1,555 GB/s, 312 TFLOPS dense bf16.
    "A100-40GB": GPUSpec(
        "A100-40GB",
        40e9,
        1.555e12,
        312e12,
        "NVIDIA A100 datasheet, 40GB",
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB"),
    ),
    # NVIDIA L40S datasheet: 48 GB GDDR6, 864 GB/s, BF16 Tensor 362.05 TFLOPS dense (733 sparse).
    "L40S": GPUSpec("L40S", 48e9, 864e9, 362.05e12, "NVIDIA L40S datasheet", ("NVIDIA L40S",)),
}


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


# Every name a spec is found by, normalised: table keys, ``h100`` for the SXM part, NVML names.
_BY_NAME: Final[Mapping[str, GPUSpec]] = {
    **{_norm(n): spec for spec in GPUS.values() for n in spec.nvml_names},
    _norm("h100"): GPUS["H100-SXM"],
    **{_norm(key): spec for key, spec in GPUS.items()},
}


def find_gpu(name: str) -> GPUSpec | None:
    """The spec whose table key or NVML device name is ``name`` (ignoring case, spaces and
    punctuation; ``h100`` means the SXM part), or None: a name is matched whole, never by a part
    of it, so an unlisted device gets no datasheet peak rather than a neighbour's."""
    return _BY_NAME.get(_norm(name))
