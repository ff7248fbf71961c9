"""Attention over a paged KV cache, and the contiguous reference it must agree with.

The cache of one layer is a pair of tensors ``[num_blocks, block_size, num_kv_heads, head_dim]``.
A sequence's keys and values are read by gathering its blocks through its block table; positions
past its length are masked. Grouped-query attention: ``num_heads`` query heads share
``num_kv_heads`` key/value heads.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = [
    "contiguous_attention",
    "paged_decode_attention",
    "paged_prefill_attention",
    "write_kv",
]


def write_kv(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
) -> None:
    """Store the keys/values ``[T, kv_heads, head_dim]`` of T tokens at flat ``slots``
    (``block * block_size + offset``)."""
    kv_heads, head_dim = k_cache.shape[2], k_cache.shape[3]
    k_cache.view(-1, kv_heads, head_dim).index_copy_(0, slots, k)
    v_cache.view(-1, kv_heads, head_dim).index_copy_(0, slots, v)


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """One query token per sequence: ``q [B, heads, head_dim]`` -> ``[B, heads, head_dim]``.

    ``block_tables [B, max_blocks]`` (padded with any valid block id) and ``context_lens [B]``
    (tokens in the cache for each sequence, the query's own token included).
    """
    batch, max_blocks = block_tables.shape
    block_size, kv_heads, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    ctx = max_blocks * block_size
    k = k_cache[block_tables].view(batch, ctx, kv_heads, head_dim).transpose(1, 2)
    v = v_cache[block_tables].view(batch, ctx, kv_heads, head_dim).transpose(1, 2)
    mask = torch.arange(ctx, device=q.device)[None, :] < context_lens[:, None]
    out = F.scaled_dot_product_attention(
        q.unsqueeze(2), k, v, attn_mask=mask[:, None, None, :], scale=scale, enable_gqa=True
    )
    return out.squeeze(2)


def paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    start: int,
    scale: float,
) -> torch.Tensor:
    """A chunk of ``n`` query tokens at positions ``start .. start+n-1`` of one sequence, causal
    over everything before them in the cache: ``q [n, heads, head_dim]`` -> same shape."""
    n = q.shape[0]
    block_size, kv_heads, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    end = start + n
    num_blocks = -(-end // block_size)
    ctx = num_blocks * block_size
    table = block_table[:num_blocks]
    k = k_cache[table].view(ctx, kv_heads, head_dim).transpose(0, 1).unsqueeze(0)
    v = v_cache[table].view(ctx, kv_heads, head_dim).transpose(0, 1).unsqueeze(0)
    pos_q = torch.arange(start, end, device=q.device)
    pos_k = torch.arange(ctx, device=q.device)
    mask = pos_k[None, :] <= pos_q[:, None]
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1).unsqueeze(0), k, v, attn_mask=mask, scale=scale, enable_gqa=True
    )
    return out.squeeze(0).transpose(0, 1)


def contiguous_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> torch.Tensor:
    """Plain causal attention over one whole sequence held contiguously (the reference):
    ``q [T, heads, head_dim]``, ``k, v [T, kv_heads, head_dim]`` -> ``[T, heads, head_dim]``."""
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1).transpose(0, 1)
    v = v.repeat_interleave(group, dim=1).transpose(0, 1)
    scores = (q.transpose(0, 1) @ k.transpose(1, 2)) * scale
    t = q.shape[0]
    causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~causal, float("-inf"))
    return (scores.softmax(dim=-1) @ v).transpose(0, 1)
