"""The decoder-only transformer (RMSNorm, RoPE, grouped-query attention, SwiGLU) with seeded
random weights, and one forward pass over a packed step batch that reads a paged KV cache.

A step batch packs every token computed in the step into one ``[T, hidden]`` tensor so all
matrix multiplies run once per layer for the whole batch; only attention is split: one padded
call for all decode tokens, one call per prefill chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from fleetwatch.engine_probe.engine.attention import (
    contiguous_attention,
    paged_decode_attention,
    paged_prefill_attention,
    write_kv,
)
from fleetwatch.engine_probe.engine.config import ModelConfig

__all__ = ["KVCache", "PrefillChunk", "StepBatch", "Transformer", "torch_dtype"]


def torch_dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}[name]


@dataclass(frozen=True, slots=True)
class PrefillChunk:
    """Tokens ``offset .. offset+length-1`` of the packed batch are positions
    ``start .. start+length-1`` of the sequence whose blocks are ``block_table``."""

    offset: int
    length: int
    start: int
    block_table: torch.Tensor


@dataclass(frozen=True, slots=True)
class StepBatch:
    """Everything one forward pass needs. The first ``num_decode`` tokens are one decode token per
    sequence; prefill chunks follow. ``sample_index`` picks the tokens whose logits are wanted."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    slots: torch.Tensor
    num_decode: int
    decode_tables: torch.Tensor
    decode_lens: torch.Tensor
    prefills: tuple[PrefillChunk, ...]
    sample_index: torch.Tensor


class KVCache:
    """Per-layer key and value block pools: ``[layers, num_blocks, block_size, kv_heads, head_dim]``."""

    def __init__(
        self,
        cfg: ModelConfig,
        num_blocks: int,
        block_size: int,
        device: torch.device,
        dtype: torch.dtype,
    ) -> None:
        shape = (cfg.num_layers, num_blocks, block_size, cfg.num_kv_heads, cfg.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes


class _Layer:
    __slots__ = ("attn_norm", "down", "gate_up", "mlp_norm", "o", "qkv")

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        self.attn_norm = tensors["attn_norm"]
        self.qkv = tensors["qkv"]
        self.o = tensors["o"]
        self.mlp_norm = tensors["mlp_norm"]
        self.gate_up = tensors["gate_up"]
        self.down = tensors["down"]


Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class Transformer:
    """Weights and forward passes. Weights are drawn from ``cfg.seed`` on the CPU in float32 and
    then moved, so every device and dtype starts from the same numbers."""

    def __init__(self, cfg: ModelConfig, device: torch.device, dtype: torch.dtype) -> None:
        self.cfg = cfg
        self.device = device
        self.dtype = dtype
        gen = torch.Generator().manual_seed(cfg.seed)
        h, kv, inter = cfg.hidden_size, cfg.kv_dim, cfg.intermediate_size
        residual_scale = (2.0 * cfg.num_layers) ** -0.5

        def normal(*shape: int, std: float) -> torch.Tensor:
            return (torch.randn(*shape, generator=gen) * std).to(device=device, dtype=dtype)

        def ones(n: int) -> torch.Tensor:
            return torch.ones(n, device=device, dtype=dtype)

        self.embed = normal(cfg.vocab_size, h, std=1.0)
        self.layers = [
            _Layer(
                {
                    "attn_norm": ones(h),
                    "qkv": normal(h + 2 * kv, h, std=h**-0.5),
                    "o": normal(h, h, std=h**-0.5 * residual_scale),
                    "mlp_norm": ones(h),
                    "gate_up": normal(2 * inter, h, std=h**-0.5),
                    "down": normal(h, inter, std=inter**-0.5 * residual_scale),
                }
            )
            for _ in range(cfg.num_layers)
        ]
        self.final_norm = ones(h)
        self.lm_head = (
            self.embed if cfg.tie_word_embeddings else normal(cfg.vocab_size, h, std=h**-0.5)
        )
        half = cfg.head_dim // 2
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(half, dtype=torch.float64) / half))
        angles = torch.arange(cfg.max_position_embeddings, dtype=torch.float64)[:, None] * inv_freq
        self.cos = angles.cos().to(device=device, dtype=dtype)
        self.sin = angles.sin().to(device=device, dtype=dtype)
        self.scale = cfg.head_dim**-0.5

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights (each read once per forward pass)."""
        total = self.embed.nbytes + self.final_norm.nbytes
        if self.lm_head is not self.embed:
            total += self.lm_head.nbytes
        for layer in self.layers:
            total += sum(
                t.nbytes
                for t in (
                    layer.attn_norm,
                    layer.qkv,
                    layer.o,
                    layer.mlp_norm,
                    layer.gate_up,
                    layer.down,
                )
            )
        return total

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def _run(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attend: Attend
    ) -> torch.Tensor:
        cfg = self.cfg
        t = input_ids.shape[0]
        nh, nkv, hd, h = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.hidden_size
        eps = cfg.rms_norm_eps
        cos = self.cos[positions].unsqueeze(1)
        sin = self.sin[positions].unsqueeze(1)
        x = self.embed[input_ids]
        for i, layer in enumerate(self.layers):
            y = F.rms_norm(x, (h,), layer.attn_norm, eps)
            qkv = F.linear(y, layer.qkv)
            q = self._rope(qkv[:, :h].view(t, nh, hd), cos, sin)
            k = self._rope(qkv[:, h : h + nkv * hd].view(t, nkv, hd), cos, sin)
            v = qkv[:, h + nkv * hd :].reshape(t, nkv, hd)
            o = attend(i, q, k, v)
            x = x + F.linear(o.reshape(t, h), layer.o)
            y = F.rms_norm(x, (h,), layer.mlp_norm, eps)
            gate, up = F.linear(y, layer.gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer.down)
        return x

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        x = F.rms_norm(x, (self.cfg.hidden_size,), self.final_norm, self.cfg.rms_norm_eps)
        return F.linear(x, self.lm_head).float()

    def forward(self, batch: StepBatch, cache: KVCache) -> torch.Tensor:
        """Compute the step's tokens, writing their K/V into ``cache``; return float32 logits
        ``[len(sample_index), vocab]``."""
        nd = batch.num_decode
        scale = self.scale

        def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            kc, vc = cache.k[i], cache.v[i]
            write_kv(kc, vc, batch.slots, k, v)
            if not batch.prefills:
                return paged_decode_attention(
                    q, kc, vc, batch.decode_tables, batch.decode_lens, scale
                )
            out = torch.empty_like(q)
            if nd:
                out[:nd] = paged_decode_attention(
                    q[:nd], kc, vc, batch.decode_tables, batch.decode_lens, scale
                )
            for c in batch.prefills:
                out[c.offset : c.offset + c.length] = paged_prefill_attention(
                    q[c.offset : c.offset + c.length], kc, vc, c.block_table, c.start, scale
                )
            return out

        x = self._run(batch.input_ids, batch.positions, attend)
        return self._logits(x[batch.sample_index])

    def forward_contiguous(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Reference pass over one whole sequence without any cache: logits for every position."""
        positions = torch.arange(token_ids.shape[0], device=self.device)
        scale = self.scale
        x = self._run(
            token_ids, positions, lambda _i, q, k, v: contiguous_attention(q, k, v, scale)
        )
        return self._logits(x)
