"""The model arithmetic: a model's shape from its Hugging Face ``config.json``, and the bytes that
shape costs: parameters (all, those a decode step reads, those a token computes with), KV-cache
bytes per token, bytes per element of a dtype.

KV bytes per token are ``2 × layers × kv_heads × head_dim × bytes`` (the KV heads, not the
attention heads: grouped-query attention shrinks the cache by heads/kv_heads). Mixture-of-experts
models keep all experts in memory but a step reads only the experts its tokens routed to: with E
experts, k per token and uniform routing, a batch of B touches a fraction 1 - (1 - k/E)^B of them.
Used by the bandwidth bound (``fleetwatch probe bound``); pure, light (the standard library only).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ModelShape", "ModelShapeError", "dtype_bytes", "load_shape", "shape_from_hf"]


class ModelShapeError(ValueError):
    """A model config that cannot be read as a shape, named with where it was found. The command
    line prints it as one line and exits with status 2."""


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
                raise ModelShapeError(f"{where}: {key!r} must be a number, got {value!r}")
            return value
    if default is None:
        raise ModelShapeError(f"{where}: missing {keys[0]!r}")
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
            raise ModelShapeError(f"{where}: {label!r} must be > 0, got {value}")
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
    """Read a model's ``config.json`` (or its folder); raise ``ModelShapeError`` naming the file."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        data = json.loads(p.read_text())
    except OSError as exc:
        raise ModelShapeError(f"{p}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ModelShapeError(f"{p}: not JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict):
        raise ModelShapeError(f"{p}: expected a JSON object")
    return shape_from_hf(data, where=str(p), name=p.parent.name or "model")


def dtype_bytes(name: str) -> float:
    try:
        return _DTYPE_BYTES[name.lower()]
    except KeyError:
        raise ModelShapeError(
            f"unknown dtype {name!r}: known are {', '.join(_DTYPE_BYTES)}"
        ) from None
