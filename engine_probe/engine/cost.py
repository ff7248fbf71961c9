"""Bytes-read and FLOPs estimates of one step, from the model's shape (no measurement).

Bytes: the layer weights, final norm and LM head are read once per step; embedding rows once
per token; keys and values once per (query sequence, context token, layer) plus the writes of the
new tokens. FLOPs: 2 per weight per token for the matrix multiplies, 4·heads·head_dim per
(query token, context token, layer) for attention, 2·hidden·vocab per sampled token.
These are the usual memory-bandwidth-utilisation numerators.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetwatch.engine_probe.engine.config import ModelConfig

__all__ = ["StepCostModel"]


@dataclass(frozen=True, slots=True)
class StepCostModel:
    """Per-unit costs for one model shape and element size (bytes per value)."""

    fixed_bytes: float
    """Weights read once per step regardless of batch (layers, final norm, LM head)."""
    embed_row_bytes: float
    kv_token_bytes: float
    """Keys + values of one token in all layers."""
    matmul_flops_per_token: float
    attn_flops_per_pair: float
    """Per (query token, context token) over all layers."""
    head_flops_per_sample: float

    @classmethod
    def for_model(cls, cfg: ModelConfig, element_bytes: int) -> StepCostModel:
        h, v = cfg.hidden_size, cfg.vocab_size
        layer_matmul = h * (h + 2 * cfg.kv_dim) + h * h + 3 * h * cfg.intermediate_size
        fixed = (cfg.num_layers * cfg.layer_params + h + v * h) * element_bytes
        return cls(
            fixed_bytes=float(fixed),
            embed_row_bytes=float(h * element_bytes),
            kv_token_bytes=float(2 * cfg.num_layers * cfg.kv_dim * element_bytes),
            matmul_flops_per_token=float(2 * cfg.num_layers * layer_matmul),
            attn_flops_per_pair=float(4 * cfg.num_layers * cfg.num_heads * cfg.head_dim),
            head_flops_per_sample=float(2 * h * v),
        )

    def estimate(
        self, tokens: int, attn_pairs: int, kv_read_tokens: int, samples: int
    ) -> tuple[float, float]:
        """(bytes_read, flops) of a step computing ``tokens`` tokens whose queries see
        ``attn_pairs`` (query, key) pairs, reading ``kv_read_tokens`` cached tokens, sampling
        ``samples`` tokens."""
        if tokens == 0:
            return 0.0, 0.0
        nbytes = (
            self.fixed_bytes
            + tokens * (self.embed_row_bytes + self.kv_token_bytes)
            + kv_read_tokens * self.kv_token_bytes
        )
        flops = (
            tokens * self.matmul_flops_per_token
            + attn_pairs * self.attn_flops_per_pair
            + samples * self.head_flops_per_sample
        )
        return nbytes, flops
