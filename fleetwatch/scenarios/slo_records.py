"""Synthetic request records with scripted incidents, for demos, tests and benchmarks.

Arrivals are uniform over the span (a Poisson process for a fixed count); TTFT and TPOT are
log-normal; an incident raises the error share and/or multiplies latencies for the requests
that arrive inside it. Randomness comes only from the ``rng`` passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fleetwatch.records import STATUS_DTYPE, add_derived

__all__ = ["Incident", "synthetic_records"]


@dataclass(frozen=True, slots=True)
class Incident:
    """From ``start_s`` to ``end_s``: this share of requests fail and latencies are scaled."""

    start_s: float
    end_s: float
    error_ratio: float = 0.0
    latency_factor: float = 1.0


def synthetic_records(
    rng: np.random.Generator,
    *,
    n: int,
    start_s: float,
    duration_s: float,
    incidents: Sequence[Incident] = (),
    base_error_ratio: float = 0.0002,
    classes: Sequence[str] = ("chat",),
    models: Sequence[str] = ("llama-3-8b",),
    ttft_median_s: float = 0.15,
    tpot_median_s: float = 0.02,
) -> pd.DataFrame:
    """``n`` finished requests arriving in [start_s, start_s + duration_s), as a records frame."""
    arrival = np.sort(rng.uniform(start_s, start_s + duration_s, n))
    err_p = np.full(n, base_error_ratio)
    factor = np.ones(n)
    for inc in incidents:
        inside = (arrival >= inc.start_s) & (arrival < inc.end_s)
        err_p[inside] = np.maximum(err_p[inside], inc.error_ratio)
        factor[inside] *= inc.latency_factor
    ttft = rng.lognormal(np.log(ttft_median_s), 0.5, n) * factor
    tpot = rng.lognormal(np.log(tpot_median_s), 0.3, n) * factor
    out_tokens = rng.integers(1, 400, n)
    queue = ttft * 0.2
    failed = rng.random(n) < err_p
    no_text = np.full(n, None, dtype=object)
    first = arrival + ttft
    finished = first + tpot * np.maximum(out_tokens - 1, 0)
    status = np.where(failed, "error", "ok")
    first_col = np.where(failed, np.nan, first)
    finished = np.where(failed, arrival + ttft, finished)
    frame = pd.DataFrame(
        {
            "request_id": pd.array(np.char.add("r", np.arange(n).astype(str)), dtype="string"),
            "replica": pd.array(rng.choice(["r0", "r1"], n), dtype="string"),
            "model": pd.array(rng.choice(list(models), n), dtype="string"),
            "traffic_class": pd.array(rng.choice(list(classes), n), dtype="string"),
            "tenant": pd.array([None] * n, dtype="string"),
            "arrival_s": arrival,
            "scheduled_s": arrival + queue,
            "first_token_s": first_col,
            "finished_s": finished,
            "intended_s": np.full(n, np.nan),
            "prompt_tokens": rng.integers(10, 2000, n).astype(np.int64),
            "output_tokens": np.where(failed, 0, out_tokens).astype(np.int64),
            "cached_prompt_tokens": np.zeros(n, dtype=np.int64),
            "preemptions": np.zeros(n, dtype=np.int64),
            "preemption_stall_s": np.zeros(n),
            "max_itl_s": np.where(failed, np.nan, tpot * 3),
            "status": pd.Categorical(status, dtype=STATUS_DTYPE),
            "finish_reason": pd.array(np.where(failed, no_text, "stop"), dtype="string"),
            "error_type": pd.array(np.where(failed, "engine", no_text), dtype="string"),
        }
    )
    return add_derived(frame)
