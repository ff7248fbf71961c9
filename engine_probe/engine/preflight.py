"""What the engine commands check before they build an engine: torch is installed, the model and
its KV cache fit the memory they will take, and the KV cache can hold one whole request.

The memory figure is an estimate from the configuration alone (nothing is allocated): weights
and the rotary tables in the chosen dtype, the KV cache (``num_blocks + 1`` blocks, one is the
null block), the float32 scratch copy of the largest weight made while it is drawn, and a
``HEADROOM`` share on top for activations and the allocator. Nothing here imports torch at import
time.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fleetwatch.engine_probe.engine.config import EngineConfig, ModelConfig
from fleetwatch.engine_probe.engine.errors import EngineConfigError

__all__ = [
    "HEADROOM",
    "MemoryEstimate",
    "available_memory",
    "check_fits_memory",
    "check_holds_request",
    "estimate_memory",
    "require_torch",
]

HEADROOM = 0.10
"""Share added to the estimate for activations, the sampler and allocator slack."""

_BYTES = {"float32": 4, "bfloat16": 2, "float64": 8}
_GIB = float(1 << 30)


def require_torch() -> None:
    """Raise ``ModuleNotFoundError(name="torch")`` (the front door names the extra to install)
    when torch cannot be imported."""
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "torch":
            raise
        raise ModuleNotFoundError("No module named 'torch'", name="torch") from None


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    weights: int
    kv_cache: int
    scratch: int

    @property
    def total(self) -> int:
        return math.ceil((self.weights + self.kv_cache + self.scratch) * (1 + HEADROOM))


def estimate_memory(model: ModelConfig, engine: EngineConfig) -> MemoryEstimate:
    """Bytes an engine of ``model`` and ``engine`` takes once built (see the module docstring)."""
    b = _BYTES[engine.dtype]
    rope = 2 * model.max_position_embeddings * (model.head_dim // 2) * b
    weights = model.num_params * b + rope
    kv = 2 * model.num_layers * (engine.num_blocks + 1) * engine.block_size * model.kv_dim * b
    largest = max(
        model.vocab_size * model.hidden_size, 2 * model.intermediate_size * model.hidden_size
    )
    return MemoryEstimate(weights=weights, kv_cache=kv, scratch=4 * largest)


def _cgroup_room() -> int | None:
    root = Path("/sys/fs/cgroup")
    try:
        limit = (root / "memory.max").read_text().strip()
        used = int((root / "memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(0, int(limit) - used)


def _host_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found = int(line.split()[1]) * 1024
                break
        else:
            raise ValueError("no MemAvailable")
    except (OSError, ValueError, IndexError):
        found = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    room = _cgroup_room()
    return found if room is None else min(found, room)


def available_memory(device: str) -> tuple[int, str]:
    """(free bytes, where) for the configured device: free CUDA memory when the engine will run
    on a GPU, else the host's available memory (within the cgroup's limit)."""
    if device in ("cuda", "auto"):
        import torch

        if torch.cuda.is_available():
            free, _ = torch.cuda.mem_get_info()
            return int(free), f"free on {torch.cuda.get_device_name()}"
        if device == "cuda":
            raise EngineConfigError("--device cuda: no CUDA device is available")
    return _host_available(), "available host memory"


def check_fits_memory(
    model: ModelConfig,
    engine: EngineConfig,
    *,
    replicas: int = 1,
    available: Callable[[str], tuple[int, str]] | None = None,
) -> MemoryEstimate:
    """``EngineConfigError`` with the figures when ``replicas`` engines would not fit."""
    need = estimate_memory(model, engine)
    free, where = (available or available_memory)(engine.device)
    total = need.total * replicas
    if total > free:
        each = f" x {replicas} replicas" if replicas > 1 else ""
        raise EngineConfigError(
            f"the model needs about {total / _GIB:.1f} GiB{each} ({model.num_params / 1e9:.2f} B "
            f"params: weights {need.weights / _GIB:.1f} GiB in {engine.dtype}, KV cache "
            f"{need.kv_cache / _GIB:.1f} GiB for {engine.num_blocks} blocks, "
            f"+{HEADROOM:.0%} headroom) but only {free / _GIB:.1f} GiB is {where}; use a smaller "
            "--model-config, --dtype bfloat16 or fewer --num-blocks"
        )
    return need


def check_holds_request(model: ModelConfig, engine: EngineConfig, tokens: int, what: str) -> None:
    """``EngineConfigError`` when one request of ``tokens`` (prompt + output) exceeds the model's
    positions or the whole KV cache, so it could never run; ``what`` says which request."""
    limit = model.max_position_embeddings
    if tokens > limit:
        raise EngineConfigError(
            f"{what} needs {tokens} tokens, more than the model's {limit} positions"
        )
    blocks = math.ceil(tokens / engine.block_size)
    if blocks > engine.num_blocks:
        raise EngineConfigError(
            f"the KV cache holds {engine.num_slots} tokens (--num-blocks {engine.num_blocks} x "
            f"{engine.block_size}); {what} needs {tokens}, so it could never run: give "
            f"--num-blocks {blocks} or more"
        )
