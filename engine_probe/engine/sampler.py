"""Token selection: greedy for the whole batch in one call, temperature + top-p per sampled row.

A sampled token is a pure function of (seed, output position, logits): the uniform draw comes
from ``random.Random`` seeded with both, so a preempted and resumed request draws the same
tokens as an uninterrupted one.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence

import torch

from fleetwatch.engine_probe.engine.request import Request

__all__ = ["request_seed", "sample"]


def request_seed(engine_seed: int, request_id: str) -> int:
    """Seed for a sampled request that gave none: stable across processes (no ``hash(str)``)."""
    return (engine_seed << 32) ^ zlib.crc32(request_id.encode())


def sample(logits: torch.Tensor, requests: Sequence[Request], engine_seed: int) -> list[int]:
    """One token per row of ``logits [rows, vocab]`` for ``requests`` (same order)."""
    tokens: list[int] = logits.argmax(dim=-1).tolist()
    for row, req in enumerate(requests):
        sp = req.sampling
        if sp.temperature == 0.0:
            continue
        seed = sp.seed if sp.seed is not None else request_seed(engine_seed, req.request_id)
        u = random.Random(hash((seed, req.num_output))).random()
        probs = torch.softmax(logits[row] / sp.temperature, dim=-1)
        sorted_p, order = probs.sort(descending=True)
        if sp.top_p < 1.0:
            keep = (sorted_p.cumsum(0) - sorted_p) < sp.top_p
            sorted_p = sorted_p * keep
        cum = sorted_p.cumsum(0)
        pick = int((cum < u * float(cum[-1])).sum())  # first index whose cumulative mass >= u
        tokens[row] = int(order[min(pick, order.shape[0] - 1)])
    return tokens
