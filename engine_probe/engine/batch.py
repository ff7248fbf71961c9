"""Packing one step into a single ``StepBatch``: decode rows, padding rows, prefill chunks.

Row order: real decode rows, then padding rows (static batching: a finished member's last
position recomputed in place, same token, written to the scratch slot), then prefill chunks.
Logits rows: the requests that sample first, padding last (computed for their cost, discarded).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fleetwatch.engine_probe.engine.model import PrefillChunk, StepBatch
from fleetwatch.engine_probe.engine.request import Request

__all__ = ["PackedStep", "build_batch"]


@dataclass(frozen=True, slots=True)
class PackedStep:
    """The batch, the requests that sample this step (in logits-row order) and the step's
    attention work: query-key pairs computed and cached positions read (for the cost model)."""

    batch: StepBatch
    samplers: list[Request]
    attn_pairs: int
    kv_read: int


def build_batch(
    decode: list[Request],
    prefill: list[tuple[Request, int]],
    padding: list[Request],
    *,
    block_size: int,
    scratch_slot: int,
    device: torch.device,
) -> PackedStep:
    """Pack the step's rows; ``scratch_slot`` is the KV slot padding rows write to."""
    bs = block_size
    ids: list[int] = []
    pos: list[int] = []
    slots: list[int] = []
    tables: list[list[int]] = []
    lens: list[int] = []
    kv_read = 0
    for req in decode:
        p = req.num_computed
        ids.append(req.tokens[p])
        pos.append(p)
        table = req.block_table
        slots.append(table[p // bs] * bs + p % bs)
        tables.append(table)
        lens.append(p + 1)
        kv_read += p
    for req in padding:
        p = req.num_computed - 1
        ids.append(req.tokens[p])
        pos.append(p)
        table = req.block_table
        slots.append(scratch_slot)  # never overwrite a block a prefix-cache hit may share
        tables.append(table)
        lens.append(p + 1)
        kv_read += p
    num_decode = len(decode) + len(padding)
    attn_pairs = kv_read + num_decode
    samplers = list(decode)
    sample_index = list(range(len(decode)))
    chunks: list[PrefillChunk] = []
    offset = num_decode
    for req, n in prefill:
        start = req.num_computed
        ids.extend(req.tokens[start : start + n])
        pos.extend(range(start, start + n))
        table = req.block_table
        p, end = start, start + n
        while p < end:
            off = p % bs
            take = min(bs - off, end - p)
            base = table[p // bs] * bs + off
            slots.extend(range(base, base + take))
            p += take
        chunks.append(PrefillChunk(offset, n, start, torch.tensor(table, device=device)))
        attn_pairs += n * start + n * (n + 1) // 2
        kv_read += start
        offset += n
        if start + n >= req.prefill_target:
            samplers.append(req)
            sample_index.append(offset - 1)
    sample_index.extend(range(len(decode), num_decode))
    width = max((len(t) for t in tables), default=0)
    padded = [t + [0] * (width - len(t)) for t in tables]
    batch = StepBatch(
        input_ids=torch.tensor(ids, dtype=torch.long, device=device),
        positions=torch.tensor(pos, dtype=torch.long, device=device),
        slots=torch.tensor(slots, dtype=torch.long, device=device),
        num_decode=num_decode,
        decode_tables=torch.tensor(padded, dtype=torch.long, device=device).view(num_decode, width),
        decode_lens=torch.tensor(lens, dtype=torch.long, device=device),
        prefills=tuple(chunks),
        sample_index=torch.tensor(sample_index, dtype=torch.long, device=device),
    )
    return PackedStep(batch, samplers, attn_pairs, kv_read)
