"""Pairs of runs for calibrating run comparison: same system twice, prompt mix only, slower decode.

Each run is one serving configuration measured for ``n`` requests (2,000–4,000 by default, drawn
per pair so the two runs differ in size, as real runs do). Latency is built from components, each
log-normal so percentiles wander by chance the way real ones do:

- queue: log-normal with a heavy right tail (σ 1.2), independent of the request;
- prefill: proportional to the uncached prompt tokens, times log-normal noise, plus a fixed cost;
- decode: ``output_tokens − 1`` steps of a per-token time that grows with the context length
  (so a longer prompt mix also moves TPOT a little, as it does on real engines);
- preemption: 2 % of requests stall once (log-normal seconds), inside decode.

Prompts are a two-part mix: chat (median 350 tokens) and retrieval-augmented (median 3,000 tokens).
A prefix-cache hit covers up to half of each prompt.

Cases (``compare_pair``):

- ``null``: both runs from the same configuration (independent draws);
- ``prompt_mix``: identical engine; the long-prompt share goes from 15 % to 30–50 %;
- ``decode_slowdown``: identical workload; every decode step is 20 % slower;
- ``decode_10``: identical workload; every decode step is 10 % slower (twice the default
  ``--min-effect``: a comparison must not call it "no regression").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from fleetwatch.fleet.canary.judge import Side
    from fleetwatch.fleet.compare.shape import ShapeCounts

__all__ = [
    "CANARY_SIGNALS",
    "FINISH_REASONS",
    "Case",
    "canary_side_draw",
    "compare_pair",
    "run_records",
    "shape_counts_draw",
]

Case = Literal["null", "prompt_mix", "decode_slowdown", "decode_10"]


def run_records(
    n: int,
    *,
    seed: int | np.random.SeedSequence,
    long_prompt_share: float = 0.15,
    decode_slowdown: float = 1.0,
    prefill_slowdown: float = 1.0,
    output_scale: float = 1.0,
    replicas: int = 4,
    rate_per_s: float = 8.0,
) -> pd.DataFrame:
    """A ``fleetwatch.records`` frame of ``n`` requests spread over ``replicas`` replicas.

    ``decode_slowdown`` multiplies the per-token decode time, ``prefill_slowdown`` the prefill
    time; ``long_prompt_share`` is the share of retrieval-augmented (long) prompts and
    ``output_scale`` multiplies the output lengths.
    """
    from fleetwatch.records import STATUS_DTYPE, add_derived

    rng = np.random.default_rng(seed)
    long = rng.uniform(size=n) < long_prompt_share
    prompt = np.where(
        long, rng.lognormal(np.log(3000), 0.45, n), rng.lognormal(np.log(350), 0.7, n)
    )
    prompt = np.clip(np.round(prompt), 1, 32_000).astype(np.int64)
    cached = np.floor(prompt * rng.uniform(0.0, 0.5, n)).astype(np.int64)
    cached = np.minimum(cached, prompt - 1)
    out = rng.lognormal(np.log(180), 0.8, n) * output_scale
    out = np.clip(np.round(out), 2, 4096).astype(np.int64)
    arrival = 1000.0 + np.cumsum(rng.exponential(1.0 / rate_per_s, n))
    queue = rng.lognormal(np.log(0.015), 1.2, n)
    prefill = 0.005 + (prompt - cached) * 1.5e-4 * prefill_slowdown * rng.lognormal(0, 0.2, n)
    tpot = 0.022 * (1 + prompt / 30_000) * decode_slowdown * rng.lognormal(0, 0.15, n)
    preempted = rng.uniform(size=n) < 0.02
    stall = np.where(preempted, rng.lognormal(np.log(0.5), 0.8, n), 0.0)
    scheduled = arrival + queue
    first = scheduled + prefill
    finished = first + tpot * (out - 1) + stall
    rep = np.arange(n) % replicas
    df = pd.DataFrame(
        {
            "request_id": pd.array([f"q{i}" for i in range(n)], dtype="string"),
            "replica": pd.array([f"replica-{r}" for r in rep], dtype="string"),
            "model": pd.array(["m"] * n, dtype="string"),
            "traffic_class": pd.array(["default"] * n, dtype="string"),
            "tenant": pd.array([None] * n, dtype="string"),
            "arrival_s": arrival,
            "scheduled_s": scheduled,
            "first_token_s": first,
            "finished_s": finished,
            "intended_s": np.full(n, np.nan),
            "prompt_tokens": prompt,
            "output_tokens": out,
            "cached_prompt_tokens": cached,
            "preemptions": preempted.astype(np.int64),
            "preemption_stall_s": stall,
            "max_itl_s": np.full(n, np.nan),
            "status": pd.Series(["ok"] * n, dtype=STATUS_DTYPE),
            "finish_reason": pd.array(["length"] * n, dtype="string"),
            "error_type": pd.array([None] * n, dtype="string"),
        }
    )
    return add_derived(df)


def compare_pair(
    case: Case, seed: int, *, sizes: tuple[int, int] = (2000, 4000)
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(before, after) for ``case``; every draw comes from ``seed``. Run sizes are drawn
    independently from ``sizes`` (inclusive)."""
    root = np.random.SeedSequence([seed, 15])
    pick, s_before, s_after = root.spawn(3)
    rng = np.random.default_rng(pick)
    n_before, n_after = (int(v) for v in rng.integers(sizes[0], sizes[1] + 1, size=2))
    before = run_records(n_before, seed=s_before)
    if case == "null":
        after = run_records(n_after, seed=s_after)
    elif case == "prompt_mix":
        share = float(rng.uniform(0.30, 0.50))
        after = run_records(n_after, seed=s_after, long_prompt_share=share)
    elif case == "decode_slowdown":
        after = run_records(n_after, seed=s_after, decode_slowdown=1.2)
    elif case == "decode_10":
        after = run_records(n_after, seed=s_after, decode_slowdown=1.1)
    else:
        raise ValueError(f"unknown case {case!r}")
    return before, after


