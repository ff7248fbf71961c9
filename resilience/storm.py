"""Retry-storm simulator: many clients, a backend that fails for a while, a simulated clock.

Pure: ``simulate_storm(config)`` is a function of its config (seed included) and touches no clock,
file or global random state. The backend model, in ticks of ``tick_s``:

- each client sends one new request every ``interval_s`` (random phase), until ``duration_s``;
- a served attempt holds one of the backend's slots for ``latency_s`` and then succeeds; the
  backend has ``capacity_ratio ×`` the slots the base load needs, and rejects at once when full;
- during the outage (``outage_start_s`` for ``outage_s`` seconds) every attempt fails at once, and
  the attempts in flight when it starts all fail together (that shared moment is what synchronises
  clients without jitter);
- a failed attempt is retried after the jitter backoff while attempts remain (and, with the budget,
  while the shared RetryBudget allows).

Reported per strategy: peak arrivals per second (attempts in the busiest ``peak_window_s``, as a
rate; short windows show the synchronised waves that one-second averages hide), load amplification
(attempts / requests), time to drain (seconds after the outage ends until the backend stops
rejecting and arrivals are back within 10% of the base load), and requests that gave up.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from fleetwatch.resilience.errors import ResilienceConfigError
from fleetwatch.resilience.retry.budget import RetryBudget
from fleetwatch.resilience.retry.jitter import Jitter, backoff_s

__all__ = ["StormConfig", "StormResult", "StormRow", "simulate", "simulate_storm"]


@dataclass(frozen=True, slots=True)
class StormConfig:
    """Scenario and retry settings; durations in seconds."""

    clients: int = 1000
    interval_s: float = 1.0
    latency_s: float = 2.0
    capacity_ratio: float = 1.25
    outage_start_s: float = 10.0
    outage_s: float = 10.0
    duration_s: float = 60.0
    max_attempts: int = 5
    base_s: float = 0.5
    cap_s: float = 8.0
    budget_ratio: float = 0.1
    budget_min_retries_per_s: float = 10.0
    budget_ttl_s: float = 10.0
    tick_s: float = 0.01
    peak_window_s: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        where = "storm config"
        positive = (
            "interval_s",
            "latency_s",
            "capacity_ratio",
            "duration_s",
            "base_s",
            "cap_s",
            "budget_ratio",
            "budget_ttl_s",
            "tick_s",
        )
        for name in positive:
            if not getattr(self, name) > 0.0:
                raise ResilienceConfigError(
                    f"{where}: {name} must be > 0, got {getattr(self, name)}"
                )
        if self.clients < 1:
            raise ResilienceConfigError(f"{where}: clients must be >= 1, got {self.clients}")
        if self.max_attempts < 1:
            raise ResilienceConfigError(
                f"{where}: max_attempts must be >= 1, got {self.max_attempts}"
            )
        if self.outage_s < 0.0 or self.outage_start_s < 0.0:
            raise ResilienceConfigError(f"{where}: outage_s and outage_start_s must be >= 0")
        if self.outage_start_s + self.outage_s >= self.duration_s:
            raise ResilienceConfigError(
                f"{where}: the outage must end before duration_s ({self.duration_s} s)"
            )
        if self.cap_s < self.base_s:
            raise ResilienceConfigError(
                f"{where}: cap_s ({self.cap_s}) must be >= base_s ({self.base_s})"
            )
        if self.budget_min_retries_per_s < 0.0:
            raise ResilienceConfigError(f"{where}: budget_min_retries_per_s must be >= 0")
        if self.tick_s > min(self.interval_s, self.latency_s, self.base_s):
            raise ResilienceConfigError(
                f"{where}: tick_s must not exceed interval_s, latency_s or base_s"
            )

    @property
    def base_rate_per_s(self) -> float:
        return self.clients / self.interval_s


@dataclass(frozen=True, slots=True)
class StormRow:
    jitter: Jitter
    budget: bool
    requests: int
    attempts: int
    gave_up: int
    peak_arrivals_per_s: float
    drain_s: float

    @property
    def amplification(self) -> float:
        return self.attempts / self.requests if self.requests else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "jitter": self.jitter.value,
            "budget": self.budget,
            "requests": self.requests,
            "attempts": self.attempts,
            "amplification": round(self.amplification, 4),
            "peak_arrivals_per_s": self.peak_arrivals_per_s,
            "drain_s": round(self.drain_s, 3),
            "gave_up": self.gave_up,
        }


@dataclass(frozen=True, slots=True)
class StormResult:
    config: StormConfig
    rows: tuple[StormRow, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, object]:
        cfg = {name: getattr(self.config, name) for name in self.config.__dataclass_fields__}
        return {"config": cfg, "rows": [row.as_dict() for row in self.rows]}


def simulate(config: StormConfig, jitter: Jitter, with_budget: bool) -> StormRow:
    """Run one strategy; deterministic for a given config."""
    cfg = config
    tick = cfg.tick_s
    rng = random.Random(f"{cfg.seed}:{jitter.value}:{with_budget}")
    now = [0.0]
    budget = (
        RetryBudget(
            ttl_s=cfg.budget_ttl_s,
            min_retries_per_s=cfg.budget_min_retries_per_s,
            retry_ratio=cfg.budget_ratio,
            clock=lambda: now[0],
        )
        if with_budget
        else None
    )
    ticks_per_s = max(1, round(1.0 / tick))
    latency_ticks = max(1, round(cfg.latency_s / tick))
    outage_start = round(cfg.outage_start_s / tick)
    outage_end = round((cfg.outage_start_s + cfg.outage_s) / tick)
    slots = math.ceil(cfg.capacity_ratio * cfg.base_rate_per_s * cfg.latency_s)

    arrivals: dict[int, list[tuple[int, float]]] = {}
    requests = 0
    for _ in range(cfg.clients):
        t = rng.uniform(0.0, cfg.interval_s)
        while t < cfg.duration_s:
            arrivals.setdefault(round(t / tick), []).append((1, 0.0))
            requests += 1
            t += cfg.interval_s
    # completion tick -> the attempts (attempt number, previous sleep) holding a slot until then
    in_flight_by_tick: dict[int, list[tuple[int, float]]] = {}
    in_flight = 0
    attempts = 0
    gave_up = 0
    per_tick: list[int] = []
    last_reject = -1

    def fail(t: int, attempt: int, previous: float) -> None:
        nonlocal gave_up
        if attempt >= cfg.max_attempts or (budget is not None and not budget.try_withdraw()):
            gave_up += 1
            return
        sleep = backoff_s(jitter, rng, attempt, previous, cfg.base_s, cfg.cap_s)
        arrivals.setdefault(t + max(1, round(sleep / tick)), []).append((attempt + 1, sleep))

    t = 0
    while arrivals or in_flight:
        now[0] = t * tick
        in_flight -= len(in_flight_by_tick.pop(t, ()))
        if t == outage_start and outage_end > outage_start:
            for done in sorted(in_flight_by_tick):
                for attempt, previous in in_flight_by_tick[done]:
                    fail(t, attempt, previous)
                    last_reject = t
            in_flight_by_tick.clear()
            in_flight = 0
        batch = arrivals.pop(t, [])
        per_tick.append(len(batch))
        attempts += len(batch)
        down = outage_start <= t < outage_end
        for attempt, previous in batch:
            if budget is not None and attempt == 1:
                budget.deposit()
            if down or in_flight >= slots:
                last_reject = t
                fail(t, attempt, previous)
            else:
                in_flight += 1
                in_flight_by_tick.setdefault(t + latency_ticks, []).append((attempt, previous))
        t += 1

    peak_ticks = max(1, round(cfg.peak_window_s / tick))
    peak = 0
    burst = 0
    window = 0
    settled_from = outage_end
    limit = 1.1 * cfg.base_rate_per_s
    arrivals_end = round(cfg.duration_s / tick) - ticks_per_s
    for i, n in enumerate(per_tick):
        window += n
        if i >= ticks_per_s:
            window -= per_tick[i - ticks_per_s]
        burst += n
        if i >= peak_ticks:
            burst -= per_tick[i - peak_ticks]
        peak = max(peak, burst)
        if outage_end <= i < arrivals_end and window > limit:
            settled_from = i
    drain_end = max(settled_from, last_reject + 1 if last_reject >= outage_end else outage_end)
    return StormRow(
        jitter=jitter,
        budget=with_budget,
        requests=requests,
        attempts=attempts,
        gave_up=gave_up,
        peak_arrivals_per_s=peak / (peak_ticks * tick),
        drain_s=max(0.0, (drain_end - outage_end) * tick),
    )


def simulate_storm(config: StormConfig | None = None) -> StormResult:
    """Every jitter kind, each without and with the retry budget."""
    cfg = config or StormConfig()
    rows = tuple(simulate(cfg, jitter, budget) for jitter in Jitter for budget in (False, True))
    return StormResult(cfg, rows)
