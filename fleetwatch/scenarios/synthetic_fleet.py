"""Synthetic request records for a fleet, with faults on chosen replicas.

For table tests, benchmarks and examples where running the reference engine would be slow. The
model is deliberately simple: Poisson arrivals, log-normal prompt and output lengths, prefill time
proportional to uncached prompt tokens, a per-token decode time, exponential queueing. A replica's
``slowdown`` multiplies its prefill and decode times; ``prompt_scale`` multiplies the prompt
lengths it is sent; ``cache_hit`` sets its prefix-cache hit share.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

__all__ = ["synthetic_fleet"]


def synthetic_fleet(
    replicas: int = 5,
    requests_per_replica: int = 400,
    *,
    seed: int = 0,
    slowdown: Mapping[int, float] | None = None,
    prompt_scale: Mapping[int, float] | None = None,
    cache_hit: Mapping[int, float] | None = None,
    error_rate: Mapping[int, float] | None = None,
    prefill_s_per_token: float = 2e-4,
    tpot_s: float = 0.02,
    queue_mean_s: float = 0.02,
    rate_per_s: float = 5.0,
) -> pd.DataFrame:
    """A ``fleetwatch.records`` frame of ``replicas × requests_per_replica`` requests.

    Replicas are named ``replica-0`` … Every random draw comes from ``seed``.
    """
    from fleetwatch.records import STATUS_DTYPE, add_derived

    rng = np.random.default_rng(seed)
    n = replicas * requests_per_replica
    rep = np.repeat(np.arange(replicas), requests_per_replica)

    def per(mapping: Mapping[int, float] | None, default: float) -> np.ndarray:
        v = np.full(replicas, default)
        for k, f in (mapping or {}).items():
            v[k] = f
        return v[rep]

    slow = per(slowdown, 1.0)
    prompt = np.maximum(
        1, np.round(rng.lognormal(np.log(500), 0.6, n) * per(prompt_scale, 1.0))
    ).astype(np.int64)
    cached = np.floor(prompt * per(cache_hit, 0.2) * rng.uniform(0.8, 1.2, n)).astype(np.int64)
    cached = np.minimum(cached, prompt - 1)
    out = np.maximum(2, np.round(rng.lognormal(np.log(150), 0.5, n))).astype(np.int64)
    gaps = rng.exponential(1.0 / rate_per_s, n)
    arrival = np.empty(n)
    for r in range(replicas):
        idx = rep == r
        arrival[idx] = 1000.0 + np.cumsum(gaps[idx])
    queue = rng.exponential(queue_mean_s, n)
    prefill = (prompt - cached) * prefill_s_per_token * slow * rng.lognormal(0, 0.1, n)
    tpot = tpot_s * slow * rng.lognormal(0, 0.1, n)
    scheduled = arrival + queue
    first = scheduled + prefill
    finished = first + tpot * (out - 1)
    status = np.where(rng.uniform(size=n) < per(error_rate, 0.0), "error", "ok")
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
            "preemptions": np.zeros(n, dtype=np.int64),
            "preemption_stall_s": np.zeros(n),
            "max_itl_s": np.full(n, np.nan),
            "status": pd.Series(status, dtype=STATUS_DTYPE),
            "finish_reason": pd.array(["length"] * n, dtype="string"),
            "error_type": pd.array([None] * n, dtype="string"),
        }
    )
    return add_derived(df)
