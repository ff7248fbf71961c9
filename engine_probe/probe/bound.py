"""The bandwidth bound: what a model on a GPU can do at best, from its shape alone.

Decode at batch B reads every weight byte once per step (plus each sequence's KV cache) and does
about 2 FLOPs per active parameter per token, so its arithmetic intensity is about B FLOP/byte for
bf16 weights; below the ridge point (peak FLOP/s ÷ bandwidth) the step is memory-bound and
``step time >= (weight bytes + KV bytes read) / bandwidth``. KV bytes per token are
``2 × layers × kv_heads × head_dim × bytes`` (the KV heads, not the attention heads: grouped-query
attention shrinks the cache by heads/kv_heads). Mixture-of-experts models keep all experts in memory
but a step reads only the experts its tokens routed to: with E experts, k per token and uniform
routing, a batch of B touches a fraction 1 - (1 - k/E)^B of them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fleetwatch.engine_probe.probe.errors import ProbeError
from fleetwatch.engine_probe.probe.gpus import GPUSpec

__all__ = [
    "BoundPoint",
    "CapacityReport",
    "ModelShape",
    "bound_at",
    "capacity_report",
    "dtype_bytes",
    "load_shape",
    "shape_from_hf",
    "shape_from_model_config",
]

_DTYPE_BYTES = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "fp8": 1,
    "float8": 1,
    "int8": 1,
    "int4": 0.5,
}


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The numbers the bound needs. Parameter counts include embeddings."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    total_params: float
    expert_params: float = 0.0
    """Parameters inside routed experts (part of ``total_params``)."""
    num_experts: int = 0
    experts_per_token: int = 0

    def kv_bytes_per_token(self, kv_bytes: float) -> float:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * kv_bytes

    def params_read(self, batch: int) -> float:
        """Parameters a decode step at ``batch`` reads from memory (all, or the touched experts)."""
        if not self.num_experts:
            return self.total_params
        touched = 1.0 - (1.0 - self.experts_per_token / self.num_experts) ** batch
        return self.total_params - self.expert_params * (1.0 - touched)

    def params_active(self) -> float:
        """Parameters one token computes with (the FLOPs numerator, 2 per parameter)."""
        if not self.num_experts:
            return self.total_params
        return self.total_params - self.expert_params * (
            1.0 - self.experts_per_token / self.num_experts
        )


def _get(data: Mapping[str, Any], where: str, *keys: str, default: Any = None) -> Any:
    for key in keys:
        if key in data and data[key] is not None:
            value = data[key]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ProbeError(f"{where}: {key!r} must be a number, got {value!r}")
            return value
    if default is None:
        raise ProbeError(f"{where}: missing {keys[0]!r}")
    return default


def shape_from_hf(
    data: Mapping[str, Any], *, where: str = "config", name: str = "model"
) -> ModelShape:
    """Shape of a Llama/Mistral/Qwen/Mixtral-style ``config.json`` (dense or mixture-of-experts)."""
    h = int(_get(data, where, "hidden_size", "n_embd", "d_model"))
    layers = int(_get(data, where, "num_hidden_layers", "n_layer", "num_layers"))
    heads = int(_get(data, where, "num_attention_heads", "n_head"))
    kv = int(_get(data, where, "num_key_value_heads", default=heads))
    head_dim = int(_get(data, where, "head_dim", default=h // max(heads, 1)))
    vocab = int(_get(data, where, "vocab_size"))
    inter = int(_get(data, where, "intermediate_size", "n_inner", "ffn_dim", default=4 * h))
    experts = int(
        _get(data, where, "num_local_experts", "n_routed_experts", "num_experts", default=0)
    )
    per_tok = int(_get(data, where, "num_experts_per_tok", default=2 if experts else 0))
    moe_inter = int(_get(data, where, "moe_intermediate_size", default=inter))
    for label, value in (
        ("hidden_size", h),
        ("num_hidden_layers", layers),
        ("num_attention_heads", heads),
        ("num_key_value_heads", kv),
        ("vocab_size", vocab),
    ):
        if value <= 0:
            raise ProbeError(f"{where}: {label!r} must be > 0, got {value}")
    attn = h * heads * head_dim + 2 * h * kv * head_dim + heads * head_dim * h
    mlp = 3 * h * inter
    expert_params = 0.0
    if experts:
        shared = int(_get(data, where, "n_shared_experts", default=0))
        mlp = 3 * h * moe_inter * shared + h * experts
        expert_params = float(layers * experts * 3 * h * moe_inter)
    tied = bool(data.get("tie_word_embeddings", False))
    total = vocab * h * (1 if tied else 2) + layers * (attn + mlp + 2 * h) + h + expert_params
    return ModelShape(
        name=str(data.get("_name_or_path") or data.get("model_type") or name),
        num_layers=layers,
        hidden_size=h,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        total_params=float(total),
        expert_params=expert_params,
        num_experts=experts,
        experts_per_token=per_tok,
    )


def load_shape(path: str | Path) -> ModelShape:
    """Read a model's ``config.json`` (or its folder); raise ``ProbeError`` naming the file."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        data = json.loads(p.read_text())
    except OSError as exc:
        raise ProbeError(f"{p}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ProbeError(f"{p}: not JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict):
        raise ProbeError(f"{p}: expected a JSON object")
    return shape_from_hf(data, where=str(p), name=p.parent.name or "model")


def dtype_bytes(name: str) -> float:
    try:
        return _DTYPE_BYTES[name.lower()]
    except KeyError:
        raise ProbeError(f"unknown dtype {name!r}: known are {', '.join(_DTYPE_BYTES)}") from None


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
