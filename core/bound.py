"""The bandwidth bound: what a model on a GPU can do at best, from its shape alone.

Decode at batch B reads every weight byte once per step (plus each sequence's KV cache) and does
about 2 FLOPs per active parameter per token, so its arithmetic intensity is about B FLOP/byte for
bf16 weights; below the ridge point (peak FLOP/s ÷ bandwidth) the step is memory-bound and
``step time >= (weight bytes + KV bytes read) / bandwidth``. The bytes come from the model
arithmetic in ``fleetwatch.core.model`` (weights as shipped, the cache summed per layer at the
context, experts a batch touches). ``probe bound`` prints this report and ``fleet capacity``
plans replicas from it when no probe run is given. Tensor parallelism splits heads, so its degree must divide
them; each GPU reads its share of the weights and its part of the cache, all of it for a
replicated KV head or MLA latent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from fleetwatch.core.model import ModelShape, ModelShapeError

__all__ = ["Accelerator", "BoundPoint", "CapacityReport", "bound_at", "capacity_report"]


class Accelerator(Protocol):
    """What the bound reads of a GPU (``fleetwatch.telemetry.gpu.specs.Accelerator`` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def memory_bytes(self) -> float: ...
    @property
    def bandwidth_bps(self) -> float: ...
    @property
    def bf16_flops(self) -> float: ...
    @property
    def ridge_flops_per_byte(self) -> float: ...


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
    """Memory arithmetic and the bound over a set of batch sizes. Bytes, parameters, tokens.

    ``num_gpus`` GPUs are ``data_parallel_attention`` replicas (1 by default), each splitting the
    model ``tensor_parallel`` ways.
    ``kv_bytes_per_token`` is the cache per token of a sequence at ``context_tokens`` on one GPU
    holding it all; ``kv_bytes_per_token_per_gpu`` what each GPU holds of it, more than its share
    when KV heads (or an MLA latent) are replicated across the GPUs."""

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
    active_params: float = 0.0
    """Parameters one token computes with (routed experts it chose; not the embedding lookup)."""
    weight_format: str = "bfloat16"
    """How the weights are sized: the checkpoint's format, or the ``--dtype`` override."""
    weights_as_shipped: bool = True
    tensor_parallel: int = 1
    data_parallel_attention: int = 1
    """Attention replicas, each with its own sequences (routed experts over all the GPUs)."""
    kv_layout: str = ""
    kv_bytes_per_token_per_gpu: float = 0.0
    kv_replicas: int = 1
    """GPUs holding a copy of each KV head (or of the MLA latent): 1 is no replication."""
    sliding_saving: float = 0.0
    """Share of the cache sliding-window and chunked layers save at ``context_tokens`` (0..1)."""
    mtp_params: float = 0.0
    """Multi-token-prediction layers, not counted: loaded only for speculative decoding."""
    leaves_out: tuple[str, ...] = ()
    """What the bound does not count, so a measured step is slower than it says."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_LEAVES_OUT = (
    "kernel launches and scheduling between steps",
    "bandwidth below the datasheet peak",
    "GPU-to-GPU traffic (all-reduce, expert all-to-all)",
)
_LEAVES_OUT_MOE = ("expert-load imbalance (routing assumed uniform)",)


def _split(shape: ModelShape, num_gpus: int, dp: int = 1) -> int:
    """The tensor-parallel degree of ``num_gpus`` in ``dp`` attention replicas, checked against
    the heads."""
    if num_gpus < 1:
        raise ModelShapeError(f"number of GPUs must be >= 1, got {num_gpus}")
    if dp < 1 or num_gpus % dp:
        raise ModelShapeError(
            f"data-parallel attention degree {dp} must divide the {num_gpus} GPUs "
            f"(each replica is tensor parallel over the GPUs / the degree)"
        )
    shape.check_tensor_parallel(num_gpus // dp)
    return num_gpus // dp


def _weights_per_gpu(
    shape: ModelShape, w: float | None, gpus: int, dp: int, held: float | None = None
) -> float:
    """Weight bytes each GPU holds (or, given ``held``, reads of those bytes): a tensor-parallel
    share; with data-parallel attention every replica holds the dense weights and the routed
    experts are split over all the GPUs (expert parallel)."""
    total = shape.weight_bytes(w) if held is None else held
    if dp == 1:
        return total / gpus
    dense = shape.weight_bytes(w) - shape.expert_bytes(w)
    return dense / (gpus // dp) + (total - dense) / gpus


def bound_at(
    shape: ModelShape,
    gpu: Accelerator,
    *,
    batch: int,
    context_tokens: int,
    weight_bytes_per_param: float | None = None,
    kv_bytes: float = 2.0,
    num_gpus: int = 1,
    price_per_gpu_hour: float | None = None,
    utilisation: float = 1.0,
    data_parallel_attention: int = 1,
) -> BoundPoint:
    """Decode step lower bound at ``batch`` sequences of ``context_tokens`` each, tensor parallel
    over ``num_gpus``: each GPU reads its share of the weights and its part of every sequence's
    cache (all of a replicated KV head or MLA latent). Weights as shipped unless
    ``weight_bytes_per_param`` overrides them. With ``data_parallel_attention`` replicas, each
    holds and reads its own sequences, and the batch's experts are read across all the GPUs."""
    if batch < 1:
        raise ModelShapeError(f"batch must be >= 1, got {batch}")
    dp = data_parallel_attention
    tp = _split(shape, num_gpus, dp)
    kv_seq = shape.kv_bytes_per_sequence(context_tokens, kv_bytes, tensor_parallel=tp)
    read = shape.bytes_read(batch, weight_bytes_per_param)
    bytes_read = (
        _weights_per_gpu(shape, weight_bytes_per_param, num_gpus, dp, read)
        + math.ceil(batch / dp) * kv_seq
    )
    attn_flops = 4.0 * shape.num_heads * shape.head_dim * shape.cached_tokens(context_tokens)
    flops = batch * (2.0 * shape.params_active() + attn_flops) / num_gpus
    mem_t = bytes_read / gpu.bandwidth_bps
    comp_t = flops / gpu.bf16_flops
    step = max(mem_t, comp_t)
    tps = batch / step
    cost = None
    if price_per_gpu_hour is not None:
        if not 0 < utilisation <= 1:
            raise ModelShapeError(f"utilisation must be in (0, 1], got {utilisation}")
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


def _gpus_needed(shape: ModelShape, fits: Callable[[int], bool], start: int, dp: int) -> int | None:
    """The fewest GPUs above ``start`` an engine can split the model over that hold it."""
    for n in range(start + dp, dp * shape.num_heads + 1, dp):
        try:
            shape.check_tensor_parallel(n // dp)
        except ModelShapeError:
            continue
        if fits(n):
            return n
    return None


def _shortfall(
    model: str,
    gpu: Accelerator,
    num_gpus: int,
    memory_fraction: float,
    weight_bytes: float,
    one_sequence: float,
    context_tokens: int,
    needed: int | None,
) -> str:
    """One line: what does not fit where, by how much, and how many GPUs would hold it."""
    usable = gpu.memory_bytes * num_gpus * memory_fraction
    advice = (
        f"use --gpus {needed} or more"
        if needed is not None
        else "no tensor-parallel split of its heads holds it"
    )
    return (
        f"{model} does not fit on {num_gpus}x {gpu.name}: weights {weight_bytes / 1e9:.1f} GB + "
        f"KV {one_sequence / 1e9:.1f} GB for one {context_tokens}-token sequence > "
        f"{usable / 1e9:.1f} GB HBM ({memory_fraction:.0%} of {num_gpus}x "
        f"{gpu.memory_bytes / 1e9:.0f} GB); no throughput or cost to report: {advice}, "
        f"a smaller --dtype or --kv-dtype, or a shorter --context"
    )


def _kv_layout(shape: ModelShape, tp: int, dp: int) -> tuple[str, int]:
    """What the cache holds and on how many GPUs each KV head (or the latent) is copied."""
    if shape.kv_latent_dim:
        where = "every GPU" if dp == 1 else f"the {tp} GPU(s) of its replica"
        text, replicas = f"MLA latent of {shape.kv_latent_dim} per layer, on {where}", tp
    else:
        kind = "MHA" if shape.num_kv_heads == shape.num_heads else "GQA"
        if shape.num_kv_heads == 1:
            kind = "MQA"
        replicas = max(1, tp // shape.num_kv_heads)
        text = f"{kind} {shape.num_kv_heads} KV heads x {shape.head_dim}"
        if replicas > 1:
            text += f", each replicated on {replicas} GPUs"
    if dp > 1:
        text += f"; {dp} attention replicas, each with its own sequences"
        if shape.num_experts:
            text += f", experts split over all {tp * dp} GPUs"
    return text, replicas


def capacity_report(
    shape: ModelShape,
    gpu: Accelerator,
    *,
    context_tokens: int = 4096,
    memory_fraction: float = 0.9,
    batches: Sequence[int] = (1, 8, 32, 64, 128, 256),
    weight_bytes_per_param: float | None = None,
    kv_bytes: float = 2.0,
    num_gpus: int = 1,
    price_per_gpu_hour: float | None = None,
    utilisation: float = 1.0,
    data_parallel_attention: int = 1,
) -> CapacityReport:
    """How many sequences fit, and the bound at each batch size up to that (plus at the most
    that fit). Weights as the checkpoint ships them unless ``weight_bytes_per_param`` overrides
    them; ``num_gpus`` split the model tensor-parallel, a degree that must divide the heads.
    ``ModelShapeError`` naming the shortfall when the weights and one sequence's KV cache do not fit
    in ``memory_fraction`` of the GPUs' memory: a model that cannot be served has no throughput
    or cost. ``data_parallel_attention`` replicas (dividing ``num_gpus``) each hold their own
    sequences, tensor parallel over ``num_gpus / data_parallel_attention``."""
    if not 0 < memory_fraction <= 1:
        raise ModelShapeError(f"memory fraction must be in (0, 1], got {memory_fraction}")
    if context_tokens < 1:
        raise ModelShapeError(f"context length must be >= 1 token, got {context_tokens}")
    dp = data_parallel_attention
    tp = _split(shape, num_gpus, dp)
    weight_bytes = shape.weight_bytes(weight_bytes_per_param)
    per_gpu_usable = gpu.memory_bytes * memory_fraction

    def kv_gpu(n: int) -> float:
        return shape.kv_bytes_per_sequence(context_tokens, kv_bytes, tensor_parallel=n // dp)

    def held(n: int) -> float:
        return _weights_per_gpu(shape, weight_bytes_per_param, n, dp)

    def fits(n: int) -> bool:
        return held(n) + kv_gpu(n) <= per_gpu_usable

    one_gpu = kv_gpu(num_gpus)
    if not fits(num_gpus):
        raise ModelShapeError(
            _shortfall(
                shape.name,
                gpu,
                num_gpus,
                memory_fraction,
                weight_bytes if dp == 1 else held(num_gpus) * num_gpus,
                one_gpu * tp,
                context_tokens,
                _gpus_needed(shape, fits, num_gpus, dp),
            )
        )
    if dp == 1:
        budget = gpu.memory_bytes * num_gpus * memory_fraction - weight_bytes
        fit = math.floor(budget / (one_gpu * tp))
    else:
        budget = (per_gpu_usable - held(num_gpus)) * num_gpus
        fit = dp * math.floor((per_gpu_usable - held(num_gpus)) / one_gpu)
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
            data_parallel_attention=dp,
        )
        for b in sizes
    )
    layout, replicas = _kv_layout(shape, tp, dp)
    return CapacityReport(
        model=shape.name,
        gpu=gpu.name,
        num_gpus=num_gpus,
        total_params=shape.total_params,
        weight_bytes=weight_bytes,
        kv_bytes_per_token=shape.kv_bytes_per_token(kv_bytes, context_tokens),
        kv_budget_bytes=budget,
        max_concurrent_sequences=fit,
        context_tokens=context_tokens,
        memory_fraction=memory_fraction,
        ridge_flops_per_byte=gpu.ridge_flops_per_byte,
        points=points,
        active_params=shape.params_active(),
        weight_format=shape.weight_format.describe(),
        weights_as_shipped=weight_bytes_per_param is None,
        tensor_parallel=tp,
        data_parallel_attention=dp,
        kv_layout=layout,
        kv_bytes_per_token_per_gpu=one_gpu / context_tokens,
        kv_replicas=replicas,
        sliding_saving=shape.sliding_saving(context_tokens),
        mtp_params=shape.mtp_params,
        leaves_out=(
            _LEAVES_OUT[:2]
            + _LEAVES_OUT[2:] * (num_gpus > 1)
            + _LEAVES_OUT_MOE * bool(shape.num_experts)
        ),
    )
