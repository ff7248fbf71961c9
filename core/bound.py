"""The bandwidth bound: what a model on a GPU can do at best, from its shape alone.

Decode at batch B reads every weight byte once per step (plus each sequence's KV cache) and does
about 2 FLOPs per active parameter per token, so its arithmetic intensity is about B FLOP/byte for
bf16 weights; below the ridge point (peak FLOP/s ÷ bandwidth) the step is memory-bound and
``step time >= (weight bytes + KV bytes read) / bandwidth``. The bytes come from the model
arithmetic in ``fleetwatch.core.model`` (weights as shipped, the cache summed per layer at the
context, experts a batch touches). ``probe bound`` prints this report and ``fleet capacity``
plans replicas from it when no probe run is given. The split over GPUs (tensor, pipeline, expert,
data-parallel attention) is ``fleetwatch.core.split``'s: each GPU holds and reads its share of its
stage's weights and its part of the cache, all of it for a replicated KV head or MLA latent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from fleetwatch.core.model import ModelShape, ModelShapeError
from fleetwatch.core.split import Split, plan_split

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

    ``num_gpus`` GPUs are ``pipeline_parallel`` stages of ``data_parallel_attention`` replicas
    (1 and 1 by default), each splitting its layers ``tensor_parallel`` ways.
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
    pipeline_parallel: int = 1
    expert_parallel: int = 1
    """Groups of GPUs holding whole routed experts (1: every expert sliced over a stage)."""
    stage_layers: tuple[int, ...] = ()
    """Layers each pipeline stage holds."""
    weight_bytes_per_gpu: float = 0.0
    """Weight bytes on the GPU holding the most (its stage's share, its experts)."""
    split: str = ""
    """The split in words, e.g. ``tensor parallel 4 x pipeline 2 (layers 40/40)``."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_LEAVES_OUT = (
    "kernel launches and scheduling between steps",
    "bandwidth below the datasheet peak",
    "GPU-to-GPU traffic (all-reduce, expert all-to-all)",
)
_LEAVES_OUT_MOE = ("expert-load imbalance (routing assumed uniform)",)


def _plan(shape: ModelShape, gpus: int | None, tp: int | None, pp: int, dp: int, ep: int) -> Split:
    return plan_split(shape, gpus=gpus, tensor=tp, pipeline=pp, data_attention=dp, expert=ep)


def _held(part: ModelShape, split: Split, w: float | None) -> float:
    """Weight bytes the heaviest GPU of a stage holds: a tensor-parallel share of the dense
    weights (every attention replica holds them) and its share of the routed experts."""
    experts = part.expert_bytes(w) if part.num_experts else 0.0
    dense = part.weight_bytes(w) - experts
    return dense / split.tensor + experts * split.expert_share(part.num_experts)


def _read(part: ModelShape, split: Split, w: float | None, batch: int) -> float:
    """Weight bytes the heaviest GPU of a stage reads in a step at ``batch``: its dense share
    and its share of the experts the batch touched."""
    experts = part.expert_bytes(w) if part.num_experts else 0.0
    dense = part.weight_bytes(w) - experts
    touched = part.bytes_read(batch, w) - dense
    return dense / split.tensor + touched * split.expert_share(part.num_experts)


def _point(
    shape: ModelShape,
    split: Split,
    parts: Sequence[ModelShape],
    gpu: Accelerator,
    *,
    batch: int,
    context_tokens: int,
    weight_bytes_per_param: float | None,
    kv_bytes: float,
    price_per_gpu_hour: float | None,
    utilisation: float,
) -> BoundPoint:
    if batch < 1:
        raise ModelShapeError(f"batch must be >= 1, got {batch}")
    micro = math.ceil(batch / split.pipeline)
    seqs = math.ceil(micro / split.data_attention)
    worst: tuple[float, float, float, float] = (-1.0, 0.0, 0.0, 0.0)
    for part in parts:
        kv_seq = part.kv_bytes_per_sequence(context_tokens, kv_bytes, tensor_parallel=split.tensor)
        read = _read(part, split, weight_bytes_per_param, micro) + seqs * kv_seq
        attn = 4.0 * shape.num_heads * shape.head_dim * part.cached_tokens(context_tokens)
        flops = micro * (2.0 * part.params_active() + attn) / split.stage_gpus
        mem_t, comp_t = read / gpu.bandwidth_bps, flops / gpu.bf16_flops
        if max(mem_t, comp_t) > max(worst[0], worst[1]):
            worst = (mem_t, comp_t, flops, read)
    mem_t, comp_t, flops, read = worst
    # a sequence's token passes every stage in turn; the slowest stage paces the pipeline
    mem_t, comp_t = mem_t * split.pipeline, comp_t * split.pipeline
    step = max(mem_t, comp_t)
    tps = batch / step
    cost = None
    if price_per_gpu_hour is not None:
        if not 0 < utilisation <= 1:
            raise ModelShapeError(f"utilisation must be in (0, 1], got {utilisation}")
        cost = price_per_gpu_hour * split.gpus / (tps * utilisation * 3600.0) * 1e6
    return BoundPoint(
        batch=batch,
        context_tokens=context_tokens,
        step_time_s=step,
        memory_time_s=mem_t,
        compute_time_s=comp_t,
        tokens_per_s=tps,
        arithmetic_intensity=flops / read,
        bound_by="memory" if mem_t >= comp_t else "compute",
        cost_per_million_tokens=cost,
    )


def bound_at(
    shape: ModelShape,
    gpu: Accelerator,
    *,
    batch: int,
    context_tokens: int,
    weight_bytes_per_param: float | None = None,
    kv_bytes: float = 2.0,
    num_gpus: int | None = None,
    price_per_gpu_hour: float | None = None,
    utilisation: float = 1.0,
    data_parallel_attention: int = 1,
    tensor_parallel: int | None = None,
    pipeline_parallel: int = 1,
    expert_parallel: int = 1,
) -> BoundPoint:
    """Decode step lower bound at ``batch`` sequences of ``context_tokens`` each, on the split
    the degrees make (``fleetwatch.core.split``; ``num_gpus`` alone is one tensor-parallel
    group, as it always was): each GPU reads its share of its stage's weights and its part of
    every sequence's cache (all of a replicated KV head or MLA latent). Weights as shipped unless
    ``weight_bytes_per_param`` overrides them. With ``data_parallel_attention`` replicas, each
    holds and reads its own sequences, and the batch's experts are read across all the GPUs of a
    stage; with ``pipeline_parallel`` stages, ``pipeline`` micro-batches are in flight and a
    token takes ``pipeline`` times the slowest stage's step."""
    split = _plan(
        shape,
        num_gpus,
        tensor_parallel,
        pipeline_parallel,
        data_parallel_attention,
        expert_parallel,
    )
    return _point(
        shape,
        split,
        split.parts(shape),
        gpu,
        batch=batch,
        context_tokens=context_tokens,
        weight_bytes_per_param=weight_bytes_per_param,
        kv_bytes=kv_bytes,
        price_per_gpu_hour=price_per_gpu_hour,
        utilisation=utilisation,
    )


def _usage(
    shape: ModelShape, split: Split, w: float | None, context_tokens: int, kv_bytes: float
) -> list[tuple[float, float]]:
    """Per stage: weight bytes and one sequence's KV bytes on its heaviest GPU."""
    return [
        (
            _held(part, split, w),
            part.kv_bytes_per_sequence(context_tokens, kv_bytes, tensor_parallel=split.tensor),
        )
        for part in split.parts(shape)
    ]


def _gpus_needed(shape: ModelShape, split: Split, fits: Callable[[Split], bool]) -> Split | None:
    """The split with the fewest GPUs, at a larger tensor degree the heads allow (the other
    degrees kept), that holds the model."""
    for t in range(split.tensor + 1, shape.num_heads + 1):
        try:
            bigger = plan_split(
                shape,
                tensor=t,
                pipeline=split.pipeline,
                data_attention=split.data_attention,
                expert=split.expert,
            )
        except ModelShapeError:
            continue
        if fits(bigger):
            return bigger
    return None


def _shortfall(
    model: str,
    gpu: Accelerator,
    num_gpus: int,
    memory_fraction: float,
    weight_bytes: float,
    one_sequence: float,
    context_tokens: int,
    needed: Split | None,
) -> str:
    """One line: what does not fit where, by how much, and how many GPUs would hold it."""
    usable = gpu.memory_bytes * num_gpus * memory_fraction
    if needed is None:
        advice = "no tensor-parallel split of its heads holds it"
    elif needed.gpus == needed.tensor:
        advice = f"use --gpus {needed.gpus} or more"
    else:
        degrees = " ".join(
            f"--{flag} {n}"
            for flag, n in (
                ("tp", needed.tensor),
                ("pp", needed.pipeline),
                ("dp-attention", needed.data_attention),
                ("ep", needed.expert),
            )
            if flag == "tp" or n > 1
        )
        advice = f"use {degrees} ({needed.gpus} GPUs)"
    return (
        f"{model} does not fit on {num_gpus}x {gpu.name}: weights {weight_bytes / 1e9:.1f} GB + "
        f"KV {one_sequence / 1e9:.1f} GB for one {context_tokens}-token sequence > "
        f"{usable / 1e9:.1f} GB HBM ({memory_fraction:.0%} of {num_gpus}x "
        f"{gpu.memory_bytes / 1e9:.0f} GB); no throughput or cost to report: {advice}, "
        f"a smaller --dtype or --kv-dtype, or a shorter --context"
    )


def _kv_layout(shape: ModelShape, split: Split) -> tuple[str, int]:
    """What the cache holds and on how many GPUs each KV head (or the latent) is copied."""
    tp, dp = split.tensor, split.data_attention
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
        if shape.num_experts and split.expert == 1:
            text += f", experts split over all {tp * dp} GPUs"
    if shape.num_experts and split.expert > 1:
        most = math.ceil(shape.num_experts / split.expert)
        text += (
            f"; expert parallel {split.expert}: whole experts, at most {most} of "
            f"{shape.num_experts} a group"
        )
        if split.stage_gpus > split.expert:
            text += f", each sliced over {split.stage_gpus // split.expert} GPUs"
    if split.pipeline > 1:
        layers = "/".join(str(b - a) for a, b in split.stages)
        text += f"; pipeline {split.pipeline} stages of {layers} layers"
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
    num_gpus: int | None = None,
    price_per_gpu_hour: float | None = None,
    utilisation: float = 1.0,
    data_parallel_attention: int = 1,
    tensor_parallel: int | None = None,
    pipeline_parallel: int = 1,
    expert_parallel: int = 1,
) -> CapacityReport:
    """How many sequences fit, and the bound at each batch size up to that (plus at the most
    that fit). Weights as the checkpoint ships them unless ``weight_bytes_per_param`` overrides
    them. The GPUs are split as ``fleetwatch.core.split.plan_split`` checks it: ``num_gpus``
    alone is one tensor-parallel group (a degree that must divide the heads);
    ``data_parallel_attention`` replicas each hold their own sequences; ``pipeline_parallel``
    stages each hold their layers' weights and cache; ``expert_parallel`` groups hold whole
    experts. Every GPU must hold its part of the weights and of one sequence's cache in
    ``memory_fraction`` of its memory, else ``ModelShapeError`` names the shortfall: a model
    that cannot be served has no throughput or cost. A sequence's cache lives in every stage
    (each its layers'), so the stage with least room sets how many fit."""
    if not 0 < memory_fraction <= 1:
        raise ModelShapeError(f"memory fraction must be in (0, 1], got {memory_fraction}")
    if context_tokens < 1:
        raise ModelShapeError(f"context length must be >= 1 token, got {context_tokens}")
    split = _plan(
        shape,
        num_gpus,
        tensor_parallel,
        pipeline_parallel,
        data_parallel_attention,
        expert_parallel,
    )
    w = weight_bytes_per_param
    weight_bytes = shape.weight_bytes(w)
    per_gpu_usable = gpu.memory_bytes * memory_fraction

    def fits(sp: Split) -> bool:
        return all(
            held + kv <= per_gpu_usable
            for held, kv in _usage(shape, sp, w, context_tokens, kv_bytes)
        )

    usage = _usage(shape, split, w, context_tokens, kv_bytes)
    if not fits(split):
        raise ModelShapeError(
            _shortfall(
                shape.name,
                gpu,
                split.gpus,
                memory_fraction,
                sum(held for held, _ in usage) * split.stage_gpus,
                sum(kv for _, kv in usage) * split.tensor,
                context_tokens,
                _gpus_needed(shape, split, fits),
            )
        )
    room = [math.floor((per_gpu_usable - held) / kv) for held, kv in usage if kv > 0]
    if not room:
        raise ModelShapeError(f"{shape.name}: no layer keeps a KV cache to size")
    fit = split.data_attention * min(room)
    budget = sum(per_gpu_usable - held for held, _ in usage) * split.stage_gpus
    parts = split.parts(shape)
    sizes = sorted({b for b in batches if 1 <= b <= fit} | {fit})
    points = tuple(
        _point(
            shape,
            split,
            parts,
            gpu,
            batch=b,
            context_tokens=context_tokens,
            weight_bytes_per_param=w,
            kv_bytes=kv_bytes,
            price_per_gpu_hour=price_per_gpu_hour,
            utilisation=utilisation,
        )
        for b in sizes
    )
    layout, replicas = _kv_layout(shape, split)
    return CapacityReport(
        model=shape.name,
        gpu=gpu.name,
        num_gpus=split.gpus,
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
        weights_as_shipped=w is None,
        tensor_parallel=split.tensor,
        data_parallel_attention=split.data_attention,
        kv_layout=layout,
        kv_bytes_per_token_per_gpu=max(kv for _, kv in usage) / context_tokens,
        kv_replicas=replicas,
        sliding_saving=shape.sliding_saving(context_tokens),
        mtp_params=shape.mtp_params,
        leaves_out=(
            _LEAVES_OUT[:2]
            + _LEAVES_OUT[2:] * (split.gpus > 1)
            + _LEAVES_OUT_MOE * bool(shape.num_experts)
        ),
        pipeline_parallel=split.pipeline,
        expert_parallel=split.expert,
        stage_layers=tuple(b - a for a, b in split.stages),
        weight_bytes_per_gpu=max(held for held, _ in usage),
        split=split.describe(),
    )
