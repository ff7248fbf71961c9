"""The completed requests as arrays, and each request's latency split into its components.

``ok_requests`` keeps the completed requests of a records frame as arrays; ``decompose`` splits the
target latency into queue, prefill, decode and preemption stall (they add up exactly: the stall is
taken out of decode first, then prefill).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    "arrow_requests",
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
    codes, replicas = _replicas(df, idx)
    return _built(lambda name: _col(df, name)[rows], codes, replicas)


def _built(col: Callable[[str], F64], codes: np.ndarray[Any, Any], replicas: list[str]) -> Requests:
    """``Requests`` of the columns ``col`` gives (float64, NULL as NaN) and the replicas."""
    prompt = col("prompt_tokens")
    cached = np.nan_to_num(col("cached_prompt_tokens"))
    return Requests(
        arrival=col("arrival_s"),
        scheduled=col("scheduled_s"),
        first=col("first_token_s"),
        finished=col("finished_s"),
        uncached=prompt - cached,
        out_tokens=col("output_tokens"),
        stall=np.nan_to_num(col("preemption_stall_s")),
        preempted=np.nan_to_num(col("preemptions")) > 0,
        codes=codes,
        replicas=replicas,
    )


def arrow_requests(table: Any, replicas: Sequence[str] = ()) -> Requests:
    """``ok_requests`` of an Arrow table whose rows are all completed requests (a query engine
    kept only those): the columns' arrays as they are, with no frame between. Its replica is
    its ``replica`` column (dictionary-encoded), else the one of ``replicas``."""
    n = table.num_rows
    names = set(table.column_names)

    def col(name: str) -> F64:
        if name not in names:
            return np.zeros(n)
        out: F64 = table.column(name).to_numpy().astype(np.float64, copy=False)
        return out

    if "replica" in names:
        column = table.column("replica").combine_chunks()
        codes, seen = pd.factorize(column.indices.to_numpy(zero_copy_only=False))
        values = column.dictionary.to_pylist()
        return _built(col, codes, [str(values[i]) for i in seen])
    if len(replicas) != 1:
        raise AnalysisError("requests of one replica need its name")
    return _built(col, np.zeros(n, dtype=np.int64), [str(replicas[0])])


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
