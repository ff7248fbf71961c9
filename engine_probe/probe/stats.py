"""Summaries of a probe run: percentiles, throughput, goodput against targets, capacity.

Goodput follows DistServe (OSDI'24): requests per second that finished ok and met both the TTFT and
the TPOT target; attainment is that count over all requests sent (failures count against it).
TTFT for the targets is measured from the scheduled send by default, which is what a user waiting
on an overloaded service feels. Capacity is the highest tested rate (or concurrency) at which at
least 90% of requests met both targets, with every lower tested load also passing, so one lucky
run above a failing one does not count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fleetwatch.core.stats import percentiles
from fleetwatch.engine_probe.probe.measure import RequestResult

__all__ = [
    "PERCENTILES",
    "Distribution",
    "RunSummary",
    "SLOTargets",
    "capacity",
    "distribution",
    "summarise",
]

PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0, 99.9)


@dataclass(frozen=True, slots=True)
class Distribution:
    """Count, mean and percentiles (``fleetwatch.core.stats``: linear interpolation) of a sample, in its
    unit; NaN when empty."""

    n: int
    mean: float
    p50: float
    p90: float
    p99: float
    p999: float
    max: float


def distribution(values: Iterable[float]) -> Distribution:
    arr = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if arr.size == 0:
        nan = float("nan")
        return Distribution(0, nan, nan, nan, nan, nan, nan)
    p50, p90, p99, p999 = percentiles(arr, PERCENTILES)
    return Distribution(int(arr.size), float(arr.mean()), p50, p90, p99, p999, float(arr.max()))


@dataclass(frozen=True, slots=True)
class SLOTargets:
    """Per-request targets in seconds; ``from_schedule`` measures TTFT from the scheduled send."""

    ttft_s: float = 1.0
    tpot_s: float = 0.1
    from_schedule: bool = True

    def met(self, r: RequestResult) -> bool:
        if not r.ok:
            return False
        ttft = r.ttft_sched_s if self.from_schedule else r.ttft_s
        if ttft is None or ttft > self.ttft_s:
            return False
        tpot = r.tpot_s
        return tpot is None or tpot <= self.tpot_s


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One load level of a probe run. Times in seconds, throughputs per second."""

    label: str
    mode: str
    rate: float | None
    concurrency: int | None
    requests: int
    ok: int
    errors: int
    rejected: int
    duration_s: float
    request_throughput: float
    output_tokens_per_s: float
    ttft: Distribution
    ttft_sched: Distribution
    tpot: Distribution
    itl: Distribution
    e2e: Distribution
    e2e_sched: Distribution
    send_lag: Distribution
    """The probe's own timing error: actual send minus scheduled send."""
    goodput_rps: float
    attainment: float
    """Fraction of requests that met both targets (0..1)."""
    targets: SLOTargets
    bound_fraction: float | None = None
    """Output tokens/s over the bandwidth bound's tokens/s, where the engine's size is known."""

    @property
    def load(self) -> float:
        return float(self.rate if self.rate is not None else (self.concurrency or 0))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def flat(self) -> dict[str, Any]:
        """One CSV row: distributions flattened as ``ttft_p99`` etc."""
        out: dict[str, Any] = {}
        for key, value in self.to_dict().items():
            if isinstance(value, dict):
                for sub, v in value.items():
                    out[f"{key}_{sub}"] = v
            else:
                out[key] = value
        return out


def summarise(
    results: Sequence[RequestResult],
    *,
    label: str,
    mode: str,
    rate: float | None = None,
    concurrency: int | None = None,
    targets: SLOTargets | None = None,
) -> RunSummary:
    """Reduce one load level's results to a summary (``bound_fraction`` is left to the caller,
    who knows the engine's size)."""
    targets = targets or SLOTargets()
    ok = [r for r in results if r.ok]
    if results:
        start = min(r.scheduled_s for r in results)
        end = max(r.finished_s for r in results)
        duration = max(end - start, 1e-9)
    else:
        duration = 0.0
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    out_tokens = sum(r.output_tokens for r in ok)
    met = sum(1 for r in results if targets.met(r))
    itl: list[float] = []
    for r in ok:
        itl.extend(r.itl_s())
    return RunSummary(
        label=label,
        mode=mode,
        rate=rate,
        concurrency=concurrency,
        requests=len(results),
        ok=len(ok),
        errors=sum(1 for r in results if r.status == "error" or r.status == "aborted"),
        rejected=sum(1 for r in results if r.status == "rejected"),
        duration_s=duration,
        request_throughput=per_s(len(ok)),
        output_tokens_per_s=per_s(out_tokens),
        ttft=distribution(r.ttft_s for r in ok if r.ttft_s is not None),
        ttft_sched=distribution(r.ttft_sched_s for r in ok if r.ttft_sched_s is not None),
        tpot=distribution(r.tpot_s for r in ok if r.tpot_s is not None),
        itl=distribution(itl),
        e2e=distribution(r.e2e_s for r in ok),
        e2e_sched=distribution(r.e2e_sched_s for r in ok),
        send_lag=distribution(r.send_lag_s for r in results),
        goodput_rps=per_s(met),
        attainment=met / len(results) if results else 0.0,
        targets=targets,
    )


def capacity(summaries: Sequence[RunSummary], attainment: float = 0.9) -> float | None:
    """Highest tested load with ``attainment`` met there and at every lower load; None if none."""
    best: float | None = None
    for s in sorted(summaries, key=lambda s: s.load):
        if s.attainment < attainment:
            break
        best = s.load
    return best
