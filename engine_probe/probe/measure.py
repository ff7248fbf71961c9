"""What one probed request measured, and the latency definitions the probe uses (defined once here).

All instants are seconds on the probe's monotonic clock.

- ``scheduled_s``: when the load schedule meant to send the request (open loop: the arrival process;
  closed loop: when a worker became free). ``sent_s``: when the request was actually handed to the
  HTTP client. ``send_lag_s = sent_s - scheduled_s`` is the probe's own timing error.
- TTFT = first token received - sent; ``ttft_sched_s`` = first token - scheduled.
- E2E = end of the stream ([DONE] or close) - sent; ``e2e_sched_s`` = end - scheduled. Measuring from
  the scheduled send avoids coordinated omission: a stalled server delays the sends of a client with
  bounded concurrency, which hides the stall from send-based latency but not from this one.
- Tokens come from the ``usage`` of the last chunk (without it, from the chunks' ``token_ids``); only
  a server that sends neither is counted one token per chunk (``tokens_from_usage`` is then False).
- TPOT = (E2E - TTFT) / (tokens - 1): the mean time per output token after the first, defined for
  two tokens or more (as vLLM bench and the OpenTelemetry GenAI conventions define it).
- ITL, per token: a chunk carrying k tokens that arrives Δ after the previous token-carrying chunk
  contributes k gaps of Δ/k; the tokens that arrive with the first token contribute gaps of 0. So a
  request with N tokens has exactly N - 1 ITL samples, and they sum to last-token - first-token.
  How many tokens a chunk carries: its ``token_ids`` when the server sends them (this server does),
  else the usage total split across chunks in proportion to their text length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["RequestResult", "apportion_tokens", "itl_samples"]


def apportion_tokens(text_lengths: Sequence[int], total: int) -> list[int]:
    """Split ``total`` tokens across chunks in proportion to their text length (largest remainder).

    Every chunk gets at least one token while there are enough tokens to go round.

    >>> apportion_tokens([1, 1, 2], 8)
    [2, 2, 4]
    >>> apportion_tokens([2, 1, 3, 1, 2], 9)
    [2, 1, 3, 1, 2]
    """
    n = len(text_lengths)
    if n == 0 or total <= 0:
        return [0] * n
    if total <= n:
        return [1] * total + [0] * (n - total)
    weights = [max(1, length) for length in text_lengths]
    whole = sum(weights)
    raw = [total * w / whole for w in weights]
    out = [max(1, math.floor(r)) for r in raw]
    left = total - sum(out)
    by_remainder = sorted(range(n), key=lambda i: raw[i] - out[i], reverse=True)
    while left > 0:
        for i in by_remainder[:left]:
            out[i] += 1
        left = total - sum(out)
    while left < 0:
        i = max((j for j in range(n) if out[j] > 1), key=lambda j: out[j] - raw[j])
        out[i] -= 1
        left += 1
    return out


def itl_samples(times_s: Sequence[float], tokens: Sequence[int]) -> list[float]:
    """Per-token inter-token latencies (seconds) from chunk receipt instants and tokens per chunk.

    >>> itl_samples([1.0, 1.3, 1.4], [2, 3, 1])
    [0.0, 0.1, 0.1, 0.1, 0.1]
    """
    out: list[float] = []
    prev: float | None = None
    for t, k in zip(times_s, tokens, strict=True):
        if k <= 0:
            continue
        if prev is None:
            out.extend([0.0] * (k - 1))
        else:
            gap = (t - prev) / k
            out.extend([round(gap, 12)] * k)
        prev = t
    return out


@dataclass(frozen=True, slots=True)
class RequestResult:
    """One probed request: instants on the probe clock, token counts, outcome."""

    index: int
    request_id: str
    scheduled_s: float
    sent_s: float
    finished_s: float
    first_token_s: float | None = None
    chunk_times_s: tuple[float, ...] = ()
    """Receipt instants of the chunks that carried tokens."""
    chunk_tokens: tuple[int, ...] = ()
    prompt_tokens: int = 0
    output_tokens: int = 0
    tokens_from_usage: bool = True
    status: str = "ok"
    """ok, error, aborted or rejected (``fleetwatch.core.records.Status`` values)."""
    http_status: int | None = None
    error: str | None = None
    finish_reason: str | None = None
    server_queue_s: float | None = None
    """Queue time the server reported (fleetwatch servers send ``timing.queue_s``), seconds."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def send_lag_s(self) -> float:
        return self.sent_s - self.scheduled_s

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.sent_s

    @property
    def ttft_sched_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.scheduled_s

    @property
    def e2e_s(self) -> float:
        return self.finished_s - self.sent_s

    @property
    def e2e_sched_s(self) -> float:
        return self.finished_s - self.scheduled_s

    @property
    def tpot_s(self) -> float | None:
        if self.first_token_s is None or self.output_tokens < 2:
            return None
        return (self.finished_s - self.first_token_s) / (self.output_tokens - 1)

    def itl_s(self) -> list[float]:
        return itl_samples(self.chunk_times_s, self.chunk_tokens)

    @property
    def max_itl_s(self) -> float | None:
        gaps = self.itl_s()
        return max(gaps) if gaps else None