FINISH_REASONS = ("stop", "length", "abort")
ERROR_TYPES = ("timeout", "oom")


def shape_counts_draw(
    rng: np.random.Generator, n: int, shares: tuple[float, float, float]
) -> ShapeCounts:
    """One run's output-shape counts, ``n`` requests: 1.5 % errors (1 % ``timeout``, 0.5 %
    ``oom``), the ok ones' finish reasons drawn from ``shares`` (``FINISH_REASONS``), 1 % of ok
    outputs empty."""
    from fleetwatch.fleet.compare.shape import shape_from_tallies

    errors = rng.multinomial(n, [0.01, 0.005, 0.985])
    ok = int(errors[2])
    reasons = rng.multinomial(ok, shares)
    return shape_from_tallies(
        dict(zip(FINISH_REASONS, map(int, reasons), strict=True)),
        int(rng.binomial(ok, 0.01)),
        ok,
        dict(zip(ERROR_TYPES, map(int, errors[:2]), strict=True)),
        n,
    )


def _canary_signals() -> dict[str, tuple[tuple[float, ...], float, float]]:
    from fleetwatch.core.profiles.buckets import (
        VLLM_PHASE_BUCKETS,
        VLLM_TPOT_BUCKETS,
        VLLM_TTFT_BUCKETS,
    )

    return {
        "ttft": (VLLM_TTFT_BUCKETS, 0.08, 0.5),
        "tpot": (VLLM_TPOT_BUCKETS, 0.03, 0.3),
        "e2e": (VLLM_PHASE_BUCKETS, 4.0, 0.5),
    }


CANARY_SIGNALS = _canary_signals()
"""Each canary signal's bucket bounds (vLLM's), median seconds and log-normal spread."""

CANARY_OUTPUT = (200.0, 0.8)
"""The canary's output tokens per request: log-normal median and spread, rounded up to whole
tokens, counted in vLLM's ``vllm:request_generation_tokens`` buckets."""


def _cumulative(x: np.ndarray[Any, Any], bounds: tuple[float, ...]) -> dict[float, float]:
    edges = [*bounds, float("inf")]
    cumulative = np.searchsorted(np.sort(x), edges, side="right")
    return dict(zip(edges, cumulative.astype(float), strict=True))


def canary_side_draw(
    rng: np.random.Generator,
    n: int,
    slow: float = 1.0,
    errors: float = 0.0005,
    longer: float | None = 1.0,
) -> Side:
    """One side of a canary window: ``n`` requests, each signal log-normal (``CANARY_SIGNALS``)
    times ``slow``, counted in vLLM's buckets; ``errors`` of them failed; output tokens
    (``CANARY_OUTPUT``) times ``longer``, left out when None."""
    from fleetwatch.core.profiles.buckets import VLLM_REQUEST_TOKEN_BUCKETS
    from fleetwatch.fleet.canary.judge import OUTPUT_LENGTH, Side

    histograms = {}
    for name, (bounds, median, spread) in CANARY_SIGNALS.items():
        histograms[name] = _cumulative(
            median * slow * np.exp(spread * rng.standard_normal(n)), bounds
        )
    if longer is not None:
        median, spread = CANARY_OUTPUT
        tokens = np.ceil(median * longer * np.exp(spread * rng.standard_normal(n)))
        histograms[OUTPUT_LENGTH] = _cumulative(tokens, VLLM_REQUEST_TOKEN_BUCKETS)
    return Side(
        histograms, n, {"error_rate": int(rng.binomial(n, errors))}, frozenset({"error_rate"})
    )
