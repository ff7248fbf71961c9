"""Burst simulator: one seeded burst against a fleet that autoscales on GPU utilisation, on
queue depth, or on queue depth with a warm pool.

Pure: ``simulate_scaling(config)`` is a function of its config (seed included) and touches no
clock, file or global random state. The model, in ticks of ``tick_s``:

- requests arrive as a Poisson process at ``rate_per_s``, and at ``peak_rate_per_s`` from
  ``burst_start_s`` for ``burst_s`` seconds, until ``duration_s``; every scaler sees the same
  arrivals and service times (drawn once from the seed);
- a replica serves ``per_replica_rate × service_s`` requests at once (continuous batching), each
  for ``service_s`` on average (uniform ±50 %); requests wait in one FIFO queue and go to the
  least loaded ready replica; TTFT = wait + ``prefill_s``; a request meets the SLO when its TTFT
  is at most ``ttft_s`` (one still waiting when the queue is given up counts as a miss);
- a new replica serves ``cold_start_s`` after it is asked for; every replica costs from the
  moment it is asked for until it is released (replica-seconds);
- every ``sync_s`` the autoscaler computes a recommendation as the Kubernetes HPA does
  (``ceil(current × usage / target)``, no change within ``tolerance``), between ``min`` and
  ``max_replicas``, scales up at once and down to the highest recommendation of the last
  ``cooldown_s``. GPU utilisation is what DCGM reports: the share of time a kernel runs, which
  is 1 whenever a replica has any request in flight, saturated or not; queue depth is the
  waiting requests over ``queue_target`` per replica.

Scalers: ``gpu-util`` (target ``util_target``, floor ``replicas``), ``queue`` (floor
``replicas``) and ``queue+warm`` (floor ``replicas + warm_pool``: the pool is held loaded and
routed to). Reported per scaler: SLO attainment, p99 TTFT, replica-seconds, peak replicas and
the replicas held when the queue has drained.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

from fleetwatch.fleet.errors import AnalysisError

__all__ = [
    "ScaleConfig",
    "ScaleResult",
    "ScaleRow",
    "Scaler",
    "simulate_scaler",
    "simulate_scaling",
]


class Scaler(StrEnum):
    GPU_UTIL = "gpu-util"
    QUEUE = "queue"
    QUEUE_WARM = "queue+warm"


@dataclass(frozen=True, slots=True)
class ScaleConfig:
    """Scenario and scaler settings; rates per second, durations in seconds."""

    rate_per_s: float = 10.0
    peak_rate_per_s: float = 30.0
    burst_start_s: float = 60.0
    burst_s: float = 120.0
    duration_s: float = 480.0
    per_replica_rate: float = 4.0
    service_s: float = 4.0
    prefill_s: float = 0.2
    ttft_s: float = 1.0
    cold_start_s: float = 120.0
    replicas: int = 4
    warm_pool: int = 6
    max_replicas: int = 16
    queue_target: int = 1
    util_target: float = 0.9
    tolerance: float = 0.1
    sync_s: float = 15.0
    cooldown_s: float = 240.0
    tick_s: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        positive = (
            *("rate_per_s", "duration_s", "per_replica_rate", "service_s", "ttft_s"),
            *("util_target", "sync_s", "tick_s"),
        )
        for name in positive:
            if not getattr(self, name) > 0.0:
                raise AnalysisError(f"simulation: {name} must be > 0, got {getattr(self, name)}")
        for name in ("burst_start_s", "burst_s", "prefill_s", "cold_start_s", "cooldown_s"):
            if getattr(self, name) < 0.0:
                raise AnalysisError(f"simulation: {name} must be >= 0, got {getattr(self, name)}")
        if self.peak_rate_per_s < self.rate_per_s:
            raise AnalysisError("simulation: peak_rate_per_s must be at least rate_per_s")
        if self.replicas < 1 or self.queue_target < 1 or self.warm_pool < 0:
            raise AnalysisError("simulation: replicas and queue_target >= 1, warm_pool >= 0")
        if self.max_replicas < self.replicas + self.warm_pool:
            raise AnalysisError("simulation: max_replicas must be >= replicas + warm_pool")
        if self.tick_s > min(self.sync_s, self.service_s):
            raise AnalysisError("simulation: tick_s must not exceed sync_s or service_s")

    @property
    def slots(self) -> int:
        return max(1, round(self.per_replica_rate * self.service_s))


@dataclass(frozen=True, slots=True)
class ScaleRow:
    scaler: Scaler
    requests: int
    met: int
    ttft_p99_s: float
    replica_seconds: float
    peak_replicas: int
    final_replicas: int

    @property
    def attainment(self) -> float:
        return self.met / self.requests if self.requests else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "scaler": self.scaler.value,
            "requests": self.requests,
            "attainment": round(self.attainment, 4),
            "ttft_p99_s": round(self.ttft_p99_s, 3),
            "replica_seconds": round(self.replica_seconds, 1),
            "peak_replicas": self.peak_replicas,
            "final_replicas": self.final_replicas,
        }


@dataclass(frozen=True, slots=True)
class ScaleResult:
    config: ScaleConfig
    rows: tuple[ScaleRow, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, object]:
        cfg = {name: getattr(self.config, name) for name in self.config.__dataclass_fields__}
        return {"config": cfg, "rows": [row.as_dict() for row in self.rows]}

    def render(self) -> str:
        c = self.config
        head = (
            f"burst {c.rate_per_s:g}/s -> {c.peak_rate_per_s:g}/s for {c.burst_s:g} s at "
            f"{c.burst_start_s:g} s; cold start {c.cold_start_s:g} s; SLO TTFT <= {c.ttft_s:g} s"
        )
        lines = [
            head,
            f"{'scaler':<12}{'SLO met':>9}{'TTFT p99':>10}{'replica-s':>11}{'peak':>6}{'end':>5}",
        ]
        for r in self.rows:
            lines.append(
                f"{r.scaler.value:<12}{r.attainment:>9.1%}{r.ttft_p99_s:>9.1f}s"
                f"{r.replica_seconds:>11.0f}{r.peak_replicas:>6}{r.final_replicas:>5}"
            )
        return "\n".join(lines)


def _arrivals(cfg: ScaleConfig) -> list[tuple[float, float]]:
    """(arrival time, service time) of every request, from the seed alone."""
    rng = random.Random(f"{cfg.seed}:arrivals")
    out: list[tuple[float, float]] = []
    t = 0.0
    burst_end = cfg.burst_start_s + cfg.burst_s
    while True:
        rate = cfg.peak_rate_per_s if cfg.burst_start_s <= t < burst_end else cfg.rate_per_s
        t += rng.expovariate(rate)
        if t >= cfg.duration_s:
            return out
        out.append((t, cfg.service_s * rng.uniform(0.5, 1.5)))


class _Replica:
    __slots__ = ("busy_ticks", "draining", "in_flight", "ready_at")

    def __init__(self, ready_at: float) -> None:
        self.ready_at = ready_at
        self.in_flight = 0
        self.busy_ticks = 0
        self.draining = False


def simulate_scaler(config: ScaleConfig, scaler: Scaler) -> ScaleRow:
    """Run one scaler; deterministic for a given config."""
    cfg = config
    tick, slots = cfg.tick_s, cfg.slots
    floor = cfg.replicas + (cfg.warm_pool if scaler is Scaler.QUEUE_WARM else 0)
    fleet = [_Replica(0.0) for _ in range(floor)]
    pending = deque(_arrivals(cfg))
    queue: deque[tuple[float, float]] = deque()
    done: list[tuple[float, int, _Replica]] = []  # (finish time, tie-break, replica)
    ttfts: list[float] = []
    recommendations: deque[tuple[float, int]] = deque()
    replica_seconds = 0.0
    peak = len(fleet)
    sync_every = max(1, round(cfg.sync_s / tick))
    give_up = cfg.duration_s + 4 * (cfg.cold_start_s + cfg.cooldown_s) + 600.0
    seq = 0
    i = 0
    while pending or queue or done:
        now = i * tick
        if now > give_up:
            break
        while done and done[0][0] <= now:
            done_rep = heapq.heappop(done)[2]
            done_rep.in_flight -= 1
        fleet = [r for r in fleet if not (r.draining and r.in_flight == 0)]
        while pending and pending[0][0] <= now:
            queue.append(pending.popleft())
        ready = [r for r in fleet if r.ready_at <= now and not r.draining]
        while queue and ready:
            rep = min(ready, key=lambda r: r.in_flight)
            if rep.in_flight >= slots:
                break
            arrived, service = queue.popleft()
            ttfts.append(max(0.0, now - arrived) + cfg.prefill_s)
            rep.in_flight += 1
            seq += 1
            heapq.heappush(done, (now + service, seq, rep))
        for r in ready:
            r.busy_ticks += r.in_flight > 0
        replica_seconds += len(fleet) * tick
        i += 1
        if i % sync_every:
            continue
        active = [r for r in fleet if not r.draining]
        current = len(active)
        if scaler is Scaler.GPU_UTIL:
            usage = sum(r.busy_ticks for r in ready) / (sync_every * len(ready)) if ready else 0.0
            ratio = usage / cfg.util_target
        else:
            ratio = len(queue) / (cfg.queue_target * current)
        for r in fleet:
            r.busy_ticks = 0
        want = current if abs(ratio - 1.0) <= cfg.tolerance else math.ceil(current * ratio)
        want = min(cfg.max_replicas, max(floor, want))
        recommendations.append((now, want))
        while recommendations[0][0] < now - cfg.cooldown_s:
            recommendations.popleft()
        target = want if want > current else max(w for _, w in recommendations)
        if target > current:
            fleet.extend(_Replica(now + cfg.cold_start_s) for _ in range(target - current))
        elif target < current:
            # release replicas still starting first, then the least loaded
            for r in sorted(active, key=lambda r: (r.ready_at <= now, r.in_flight))[
                : current - target
            ]:
                r.draining = True
            fleet = [r for r in fleet if not (r.draining and r.in_flight == 0)]
        peak = max(peak, len([r for r in fleet if not r.draining]))
    requests = len(ttfts) + len(queue) + len(pending)
    met = sum(1 for t in ttfts if t <= cfg.ttft_s + 1e-9)
    return ScaleRow(
        scaler=scaler,
        requests=requests,
        met=met,
        ttft_p99_s=_p99(ttfts, requests),
        replica_seconds=replica_seconds,
        peak_replicas=peak,
        final_replicas=len([r for r in fleet if not r.draining]),
    )


def _p99(ttfts: list[float], requests: int) -> float:
    """p99 TTFT over every request, those never served counted as infinitely late."""
    if not requests:
        return math.nan
    ordered = sorted(ttfts) + [math.inf] * (requests - len(ttfts))
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


def simulate_scaling(config: ScaleConfig | None = None) -> ScaleResult:
    """Every scaler on the same seeded burst."""
    cfg = config or ScaleConfig()
    return ScaleResult(cfg, tuple(simulate_scaler(cfg, s) for s in Scaler))
