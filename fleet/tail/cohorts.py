"""The completed requests as arrays, and each request's latency split into its components.

``ok_requests`` keeps the completed requests of a records frame as arrays; ``decompose`` splits the
target latency into queue, prefill, decode and preemption stall (they add up exactly: the stall is
taken out of decode first, then prefill).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from fleetwatch.fleet.errors import AnalysisError

__all__ = [
    "F64",
    "MIN_REQUESTS",
    "Bools",
    "Requests",
    "Target",
    "decompose",
    "ok_index",
    "ok_requests",
]

F64 = np.ndarray[Any, np.dtype[np.float64]]
Bools = np.ndarray[Any, np.dtype[np.bool_]]
Target = Literal["e2e", "ttft"]

NEEDED = ("arrival_s", "scheduled_s", "first_token_s", "finished_s", "prompt_tokens")
MIN_REQUESTS = 20


@dataclass(frozen=True, slots=True)
class Requests:
    """The completed requests, one array entry each: times in seconds, token counts, and each
    request's replica as a code into ``replicas`` (one "all" when the records name none)."""

    arrival: F64
    scheduled: F64
    first: F64
    finished: F64
    uncached: F64
    out_tokens: F64
    stall: F64
    preempted: Bools
    codes: np.ndarray[Any, Any]
    replicas: list[str]

    def __len__(self) -> int:
        return len(self.arrival)


def _col(df: pd.DataFrame, name: str, default: float = 0.0) -> F64:
    if name not in df.columns:
        return np.full(len(df), default)
    return df[name].to_numpy(dtype=np.float64, na_value=np.nan)


def _replicas(
    df: pd.DataFrame, idx: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], list[str]]:
    if "replica" not in df.columns:
        return np.zeros(len(idx), dtype=np.int64), ["all"]
    all_codes, uniques = pd.factorize(df["replica"])
    return all_codes[idx], [str(u) for u in uniques]


def ok_index(df: pd.DataFrame) -> np.ndarray[Any, Any]:
    """The rows of ``df`` that were scheduled, produced a first token and (when the records
    carry a status) ended ok, in order."""
    missing = [c for c in NEEDED if c not in df.columns]
    if missing:
        raise AnalysisError(f"records lack column(s) {', '.join(missing)}")
    ok = ~(np.isnan(_col(df, "scheduled_s")) | np.isnan(_col(df, "first_token_s")))
    if "status" in df.columns:
        ok &= (df["status"] == "ok").to_numpy(dtype=bool, na_value=False)
    return np.flatnonzero(ok)


def ok_requests(df: pd.DataFrame, *, minimum: int = MIN_REQUESTS) -> Requests:
    """The requests of ``df`` that were scheduled, produced a first token and (when the records
    carry a status) ended ok (``ok_index``); at least ``minimum`` of them."""
    idx = ok_index(df)
    if len(idx) < minimum:
        raise AnalysisError(f"need at least {minimum} completed requests, got {len(idx)}")
    rows: Any = slice(None) if len(idx) == len(df) else idx  # every row: no copy to take
    prompt = _col(df, "prompt_tokens")[rows]
    cached = np.nan_to_num(_col(df, "cached_prompt_tokens")[rows])
    codes, replicas = _replicas(df, idx)
    return Requests(
        arrival=_col(df, "arrival_s")[rows],
        scheduled=_col(df, "scheduled_s")[rows],
        first=_col(df, "first_token_s")[rows],
        finished=_col(df, "finished_s")[rows],
        uncached=prompt - cached,
        out_tokens=_col(df, "output_tokens")[rows],
        stall=np.nan_to_num(_col(df, "preemption_stall_s")[rows]),
        preempted=np.nan_to_num(_col(df, "preemptions")[rows]) > 0,
        codes=codes,
        replicas=replicas,
    )


def decompose(req: Requests, target: Target) -> tuple[F64, dict[str, F64]]:
    """The ``target`` latency of each request and its components, which add up to it."""
    queue = req.scheduled - req.arrival
    prefill = req.first - req.scheduled
    decode = req.finished - req.first
    stall = req.stall
    stall_decode = np.minimum(stall, decode) if target == "e2e" else np.zeros_like(stall)
    stall_prefill = np.minimum(stall - stall_decode, prefill)
    if target == "e2e":
        return req.finished - req.arrival, {
            "queue": queue,
            "prefill": prefill - stall_prefill,
            "decode": decode - stall_decode,
            "preemption_stall": stall_prefill + stall_decode,
        }
    return req.first - req.arrival, {
        "queue": queue,
        "prefill": prefill - stall_prefill,
        "preemption_stall": stall_prefill,
    }
