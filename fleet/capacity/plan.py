"""Capacity plan from a probe run's capacity curve: replicas, warm pool, scaling delays.

Pure functions of their inputs. The curve is the probe's ``--json`` output (``fleetwatch probe
run --json``): one entry per load level with the request rate (open loop) or concurrency (closed
loop), the achieved request throughput and the TTFT/TPOT distributions. A level *holds the SLO*
when its TTFT and TPOT at ``quantile`` (p50, p90, p99, p999) are within the targets; the
per-replica sustainable rate is the request rate of the highest level that holds it with every
lower level holding it too (one lucky level above a failing one does not count).

From there, with ``headroom`` h, a replica is planned at ``usable = sustainable × (1 - h)``:

- replicas = ceil(rate / usable), at least one;
- burst excess = peak_rate - replicas × usable, the rate the steady fleet cannot take;
- warm pool: by Little's law (L = λW) the requests that arrive above capacity while a new
  replica cold-starts are ``excess × min(cold_start, burst_s)`` (``warm_pool_requests``);
  serving them as they arrive takes ``ceil(excess / usable)`` replicas already loaded
  (``warm_pool_replicas``);
- scale-up delay: the autoscaler's sync period plus the cold start (what a burst waits for
  without a warm pool), so scale-up acts at once (no stabilisation window);
- cooldown (scale-down stabilisation): ``max(2 × cold_start, burst_s, 60 s)``; releasing a
  replica that is wanted back within two cold starts costs more than keeping it, and a burst
  should not be scaled away while it lasts;
- queue target per replica: the waiting requests one replica drains in half the TTFT budget
  (``usable × ttft / 2``, at least one), so a queue at target still leaves half the budget for
  prefill.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from fleetwatch.fleet.errors import AnalysisError

__all__ = [
    "QUANTILES",
    "CapacityPlan",
    "CurvePoint",
    "PlanInputs",
    "curve_from_probe",
    "plan_capacity",
    "sustainable_rate",
]

QUANTILES = ("p50", "p90", "p99", "p999")
SYNC_PERIOD_S = 15.0


@dataclass(frozen=True, slots=True)
class CurvePoint:
    """One load level: offered ``load`` (req/s or concurrency), achieved ``rate_per_s``, and
    TTFT/TPOT in seconds at the chosen quantile (NaN when the level had no successes)."""

    load: float
    rate_per_s: float
    ttft_s: float
    tpot_s: float

    def holds(self, ttft_s: float, tpot_s: float) -> bool:
        return self.ttft_s <= ttft_s and self.tpot_s <= tpot_s


@dataclass(frozen=True, slots=True)
class PlanInputs:
    """Target traffic and SLO; rates in requests per second, times in seconds."""

    rate_per_s: float
    peak_rate_per_s: float
    burst_s: float
    ttft_s: float
    tpot_s: float
    cold_start_s: float
    headroom: float = 0.2
    sync_period_s: float = SYNC_PERIOD_S

    def __post_init__(self) -> None:
        for name in ("rate_per_s", "ttft_s", "tpot_s", "sync_period_s"):
            if not getattr(self, name) > 0.0:
                raise AnalysisError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("burst_s", "cold_start_s"):
            if not getattr(self, name) >= 0.0:
                raise AnalysisError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.peak_rate_per_s < self.rate_per_s:
            raise AnalysisError(
                f"peak rate ({self.peak_rate_per_s:g}/s) must be at least the rate "
                f"({self.rate_per_s:g}/s)"
            )
        if not 0.0 <= self.headroom < 1.0:
            raise AnalysisError(f"headroom must be in [0, 1), got {self.headroom}")


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    inputs: PlanInputs
    sustainable_per_replica: float
    usable_per_replica: float
    replicas: int
    peak_replicas: int
    burst_excess_per_s: float
    warm_pool_requests: float
    warm_pool_replicas: int
    scale_up_delay_s: float
    cooldown_s: float
    queue_target_per_replica: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def render(self) -> str:
        i = self.inputs
        return "\n".join(
            [
                f"SLO: TTFT <= {i.ttft_s:g} s, TPOT <= {i.tpot_s:g} s; "
                f"traffic {i.rate_per_s:g}/s, bursts to {i.peak_rate_per_s:g}/s for {i.burst_s:g} s",
                f"per replica: sustainable {self.sustainable_per_replica:.3g}/s, "
                f"planned at {self.usable_per_replica:.3g}/s ({i.headroom:.0%} headroom)",
                f"replicas: {self.replicas} steady, {self.peak_replicas} at the peak",
                f"warm pool: {self.warm_pool_replicas} replicas (burst excess "
                f"{self.burst_excess_per_s:.3g}/s x cold start {i.cold_start_s:g} s = "
                f"{self.warm_pool_requests:.0f} requests)",
                f"scale-up delay without a warm pool: {self.scale_up_delay_s:g} s "
                f"(sync {i.sync_period_s:g} s + cold start); cooldown {self.cooldown_s:g} s",
                f"autoscale on queue depth: {self.queue_target_per_replica} waiting per replica",
            ]
        )


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


def curve_from_probe(
    doc: Mapping[str, Any], quantile: str = "p99", where: str = "probe"
) -> list[CurvePoint]:
    """The capacity curve of a probe ``--json`` document, in order of load.

    TTFT is the one measured from the scheduled send where the probe planned it so (what a
    user behind a queue feels), else from the actual send.
    """
    if quantile not in QUANTILES:
        raise AnalysisError(f"quantile must be one of {', '.join(QUANTILES)}, got {quantile!r}")
    levels = doc.get("levels") if isinstance(doc, Mapping) else None
    if not isinstance(levels, list) or not levels:
        raise AnalysisError(
            f"{where}: no 'levels' list; expected `fleetwatch probe run --json` output"
        )
    plan: Mapping[str, Any] = doc.get("plan") or {}
    targets = plan.get("targets") if isinstance(plan, Mapping) else None
    if not isinstance(targets, Mapping):
        targets = {}
    from_schedule = bool(targets.get("ttft_from_schedule", True))
    points = []
    for n, level in enumerate(levels):
        if not isinstance(level, Mapping):
            raise AnalysisError(f"{where}: level {n} is not an object")
        rate = _number(level.get("rate"))
        load = rate if math.isfinite(rate) else _number(level.get("concurrency"))
        achieved = _number(level.get("request_throughput"))
        if not math.isfinite(load) or not math.isfinite(achieved):
            raise AnalysisError(f"{where}: level {n} has no rate/concurrency or request_throughput")
        ttft = level.get("ttft_sched" if from_schedule else "ttft") or level.get("ttft")
        tpot = level.get("tpot")
        if not isinstance(ttft, Mapping) or not isinstance(tpot, Mapping):
            raise AnalysisError(f"{where}: level {n} has no ttft/tpot distributions")
        t, p = _number(ttft.get(quantile)), _number(tpot.get(quantile))
        if not math.isfinite(p) and int(_number(tpot.get("n")) or 0) == 0:
            p = 0.0  # one-token answers have no TPOT; nothing to violate
        points.append(
            CurvePoint(
                load=load,
                rate_per_s=achieved if not math.isfinite(rate) else rate,
                ttft_s=t if math.isfinite(t) else math.inf,
                tpot_s=p if math.isfinite(p) else math.inf,
            )
        )
    return sorted(points, key=lambda c: c.load)


def sustainable_rate(curve: Sequence[CurvePoint], ttft_s: float, tpot_s: float) -> float | None:
    """Request rate of the highest level holding the SLO with every lower level holding it."""
    best: float | None = None
    for point in sorted(curve, key=lambda c: c.load):
        if not point.holds(ttft_s, tpot_s):
            break
        best = point.rate_per_s
    return best


def plan_capacity(curve: Sequence[CurvePoint], inputs: PlanInputs) -> CapacityPlan:
    """The plan for ``inputs`` on replicas measured by ``curve``."""
    sustainable = sustainable_rate(curve, inputs.ttft_s, inputs.tpot_s)
    if sustainable is None or sustainable <= 0.0:
        lowest = min(curve, key=lambda c: c.load) if curve else None
        seen = (
            f" (lowest level {lowest.load:g}: TTFT {lowest.ttft_s:.3g} s, TPOT {lowest.tpot_s:.3g} s)"
            if lowest
            else ""
        )
        raise AnalysisError(
            f"no probed load holds TTFT <= {inputs.ttft_s:g} s and TPOT <= {inputs.tpot_s:g} s"
            f"{seen}; probe lower loads or relax the targets"
        )
    usable = sustainable * (1.0 - inputs.headroom)
    replicas = max(1, math.ceil(inputs.rate_per_s / usable - 1e-9))
    peak = max(replicas, math.ceil(inputs.peak_rate_per_s / usable - 1e-9))
    excess = max(0.0, inputs.peak_rate_per_s - replicas * usable)
    window = min(inputs.cold_start_s, inputs.burst_s) if inputs.burst_s > 0 else 0.0
    return CapacityPlan(
        inputs=inputs,
        sustainable_per_replica=sustainable,
        usable_per_replica=usable,
        replicas=replicas,
        peak_replicas=peak,
        burst_excess_per_s=excess,
        warm_pool_requests=excess * window,
        warm_pool_replicas=math.ceil(excess / usable - 1e-9) if window > 0 else 0,
        scale_up_delay_s=inputs.sync_period_s + inputs.cold_start_s,
        cooldown_s=float(max(2.0 * inputs.cold_start_s, inputs.burst_s, 60.0)),
        queue_target_per_replica=max(1, math.floor(usable * inputs.ttft_s / 2.0)),
    )
