"""Accelerator specs the bandwidth bound uses: memory, memory bandwidth, dense bf16 tensor FLOP/s.

Figures are the vendors' datasheet numbers (decimal units: 1 GB = 1e9 bytes, 1 TB/s = 1e12 B/s),
dense, i.e. without the 2:4 sparsity that datasheets often quote first. Real kernels reach roughly
80-90% of the bandwidth and less of the FLOP/s; the bound is a ceiling, not a forecast.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine_probe.probe.errors import ProbeError

__all__ = ["GPUS", "GPUSpec", "get_gpu"]


@dataclass(frozen=True, slots=True)
class GPUSpec:
    """One accelerator: ``memory_bytes``, ``bandwidth_bps`` (bytes/s), ``bf16_flops`` (FLOP/s)."""

    name: str
    memory_bytes: float
    bandwidth_bps: float
    bf16_flops: float
    source: str

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity above which a kernel is compute-bound: peak FLOP/s ÷ bandwidth."""
        return self.bf16_flops / self.bandwidth_bps


GPUS: dict[str, GPUSpec] = {
    # NVIDIA H100 Tensor Core GPU datasheet (SXM5 column): 80 GB HBM3, 3.35 TB/s,
    # BF16 Tensor Core 1,979 TFLOPS with sparsity -> 989.4 dense.
    "H100-SXM": GPUSpec("H100-SXM", 80e9, 3.35e12, 989.4e12, "NVIDIA H100 datasheet, SXM5"),
    # NVIDIA H200 Tensor Core GPU datasheet (SXM column): 141 GB HBM3e, 4.8 TB/s,
    # BF16 1,979 TFLOPS with sparsity -> 989.4 dense (same compute die as H100 SXM).
    "H200": GPUSpec("H200", 141e9, 4.8e12, 989.4e12, "NVIDIA H200 datasheet, SXM"),
    # NVIDIA HGX B200 / DGX B200 datasheet, per GPU: 180 GB HBM3e (1,440 GB per 8 GPUs),
    # 8 TB/s, BF16 4.5 PFLOPS with sparsity -> 2.25 dense.
    "B200": GPUSpec("B200", 180e9, 8.0e12, 2.25e15, "NVIDIA HGX B200 datasheet, per GPU"),
    # NVIDIA A100 Tensor Core GPU datasheet (80GB SXM column): 2,039 GB/s,
    # BF16 Tensor Core 312 TFLOPS dense (624 with sparsity).
    "A100": GPUSpec("A100", 80e9, 2.039e12, 312e12, "NVIDIA A100 datasheet, 80GB SXM"),
    # NVIDIA L40S datasheet: 48 GB GDDR6, 864 GB/s, BF16 Tensor 362.05 TFLOPS dense (733 sparse).
    "L40S": GPUSpec("L40S", 48e9, 864e9, 362.05e12, "NVIDIA L40S datasheet"),
}


def get_gpu(name: str) -> GPUSpec:
    """Look a GPU up by name, ignoring case, spaces, dashes and underscores (``h100 sxm`` works)."""

    def norm(s: str) -> str:
        return "".join(ch for ch in s.lower() if ch.isalnum())

    wanted = norm(name)
    for key, spec in GPUS.items():
        if norm(key) == wanted or (wanted == "h100" and key == "H100-SXM"):
            return spec
    raise ProbeError(f"unknown GPU {name!r}: known are {', '.join(GPUS)}")
