"""The bandwidth bound: what a model on a GPU can do at best, from its shape alone.

Decode at batch B reads every weight byte once per step (plus each sequence's KV cache) and does
about 2 FLOPs per active parameter per token, so its arithmetic intensity is about B FLOP/byte for
bf16 weights; below the ridge point (peak FLOP/s ÷ bandwidth) the step is memory-bound and
``step time >= (weight bytes + KV bytes read) / bandwidth``. The bytes come from the model
arithmetic in ``fleetwatch.core.model`` (weights, KV bytes per token, experts a batch touches).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from fleetwatch.core.model import ModelShape
from fleetwatch.engine_probe.probe.errors import ProbeError
from fleetwatch.engine_probe.probe.gpus import GPUSpec

__all__ = [
    "BoundPoint",
    "CapacityReport",
    "bound_at",
    "capacity_report",
    "shape_from_model_config",
]


@dataclass(frozen=True, slots=True)
class BoundPoint:
    """The bound at one batch size. Seconds, bytes, tokens/s, US dollars."""

    batch: int
    context_tokens: int
    step_time_s: float
    memory_time_s: float
    compute_time_s: float
    tokens_per_s: float
    arithmetic_intensity: float
    """FLOPs per byte read in the step."""
    bound_by: str
    """``memory`` or ``compute``."""
    cost_per_million_tokens: float | None


@dataclass(frozen=True, slots=True)
class CapacityReport:
    """Memory arithmetic and the bound over a set of batch sizes."""

    model: str
    gpu: str
    num_gpus: int
    total_params: float
    weight_bytes: float
    kv_bytes_per_token: float
    kv_budget_bytes: float
    max_concurrent_sequences: int
    context_tokens: int
    memory_fraction: float
    ridge_flops_per_byte: float
    points: tuple[BoundPoint, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def bound_at(
    shape: ModelShape,
    gpu: GPUSpec,
    *,
    batch: int,
    context_tokens: int,
    weight_bytes_per_param: float = 2.0,
    kv_bytes: float = 2.0,
    num_gpus: int = 1,
    price_per_gpu_hour: float | None = None,
    utilisation: float = 1.0,
) -> BoundPoint:
    """Decode step lower bound at ``batch`` sequences of ``context_tokens`` each (ideal tensor parallel)."""
    if batch < 1:
        raise ProbeError(f"batch must be >= 1, got {batch}")
    bw = gpu.bandwidth_bps * num_gpus
    peak = gpu.bf16_flops * num_gpus
    bytes_read = shape.params_read(
        batch
    ) * weight_bytes_per_param + batch * context_tokens * shape.kv_bytes_per_token(kv_bytes)
    attn_flops = 4.0 * shape.num_layers * shape.num_heads * shape.head_dim * context_tokens
    flops = batch * (2.0 * shape.params_active() + attn_flops)
    mem_t = bytes_read / bw
    comp_t = flops / peak
    step = max(mem_t, comp_t)
    tps = batch / step
    cost = None
    if price_per_gpu_hour is not None:
        if not 0 < utilisation <= 1:
            raise ProbeError(f"utilisation must be in (0, 1], got {utilisation}")
        cost = price_per_gpu_hour * num_gpus / (tps * utilisation * 3600.0) * 1e6
    return BoundPoint(
        batch=batch,
        context_tokens=context_tokens,
        step_time_s=step,
        memory_time_s=mem_t,
        compute_time_s=comp_t,
        tokens_per_s=tps,
        arithmetic_intensity=flops / bytes_read,
        bound_by="memory" if mem_t >= comp_t else "compute",
        cost_per_million_tokens=cost,
    )


def _shortfall(
    model: str,
    gpu: GPUSpec,
    num_gpus: int,
    memory_fraction: float,
    weight_bytes: float,
    one_sequence: float,
    context_tokens: int,
) -> str:
    """One line: what does not fit where, by how much, and how many GPUs would hold it."""
    usable = gpu.memory_bytes * num_gpus * memory_fraction
    needed = math.ceil((weight_bytes + one_sequence) / (gpu.memory_bytes * memory_fraction))
    return (
        f"{model} does not fit on {num_gpus}x {gpu.name}: weights {weight_bytes / 1e9:.1f} GB + "
        f"KV {one_sequence / 1e9:.1f} GB for one {context_tokens}-token sequence > "
        f"{usable / 1e9:.1f} GB HBM ({memory_fraction:.0%} of {num_gpus}x "
        f"{gpu.memory_bytes / 1e9:.0f} GB); no throughput or cost to report: use --gpus "
        f"{needed} or more, a smaller --dtype or --kv-dtype, or a shorter --context"
    )


def capacity_report(
    shape: ModelShape,
    gpu: GPUSpec,
    *,
    context_tokens: int = 4096,
    memory_fraction: float = 0.9,
    batches: Sequence[int] = (1, 8, 32, 64, 128, 256),
    weight_bytes_per_param: float = 2.0,
    kv_bytes: float = 2.0,
    num_gpus: int = 1,
    price_per_gpu_hour: float | None = None,
    utilisation: float = 1.0,
) -> CapacityReport:
    """How many sequences fit, and the bound at each batch size up to that (plus at the most
    that fit). ``ProbeError`` naming the shortfall when the weights and one sequence's KV cache
    do not fit in ``memory_fraction`` of the GPUs' memory: a model that cannot be served has no
    throughput or cost."""
    if not 0 < memory_fraction <= 1:
        raise ProbeError(f"memory fraction must be in (0, 1], got {memory_fraction}")
    if context_tokens < 1:
        raise ProbeError(f"context length must be >= 1 token, got {context_tokens}")
    if num_gpus < 1:
        raise ProbeError(f"number of GPUs must be >= 1, got {num_gpus}")
    weight_bytes = shape.total_params * weight_bytes_per_param
    kv_tok = shape.kv_bytes_per_token(kv_bytes)
    usable = gpu.memory_bytes * num_gpus * memory_fraction
    one_sequence = kv_tok * context_tokens
    if weight_bytes + one_sequence > usable:
        raise ProbeError(
            _shortfall(
                shape.name,
                gpu,
                num_gpus,
                memory_fraction,
                weight_bytes,
                one_sequence,
                context_tokens,
            )
        )
    budget = usable - weight_bytes
    fit = math.floor(budget / one_sequence)
    sizes = sorted({b for b in batches if 1 <= b <= fit} | {fit})
    points = tuple(
        bound_at(
            shape,
            gpu,
            batch=b,
            context_tokens=context_tokens,
            weight_bytes_per_param=weight_bytes_per_param,
            kv_bytes=kv_bytes,
            num_gpus=num_gpus,
            price_per_gpu_hour=price_per_gpu_hour,
            utilisation=utilisation,
        )
        for b in sizes
    )
    return CapacityReport(
        model=shape.name,
        gpu=gpu.name,
        num_gpus=num_gpus,
        total_params=shape.total_params,
        weight_bytes=weight_bytes,
        kv_bytes_per_token=kv_tok,
        kv_budget_bytes=budget,
        max_concurrent_sequences=fit,
        context_tokens=context_tokens,
        memory_fraction=memory_fraction,
        ridge_flops_per_byte=gpu.ridge_flops_per_byte,
        points=points,
    )


def shape_from_model_config(mc: Any) -> ModelShape:
    """Shape of the reference engine's ``ModelConfig`` (duck-typed: no engine import here)."""
    return ModelShape(
        name=str(getattr(mc, "name", "reference")),
        num_layers=int(mc.num_layers),
        hidden_size=int(mc.hidden_size),
        num_heads=int(mc.num_heads),
        num_kv_heads=int(mc.num_kv_heads),
        head_dim=int(mc.head_dim),
        total_params=float(mc.num_params),
    )
