"""The model arithmetic: a model's shape from its Hugging Face ``config.json``, and the bytes that
shape costs: parameters (all, those a decode step reads, those a token computes with), weight bytes
as the checkpoint ships them, KV-cache bytes per sequence, bytes per element of a dtype.

Attention layouts. Multi-head, grouped- and multi-query attention cache ``2 × kv_heads × head_dim``
elements per token per layer (the KV heads, not the attention heads). Multi-head latent attention
(DeepSeek's MLA, ``kv_lora_rank``) caches one latent of ``kv_lora_rank + qk_rope_head_dim``
elements per token per layer, with no head axis, as vLLM stores it. Per-layer types
(``layer_types``): a sliding-window layer caches at most ``sliding_window`` tokens, so a sequence's
cache is summed per layer at its context.

Weights as shipped. ``quantization_config`` sets the bytes of the modules it converts: fp8 (one
byte, plus a float32 scale per ``weight_block_size`` block), MXFP4 (the routed experts: four bits,
plus one shared 8-bit scale per 32 elements), AWQ/GPTQ (``bits`` per weight, a 16-bit scale and a
packed zero per ``group_size`` group), compressed-tensors' ``config_groups`` with their
``ignore`` list (``fleetwatch.core.compressed``); ``modules_to_not_convert`` keeps its modules at
the base dtype. Embeddings, routers and norms are never converted, except as a
compressed-tensors scheme targets them.

Mixture-of-experts models keep all experts in memory but a step reads only the experts its tokens
routed to: with E experts, k per token and uniform routing, a batch of B touches a fraction
1 - (1 - k/E)^B of them. Used by the bandwidth bound (``fleetwatch probe bound``); pure, light (the
standard library only).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from fleetwatch.core.compressed import (
    CompressedTensors,
    QuantConfigError,
    Scheme,
    read_compressed_tensors,
)

__all__ = [
    "ModelShape",
    "ModelShapeError",
    "WeightFormat",
    "Weights",
    "dtype_bytes",
    "load_shape",
    "shape_from_hf",
]


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

_MODULE_CLASS = {
    "embed": "Embedding",
    "lm_head": "Linear",
    "attn": "Linear",
    "router": "Linear",
    "mlp": "Linear",
    "shared_expert": "Linear",
    "expert": "Linear",
}
"""The module class compressed-tensors targets by (``Linear``) for each kind of weight."""

_CONVERTIBLE = {
    "fp8": frozenset({"attn", "mlp", "shared_expert", "expert"}),
    "mxfp4": frozenset({"expert"}),
    "awq": frozenset({"attn", "mlp", "shared_expert", "expert"}),
    "gptq": frozenset({"attn", "mlp", "shared_expert", "expert"}),
}


@dataclass(frozen=True, slots=True)
class Weights:
    """One weight matrix of the checkpoint (``rows × cols``; a norm or bias is one row), held
    ``count`` times (a layer's routed experts). ``kind`` is ``embed``, ``lm_head``, ``attn``,
    ``router``, ``mlp``, ``shared_expert``, ``expert`` or ``norm``; ``module`` its name in the
    checkpoint, which ``modules_to_not_convert`` patterns match."""

    module: str
    kind: str
    rows: int
    cols: int
    count: int = 1

    @property
    def params(self) -> int:
        return self.rows * self.cols * self.count


def _layer_of(module: str) -> int | None:
    """The decoder layer a module belongs to (``model.layers.<i>.…``), or ``None``."""
    parts = module.split(".")
    if len(parts) > 2 and parts[0] == "model" and parts[1] == "layers" and parts[2].isdigit():
        return int(parts[2])
    return None


def _not_converted(module: str, patterns: Sequence[str]) -> bool:
    """A module a ``modules_to_not_convert`` pattern names: itself, a parent, or a name suffix."""
    return any(
        fnmatchcase(module, p)
        or fnmatchcase(module, p + ".*")
        or fnmatchcase(module, "*." + p)
        or fnmatchcase(module, "*." + p + ".*")
        for p in patterns
    )


@dataclass(frozen=True, slots=True)
class WeightFormat:
    """How a checkpoint stores its weights: the base dtype and the quantization its
    ``quantization_config`` applies (``method`` ``none``, ``fp8``, ``mxfp4``, ``awq``, ``gptq``)."""

    base_dtype: str = "bfloat16"
    method: str = "none"
    block: tuple[int, int] | None = None
    """fp8: the ``weight_block_size`` a float32 scale covers (``None``: one scale per matrix)."""
    bits: int = 0
    group_size: int = 0
    skip: tuple[str, ...] = ()
    """``modules_to_not_convert``: patterns of modules kept at the base dtype."""
    unsupported: str = ""
    """Why this format cannot be sized (a method not modelled): raised when bytes are asked."""
    compressed: CompressedTensors | None = None
    """compressed-tensors: the schemes of its ``config_groups`` and its ``ignore`` list."""

    @property
    def base_bytes(self) -> float:
        return _DTYPE_BYTES[self.base_dtype]

    def _scheme(self, w: Weights) -> Scheme | None:
        if self.compressed is None or w.rows <= 1:
            return None
        # the checkpoint names each routed expert (``experts.<j>.``): match as expert 0
        name = w.module.replace(".experts.", ".experts.0.") if w.kind == "expert" else w.module
        return self.compressed.scheme_for(name, _MODULE_CLASS.get(w.kind, ""))

    def converts(self, w: Weights) -> bool:
        if self.compressed is not None:
            return self._scheme(w) is not None
        kinds = _CONVERTIBLE.get(self.method, frozenset())
        return w.kind in kinds and w.rows > 1 and not _not_converted(w.module, self.skip)

    def bytes_of(self, w: Weights) -> float:
        """Bytes of ``w`` in this format, scales included."""
        if self.unsupported:
            raise ModelShapeError(self.unsupported)
        if self.compressed is not None:
            scheme = self._scheme(w)
            if scheme is None:
                return w.params * self.base_bytes
            return w.count * scheme.bytes_of(w.rows, w.cols)
        if not self.converts(w):
            return w.params * self.base_bytes
        if self.method == "fp8":
            if self.block is None:
                scales = 1
            else:
                scales = math.ceil(w.rows / self.block[0]) * math.ceil(w.cols / self.block[1])
            return w.count * (w.rows * w.cols + 4 * scales)
        if self.method == "mxfp4":
            return w.count * w.rows * (w.cols / 2 + math.ceil(w.cols / 32))
        groups = w.rows * math.ceil(w.cols / self.group_size)
        return w.count * (w.rows * w.cols * self.bits / 8 + groups * (2 + self.bits / 8))

    def describe(self) -> str:
        """One phrase for the report, e.g. ``fp8 with 128x128 block scales (bfloat16 rest)``."""
        if self.method == "none":
            return self.base_dtype
        if self.unsupported:
            return f"{self.method} (not modelled)"
        if self.method == "fp8":
            scales = (
                f"{self.block[0]}x{self.block[1]} block scales" if self.block else "tensor scales"
            )
            what = f"fp8 with {scales}"
        elif self.method == "mxfp4":
            what = "MXFP4 experts (4 bit, 8-bit scale per 32)"
        elif self.compressed is not None:
            what = f"compressed-tensors {self.compressed.describe()}"
        else:
            what = f"{self.method} int{self.bits}, groups of {self.group_size}"
        return f"{what} ({self.base_dtype} rest)"


@dataclass(frozen=True, slots=True)
class ModelShape:
    """The numbers the bound needs. Parameter counts include embeddings.

    ``layer_kv_limit`` holds, per layer, the most tokens its cache keeps (``None``: every token,
    0: no cache); empty means every layer keeps every token. ``kv_latent_dim`` > 0 is an MLA
    latent cache of that many elements per token per layer, instead of heads."""

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
    embed_params: float = 0.0
    """The input embedding table (a lookup, no FLOPs) when it is not tied to the output head."""
    mtp_params: float = 0.0
    """Multi-token-prediction layers (``num_nextn_predict_layers``), not in ``total_params``:
    engines load them only for speculative decoding."""
    kv_latent_dim: int = 0
    layer_kv_limit: tuple[int | None, ...] = ()
    weights: tuple[Weights, ...] = field(default=(), repr=False)
    weight_format: WeightFormat = WeightFormat()

    def _limits(self) -> tuple[int | None, ...]:
        return self.layer_kv_limit or (None,) * self.num_layers

    def _kv_elements(self, kv_heads: int) -> int:
        """Elements one token costs in one layer's cache."""
        if self.kv_latent_dim:
            return self.kv_latent_dim
        return 2 * kv_heads * self.head_dim

    def kv_heads_per_gpu(self, tp: int) -> int:
        """KV heads each of ``tp`` tensor-parallel GPUs holds: KV heads fewer than ``tp`` are
        replicated, one per GPU (an MLA latent has no head axis: every GPU holds all of it)."""
        return max(1, self.num_kv_heads // tp)

    def cached_tokens(self, context_tokens: int) -> int:
        """Tokens the layers of one sequence at ``context_tokens`` cache (and attend to), summed."""
        return sum(
            context_tokens if lim is None else min(context_tokens, lim) for lim in self._limits()
        )

    def kv_bytes_per_sequence(
        self, context_tokens: int, kv_bytes: float, *, tensor_parallel: int = 1
    ) -> float:
        """KV-cache bytes one sequence of ``context_tokens`` holds on each of ``tensor_parallel``
        GPUs, summed over layers (a sliding layer keeps at most its window)."""
        per_layer = self._kv_elements(self.kv_heads_per_gpu(tensor_parallel))
        return float(per_layer) * self.cached_tokens(context_tokens) * kv_bytes

    def kv_bytes_per_token(self, kv_bytes: float, context_tokens: int | None = None) -> float:
        """KV bytes per token of a sequence at ``context_tokens`` (one GPU holding it all); without
        a context, the bytes each further token adds at long context (growing layers only)."""
        if context_tokens is not None:
            return self.kv_bytes_per_sequence(context_tokens, kv_bytes) / context_tokens
        growing = sum(1 for lim in self._limits() if lim is None)
        return float(self._kv_elements(self.num_kv_heads) * growing * kv_bytes)

    def sliding_saving(self, context_tokens: int) -> float:
        """Share of the cache the windowed layers save at ``context_tokens`` (0..1)."""
        full = self._kv_elements(self.num_kv_heads) * self.num_layers * context_tokens
        kept = self.kv_bytes_per_sequence(context_tokens, 1.0)
        cached = sum(1 for lim in self._limits() if lim != 0)
        return 1.0 - kept / (full * cached / self.num_layers) if cached else 0.0

    def weight_bytes(self, bytes_per_param: float | None = None) -> float:
        """Bytes of all weights: as the checkpoint ships them (scales included), or every
        parameter at ``bytes_per_param`` (an override, as ``--dtype`` gives)."""
        if bytes_per_param is not None:
            return self.total_params * bytes_per_param
        if not self.weights:
            return self.total_params * self.weight_format.base_bytes
        return float(sum(self.weight_format.bytes_of(w) for w in self.weights))

    def expert_bytes(self, bytes_per_param: float | None = None) -> float:
        if bytes_per_param is not None or not self.weights:
            per = self.weight_format.base_bytes if bytes_per_param is None else bytes_per_param
            return self.expert_params * per
        return sum(self.weight_format.bytes_of(w) for w in self.weights if w.kind == "expert")

    def _touched(self, batch: int) -> float:
        return 1.0 - (1.0 - self.experts_per_token / self.num_experts) ** batch

    def bytes_read(self, batch: int, bytes_per_param: float | None = None) -> float:
        """Weight bytes a decode step at ``batch`` reads (all, less the experts no token chose)."""
        total = self.weight_bytes(bytes_per_param)
        if not self.num_experts:
            return total
        return total - self.expert_bytes(bytes_per_param) * (1.0 - self._touched(batch))

    def params_read(self, batch: int) -> float:
        """Parameters a decode step at ``batch`` reads from memory (all, or the touched experts)."""
        if not self.num_experts:
            return self.total_params
        return self.total_params - self.expert_params * (1.0 - self._touched(batch))

    def params_active(self) -> float:
        """Parameters one token computes with (the FLOPs numerator, 2 per parameter): all but the
        routed experts it does not choose and the input embedding table it only looks up."""
        active = self.total_params - self.embed_params
        if not self.num_experts:
            return active
        return active - self.expert_params * (1.0 - self.experts_per_token / self.num_experts)

    def stage(self, start: int, end: int, *, first: bool, last: bool) -> ModelShape:
        """The part of this model a pipeline stage holds: layers ``start``..``end - 1``, the
        input embedding on the first stage, the final norm and output head on the last (and, when
        the head is tied to the embedding, the table again there, as engines load it)."""
        if not self.weights:
            share = (end - start) / self.num_layers
            return replace(
                self,
                num_layers=end - start,
                total_params=self.total_params * share,
                expert_params=self.expert_params * share,
                embed_params=self.embed_params if first else 0.0,
                layer_kv_limit=self.layer_kv_limit[start:end],
            )
        tied = not any(w.kind == "lm_head" for w in self.weights)
        kept: list[Weights] = []
        for w in self.weights:
            i = _layer_of(w.module)
            if i is not None:
                keep = start <= i < end
            elif w.kind == "embed":
                keep = first or (last and tied)
            else:
                keep = last
            if keep:
                kept.append(w)
        lookup = self.embed_params
        if tied and first and not last:  # the table is only looked up on a first stage
            lookup = float(sum(w.params for w in self.weights if w.kind == "embed"))
        return replace(
            self,
            num_layers=end - start,
            total_params=float(sum(w.params for w in kept)),
            expert_params=float(sum(w.params for w in kept if w.kind == "expert")),
            embed_params=lookup if first else 0.0,
            layer_kv_limit=self.layer_kv_limit[start:end],
            weights=tuple(kept),
        )

    def check_tensor_parallel(self, tp: int) -> None:
        """``ModelShapeError`` unless an engine can split this model ``tp`` ways: the degree must
        divide the attention heads, and the KV heads (or be a multiple of them: replicated)."""
        if tp < 1:
            raise ModelShapeError(f"tensor-parallel degree must be >= 1, got {tp}")
        heads, kv = self.num_heads, self.num_kv_heads
        if heads % tp:
            ok = ", ".join(str(d) for d in range(1, heads + 1) if heads % d == 0)
            raise ModelShapeError(
                f"tensor-parallel degree {tp} does not divide the {heads} attention heads of "
                f"{self.name}: engines split heads evenly across GPUs; use one of {ok}"
            )
        if not self.kv_latent_dim and (kv % tp if tp <= kv else tp % kv):
            raise ModelShapeError(
                f"tensor-parallel degree {tp} and the {kv} KV heads of {self.name}: the degree "
                f"must divide the KV heads or be a multiple of them (replicated)"
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


def _layer_types(data: Mapping[str, Any], where: str, layers: int) -> Any:
    """``layer_types`` as the config gives it, or as transformers derives Llama 4's: a layer
    whose ``no_rope_layers`` entry is 1 (it uses RoPE; by default all but every
    ``no_rope_layer_interval``-th) is chunked attention, the others full."""
    types = data.get("layer_types")
    if types is not None or data.get("attention_chunk_size") is None:
        return types
    rope = data.get("no_rope_layers") or [
        int((i + 1) % int(_get(data, where, "no_rope_layer_interval", default=4)) != 0)
        for i in range(layers)
    ]
    if not isinstance(rope, list):
        raise ModelShapeError(f"{where}: 'no_rope_layers' must be a list, got {rope!r:.60}")
    return ["chunked_attention" if r else "full_attention" for r in rope]


def _layer_limits(data: Mapping[str, Any], where: str, layers: int) -> tuple[int | None, ...]:
    """Per layer, the tokens its cache keeps: ``layer_types`` with ``sliding_window`` (and
    ``attention_chunk_size`` for chunked local attention, which keeps at most the current
    chunk), or a ``sliding_window`` on every layer (Mistral) unless ``use_sliding_window`` is
    false."""
    types = _layer_types(data, where, layers)
    window = data.get("sliding_window")
    if types is None:
        if window is None or data.get("use_sliding_window") is False:
            return ()
        w = int(_get(data, where, "sliding_window"))
        return (w,) * layers if w > 0 else ()
    if not isinstance(types, list) or len(types) != layers:
        raise ModelShapeError(
            f"{where}: 'layer_types' must list one type per layer ({layers}), got {types!r:.60}"
        )
    out: list[int | None] = []
    for i, t in enumerate(types):
        if t in ("full_attention", "attention", "full", "global"):
            out.append(None)
        elif t in ("sliding_attention", "sliding", "local"):
            w = int(_get(data, where, "sliding_window"))
            if w <= 0:
                raise ModelShapeError(f"{where}: 'sliding_window' must be > 0, got {w}")
            out.append(w)
        elif t in ("chunked_attention", "chunked"):
            c = int(_get(data, where, "attention_chunk_size"))
            if c <= 0:
                raise ModelShapeError(f"{where}: 'attention_chunk_size' must be > 0, got {c}")
            out.append(c)
        elif t in ("linear_attention", "mamba", "conv", "recurrent"):
            out.append(0)
        else:
            raise ModelShapeError(f"{where}: layer_types[{i}] {t!r} is not a known layer type")
    return tuple(out)


def _weight_format(data: Mapping[str, Any], where: str) -> WeightFormat:
    torch_dtype = str(data.get("torch_dtype") or data.get("dtype") or "bfloat16").lower()
    # engines serve float32 checkpoints in 16 bits (vLLM's dtype "auto")
    base = torch_dtype if torch_dtype in ("float16", "bfloat16") else "bfloat16"
    q = data.get("quantization_config")
    if q is None:
        return WeightFormat(base_dtype=base)
    if not isinstance(q, Mapping):
        raise ModelShapeError(f"{where}: 'quantization_config' must be an object")
    method = str(q.get("quant_method", "")).lower()
    if method == "compressed-tensors":
        try:
            ct = read_compressed_tensors(q, f"{where}: quantization_config", _DTYPE_BYTES[base])
        except QuantConfigError as exc:
            raise ModelShapeError(str(exc)) from None
        return WeightFormat(base, method, skip=ct.ignore, compressed=ct)
    skip = q.get("modules_to_not_convert") or q.get("ignore") or []
    if not isinstance(skip, list) or not all(isinstance(s, str) for s in skip):
        raise ModelShapeError(f"{where}: 'modules_to_not_convert' must be a list of names")
    if method == "fp8":
        block = q.get("weight_block_size")
        if block is not None and (
            not isinstance(block, list)
            or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
        ):
            raise ModelShapeError(
                f"{where}: quantization_config 'weight_block_size' must be two positive "
                f"integers, got {block!r}"
            )
        return WeightFormat(base, "fp8", (block[0], block[1]) if block else None, 8, 0, tuple(skip))
    if method == "mxfp4":
        return WeightFormat(base, "mxfp4", None, 4, 32, tuple(skip))
    if method in ("awq", "gptq"):
        bits = int(_get(q, f"{where} quantization_config", "bits", "w_bit"))
        group = int(_get(q, f"{where} quantization_config", "group_size", "q_group_size"))
        if bits not in (2, 3, 4, 8) or group <= 0:
            raise ModelShapeError(
                f"{where}: quantization_config bits {bits} / group_size {group} not supported"
            )
        return WeightFormat(base, method, None, bits, group, tuple(skip))
    why = (
        f"{where}: quantization_config quant_method {method or None!r} is not modelled "
        f"(fp8, mxfp4, awq, gptq, compressed-tensors are); give --dtype to size the weights"
    )
    return WeightFormat(base, method or "unknown", skip=tuple(skip), unsupported=why)


def _attention(
    data: Mapping[str, Any], where: str, i: int, h: int, heads: int, kv: int, head_dim: int
) -> list[Weights]:
    p = f"model.layers.{i}.self_attn"
    if data.get("kv_lora_rank"):
        lora = int(_get(data, where, "kv_lora_rank"))
        rope = int(_get(data, where, "qk_rope_head_dim"))
        nope = int(_get(data, where, "qk_nope_head_dim"))
        v = int(_get(data, where, "v_head_dim"))
        q_lora = int(_get(data, where, "q_lora_rank", default=0))
        if q_lora:
            q = [
                Weights(f"{p}.q_a_proj", "attn", q_lora, h),
                Weights(f"{p}.q_a_layernorm", "norm", 1, q_lora),
                Weights(f"{p}.q_b_proj", "attn", heads * (nope + rope), q_lora),
            ]
        else:
            q = [Weights(f"{p}.q_proj", "attn", heads * (nope + rope), h)]
        return [
            *q,
            Weights(f"{p}.kv_a_proj_with_mqa", "attn", lora + rope, h),
            Weights(f"{p}.kv_a_layernorm", "norm", 1, lora),
            Weights(f"{p}.kv_b_proj", "attn", heads * (nope + v), lora),
            Weights(f"{p}.o_proj", "attn", h, heads * v),
        ]
    out = [
        Weights(f"{p}.q_proj", "attn", heads * head_dim, h),
        Weights(f"{p}.k_proj", "attn", kv * head_dim, h),
        Weights(f"{p}.v_proj", "attn", kv * head_dim, h),
        Weights(f"{p}.o_proj", "attn", h, heads * head_dim),
    ]
    if data.get("attention_bias") is True:
        out.append(Weights(f"{p}.bias", "norm", 1, (heads + 2 * kv) * head_dim + h))
    return out


def _language_model(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The language model's part of a config: its ``text_config`` when it nests one (Llama 4,
    Gemma 3, Qwen-VL), with the top level's checkpoint format where the part has none."""
    text = data.get("text_config")
    if not isinstance(text, Mapping) or "num_hidden_layers" in data:
        return data
    out = dict(text)
    for key in ("quantization_config", "torch_dtype", "dtype", "tie_word_embeddings"):
        if key in data and key not in out:
            out[key] = data[key]
    return out


def _is_moe_layer(data: Mapping[str, Any], where: str, i: int, experts: int) -> bool:
    if not experts:
        return False
    if i < int(_get(data, where, "first_k_dense_replace", default=0)):
        return False
    dense = data.get("mlp_only_layers") or []
    if isinstance(dense, list) and i in dense:
        return False
    listed = data.get("moe_layers")
    if isinstance(listed, list):
        return i in listed
    freq = int(_get(data, where, "moe_layer_freq", default=1))
    step = int(_get(data, where, "decoder_sparse_step", "interleave_moe_layer_step", default=1))
    return freq > 0 and step > 0 and i % freq == 0 and (i + 1) % step == 0


def shape_from_hf(
    data: Mapping[str, Any], *, where: str = "config", name: str = "model"
) -> ModelShape:
    """Shape of a Llama/Mistral/Qwen/Mixtral/DeepSeek/gpt-oss-style ``config.json`` (dense or
    mixture-of-experts, GQA or MLA, full or sliding-window layers, quantized or not). A
    multimodal config's ``text_config`` is the language model's (its vision tower not counted),
    the checkpoint's format read from either level."""
    data = _language_model(data)
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
    if data.get("intermediate_size_mlp") is not None:  # Llama 4: experts at intermediate_size
        moe_inter, inter = inter, int(_get(data, where, "intermediate_size_mlp"))
    for label, value in (
        ("hidden_size", h),
        ("num_hidden_layers", layers),
        ("num_attention_heads", heads),
        ("num_key_value_heads", kv),
        ("vocab_size", vocab),
    ):
        if value <= 0:
            raise ModelShapeError(f"{where}: {label!r} must be > 0, got {value}")
    if experts and not 0 < per_tok <= experts:
        raise ModelShapeError(
            f"{where}: 'num_experts_per_tok' must be in 1..{experts}, got {per_tok}"
        )
    llama4 = data.get("model_type") == "llama4_text"
    shared = int(
        _get(data, where, "n_shared_experts", "num_shared_experts", default=1 if llama4 else 0)
    )
    shared_inter = int(_get(data, where, "shared_expert_intermediate_size", default=0))
    router = "router" if data.get("model_type") in ("gpt_oss", "llama4_text") else "gate"
    tied = bool(data.get("tie_word_embeddings", False))
    ws: list[Weights] = [Weights("model.embed_tokens", "embed", vocab, h)]

    def layer(i: int, moe: bool) -> list[Weights]:
        p = f"model.layers.{i}"
        out = _attention(data, where, i, h, heads, kv, head_dim)
        out.append(Weights(f"{p}.norms", "norm", 2, h))
        if not moe:
            return [
                *out,
                Weights(f"{p}.mlp.gate_proj", "mlp", inter, h),
                Weights(f"{p}.mlp.up_proj", "mlp", inter, h),
                Weights(f"{p}.mlp.down_proj", "mlp", h, inter),
            ]
        m = f"{p}.mlp"
        out += [
            Weights(f"{m}.{router}", "router", experts, h),
            Weights(f"{m}.experts.gate_proj", "expert", moe_inter, h, experts),
            Weights(f"{m}.experts.up_proj", "expert", moe_inter, h, experts),
            Weights(f"{m}.experts.down_proj", "expert", h, moe_inter, experts),
        ]
        s_inter = shared * moe_inter or shared_inter
        if s_inter:
            out += [
                Weights(f"{m}.shared_experts.gate_proj", "shared_expert", s_inter, h),
                Weights(f"{m}.shared_experts.up_proj", "shared_expert", s_inter, h),
                Weights(f"{m}.shared_experts.down_proj", "shared_expert", h, s_inter),
            ]
        return out

    for i in range(layers):
        ws += layer(i, _is_moe_layer(data, where, i, experts))
    mtp: list[Weights] = []
    for j in range(int(_get(data, where, "num_nextn_predict_layers", default=0))):
        # DeepSeek's MTP module: one more decoder layer, enorm/hnorm and the 2h -> h eh_proj;
        # it shares the embedding and the output head
        i = layers + j
        mtp += layer(i, _is_moe_layer(data, where, i, experts))
        mtp += [
            Weights(f"model.layers.{i}.eh_proj", "mlp", h, 2 * h),
            Weights(f"model.layers.{i}.norms", "norm", 3, h),
        ]
    ws.append(Weights("model.norm", "norm", 1, h))
    if not tied:
        ws.append(Weights("lm_head", "lm_head", vocab, h))
    mla = bool(data.get("kv_lora_rank"))
    latent = 0
    if mla:
        latent = int(_get(data, where, "kv_lora_rank")) + int(_get(data, where, "qk_rope_head_dim"))
        head_dim = int(_get(data, where, "qk_nope_head_dim")) + int(
            _get(data, where, "qk_rope_head_dim")
        )
    return ModelShape(
        name=str(data.get("_name_or_path") or data.get("model_type") or name),
        num_layers=layers,
        hidden_size=h,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        total_params=float(sum(w.params for w in ws)),
        expert_params=float(sum(w.params for w in ws if w.kind == "expert")),
        num_experts=experts,
        experts_per_token=per_tok,
        embed_params=0.0 if tied else float(vocab * h),
        mtp_params=float(sum(w.params for w in mtp)),
        kv_latent_dim=latent,
        layer_kv_limit=_layer_limits(data, where, layers),
        weights=tuple(ws),
        weight_format=_weight_format(data, where),
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
