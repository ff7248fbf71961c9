"""Paged attention reads the same keys/values as a contiguous cache would."""

from __future__ import annotations

import random

import torch

from fleetwatch.engine_probe.engine.attention import (
    contiguous_attention,
    paged_decode_attention,
    paged_prefill_attention,
    write_kv,
)


def _scatter(
    lengths: list[int], block_size: int, num_blocks: int, heads: int, kv_heads: int, dim: int
):
    gen = torch.Generator().manual_seed(0)
    k_cache = torch.randn(num_blocks, block_size, kv_heads, dim, generator=gen)
    v_cache = torch.randn(num_blocks, block_size, kv_heads, dim, generator=gen)
    free = list(range(num_blocks))
    random.Random(1).shuffle(free)
    seqs = []
    for n in lengths:
        table = [free.pop() for _ in range(-(-n // block_size))]
        k = torch.randn(n, kv_heads, dim, generator=gen)
        v = torch.randn(n, kv_heads, dim, generator=gen)
        slots = torch.tensor(
            [table[p // block_size] * block_size + p % block_size for p in range(n)]
        )
        write_kv(k_cache, v_cache, slots, k, v)
        q = torch.randn(n, heads, dim, generator=gen)
        seqs.append((table, q, k, v))
    return k_cache, v_cache, seqs


def test_paged_decode_attention_matches_contiguous_reference() -> None:
    lengths = [1, 5, 16, 17, 40]
    bs, heads, kvh, dim = 8, 8, 2, 16
    k_cache, v_cache, seqs = _scatter(lengths, bs, 64, heads, kvh, dim)
    width = max(len(t) for t, *_ in seqs)
    tables = torch.tensor([t + [0] * (width - len(t)) for t, *_ in seqs])
    q_last = torch.stack([q[-1] for _, q, _, _ in seqs])
    out = paged_decode_attention(q_last, k_cache, v_cache, tables, torch.tensor(lengths), dim**-0.5)
    for i, (_, q, k, v) in enumerate(seqs):
        ref = contiguous_attention(q, k, v, dim**-0.5)[-1]
        torch.testing.assert_close(out[i], ref, rtol=1e-5, atol=1e-5)


def test_paged_prefill_chunk_matches_contiguous_reference() -> None:
    bs, heads, kvh, dim = 4, 4, 1, 8
    k_cache, v_cache, seqs = _scatter([23], bs, 16, heads, kvh, dim)
    table, q, k, v = seqs[0]
    ref = contiguous_attention(q, k, v, dim**-0.5)
    for start, end in [(0, 23), (0, 7), (7, 13), (13, 23), (22, 23)]:
        got = paged_prefill_attention(
            q[start:end], k_cache, v_cache, torch.tensor(table), start, dim**-0.5
        )
        torch.testing.assert_close(got, ref[start:end], rtol=1e-5, atol=1e-5)


def test_engine_tokens_match_a_cache_free_greedy_reference(make_engine, tiny) -> None:
    engine = make_engine(block_size=4, max_num_batched_tokens=8)
    prompt = [random.Random(5).randrange(tiny.vocab_size) for _ in range(11)]
    [got] = engine.generate([prompt], max_tokens=12)
    tokens = list(prompt)
    with torch.inference_mode():
        for _ in range(12):
            logits = engine.model.forward_contiguous(torch.tensor(tokens))
            tokens.append(int(logits[-1].argmax()))
    assert got == tokens[len(prompt) :]
