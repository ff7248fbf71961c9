"""The fleet whose request records the records benchmark reads: its shape (hosts, replicas, two
models, one planted slow replica of each) and each replica's records as numpy columns.

Shapes follow ``fleetwatch.scenarios.synthetic_fleet`` (Poisson arrivals, log-normal prompt and
output lengths, prefill proportional to uncached prompt tokens, a per-token decode time,
exponential queueing), drawn column-wise for millions of records, with what a vLLM fleet adds:
a queueing burst now and then, errors and client aborts (about 0.5 % in all; half the errors
end before the first token, so their ``scheduled_s`` and ``first_token_s`` are null, as the
plugin writes them), preemptions, and the fields the plugin leaves unset left unset. A model's
``speed`` multiplies its prefill and decode times; a planted replica's are 1.5x its model's.

Every draw of replica ``i`` comes from ``numpy.random.default_rng([seed, i])``: a replica's
records do not depend on which process draws them, nor on the other replicas.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "LARGE_MODEL",
    "SMALL_MODEL",
    "Columns",
    "FleetShape",
    "ModelShape",
    "Replica",
    "replica_columns",
]

SMALL_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LARGE_MODEL = "meta-llama/Llama-3.1-70B-Instruct"

Columns = dict[str, np.ndarray[Any, Any]]
"""One replica's records, one array per stored field (``fleetwatch.core.records.FIELDS`` names);
float columns hold NaN where the record has null; rows in finish order."""

_LEAD_S = 120.0
"""Arrivals are drawn from this long before the slice: requests in flight when it begins."""


@dataclass(frozen=True, slots=True)
class ModelShape:
    """One served model: its name, how many replicas serve it, its service-time multiplier."""

    name: str
    replicas: int
    speed: float


@dataclass(frozen=True, slots=True)
class Replica:
    """One vLLM process: its record ``replica`` name, host folder, pid (the sink's file prefix
    is ``vllm-<pid>``), model, and the multiplier of its service times."""

    index: int
    name: str
    host: str
    pid: int
    model: str
    speed: float
    planted: bool


@dataclass(frozen=True, slots=True)
class FleetShape:
    """``hosts × per_host`` replicas, ``models`` in order (the first model's replicas first),
    each taking ``rate_per_s`` requests a second; the plugin seals a file every ``seal_s``."""

    hosts: int = 25
    per_host: int = 8
    models: tuple[ModelShape, ...] = (
        ModelShape(SMALL_MODEL, 150, 1.0),
        ModelShape(LARGE_MODEL, 50, 3.0),
    )
    rate_per_s: float = 10.0
    seal_s: float = 10.0
    slowdown: float = 1.5
    seed: int = 0

    def __post_init__(self) -> None:
        if sum(m.replicas for m in self.models) != self.replicas:
            raise ValueError("the models' replicas must add up to hosts × per_host")

    @property
    def replicas(self) -> int:
        return self.hosts * self.per_host

    def planted_index(self, model: ModelShape) -> int:
        """The planted slow replica of ``model``: a third of the way into its replicas."""
        first = 0
        for m in self.models:
            if m == model:
                return first + m.replicas // 3
            first += m.replicas
        raise ValueError(f"no model {model.name!r} in the fleet")

    def replica(self, i: int) -> Replica:
        first = 0
        for m in self.models:
            if i < first + m.replicas:
                planted = i == self.planted_index(m)
                host, slot = divmod(i, self.per_host)
                return Replica(
                    index=i,
                    name=f"host-{host:02d}-gpu{slot}",
                    host=f"host-{host:02d}",
                    pid=self._pids()[i],
                    model=m.name,
                    speed=m.speed * (self.slowdown if planted else 1.0),
                    planted=planted,
                )
            first += m.replicas
        raise IndexError(f"replica {i} of {self.replicas}")

    def planted(self) -> list[str]:
        """The planted slow replicas' names, one per model."""
        return [self.replica(self.planted_index(m)).name for m in self.models]

    def _pids(self) -> list[int]:
        rng = np.random.default_rng([self.seed, 1 << 20])
        pids = rng.choice(np.arange(1000, 4_000_000), self.replicas, replace=False)
        return [int(p) for p in pids]


def replica_columns(shape: FleetShape, i: int, start_s: float, end_s: float) -> Columns:
    """Replica ``i``'s records that finished in ``[start_s, end_s)``, in finish order."""
    rep = shape.replica(i)
    rng = np.random.default_rng([shape.seed, i])
    span = end_s - start_s + _LEAD_S
    n = int(rng.poisson(shape.rate_per_s * span))
    arrival = start_s - _LEAD_S + np.sort(rng.uniform(0.0, span, n))
    prompt = np.clip(np.round(rng.lognormal(np.log(600), 0.8, n)), 16, 16_000).astype(np.int64)
    cached_share = np.where(rng.random(n) < 0.5, rng.uniform(0.0, 0.8, n), 0.0)
    cached = np.floor(prompt * cached_share).astype(np.int64)
    out = np.clip(np.round(rng.lognormal(np.log(180), 0.7, n)), 1, 4096).astype(np.int64)
    # queueing: mostly short, and now and then a burst behind a long prefill or a full batch
    queue = rng.exponential(0.02 * rep.speed, n)
    burst = rng.random(n) < 0.03
    queue[burst] += rng.exponential(0.8, int(burst.sum()))
    prefill = (0.005 + (prompt - cached) * 1.2e-4) * rep.speed * rng.lognormal(0.0, 0.2, n)
    tpot = 0.016 * rep.speed * rng.lognormal(0.0, 0.12, n) * (1.0 + 0.15 * rng.random(n))
    preemptions = np.where(rng.random(n) < 0.005, 1, 0).astype(np.int64)
    stall = np.where(preemptions > 0, rng.exponential(0.5, n), 0.0)

    u = rng.random(n)
    error = u < 0.004
    aborted = (u >= 0.004) & (u < 0.005)
    no_token = error & (rng.random(n) < 0.5)
    cut = error | aborted
    out = np.where(cut, np.ceil(out * rng.uniform(0.0, 1.0, n)).astype(np.int64), out)
    out[no_token] = 0
    out = np.maximum(out, np.where(no_token, 0, 1))

    scheduled = arrival + queue
    first = scheduled + prefill
    finished = first + tpot * np.maximum(out - 1, 0) + stall
    finished[no_token] = scheduled[no_token] + rng.uniform(0.001, 0.05, int(no_token.sum()))
    scheduled[no_token] = np.nan
    first[no_token] = np.nan

    status = np.where(error, "error", np.where(aborted, "aborted", "ok"))
    finish_reason = np.where(
        error, "error", np.where(aborted, "abort", np.where(rng.random(n) < 0.15, "length", "stop"))
    )
    error_type = np.full(n, None, dtype=object)
    error_type[error] = "engine_error"
    ids = rng.integers(0, 1 << 64, (n, 2), dtype=np.uint64)

    keep = np.nonzero((finished >= start_s) & (finished < end_s))[0]
    keep = keep[np.argsort(finished[keep], kind="stable")]
    return {
        "request_id": ids[keep],
        "arrival_s": arrival[keep],
        "scheduled_s": scheduled[keep],
        "first_token_s": first[keep],
        "finished_s": finished[keep],
        "prompt_tokens": prompt[keep],
        "output_tokens": out[keep],
        "cached_prompt_tokens": cached[keep],
        "preemptions": preemptions[keep],
        "status": status[keep],
        "finish_reason": finish_reason[keep],
        "error_type": error_type[keep],
    }
