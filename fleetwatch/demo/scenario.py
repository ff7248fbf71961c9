"""What the demo runs: a four-replica fleet, two planted problems, an error burst, as values.

Replica-side problem: one replica's engine is slowed (``FaultConfig.slowdown``), like a throttled
GPU. Workload-side problem: one healthy replica is sent only long prompts, so its raw latencies
are high although the replica is fine. The error burst raises every engine's ``error_rate`` for a
window of the run, which is what the availability SLO's page alert must catch.

``traffic_plan`` is pure: the same config and seed give the same requests at the same offsets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleetwatch.engine_probe.probe.errors import ProbeError

__all__ = ["DemoConfig", "PlannedRequest", "ReplicaRole", "roles", "traffic_plan"]


@dataclass(frozen=True, slots=True)
class ReplicaRole:
    """One replica of the demo fleet: its fault and the prompt lengths it is sent (tokens)."""

    name: str
    slowdown: float
    prompt_tokens: tuple[int, int]
    planted: str
    """What was planted: ``none``, ``replica`` (a replica-side fault) or ``workload``."""


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """Knobs of the demo run. Seconds, requests per second, tokens.

    ``duration_s`` is the open-loop traffic phase; the error burst covers
    [``burst_start``, ``burst_end``) as fractions of it.
    """

    duration_s: float = 60.0
    seed: int = 0
    replicas: int = 4
    rate_per_replica: float = 1.5
    slow_replica: int = 1
    slowdown: float = 5.0
    long_replica: int = 3
    short_prompt_tokens: tuple[int, int] = (16, 64)
    long_prompt_tokens: tuple[int, int] = (256, 384)
    max_tokens: tuple[int, int] = (16, 32)
    burst_start: float = 0.3
    burst_end: float = 0.45
    burst_error_rate: float = 0.5
    sweep_concurrency: tuple[int, ...] = (1, 4, 12)
    sweep_requests: int = 12
    sweep_max_tokens: int = 32

    def __post_init__(self) -> None:
        if not self.duration_s >= 10:
            raise ProbeError(f"demo --duration must be at least 10 s, got {self.duration_s:g}")
        if self.replicas < 3:
            raise ProbeError(f"the demo fleet needs at least 3 replicas, got {self.replicas}")
        for name, idx in (("slow_replica", self.slow_replica), ("long_replica", self.long_replica)):
            if not 0 <= idx < self.replicas:
                raise ProbeError(
                    f"demo {name} {idx} is not a replica index (0..{self.replicas - 1})"
                )
        if self.slow_replica == self.long_replica:
            raise ProbeError("demo slow_replica and long_replica must differ")
        if not 0 <= self.burst_start < self.burst_end <= 1:
            raise ProbeError("demo burst window must satisfy 0 <= start < end <= 1")
        if self.rate_per_replica <= 0:
            raise ProbeError(f"demo rate must be > 0, got {self.rate_per_replica:g}")

    @property
    def burst_window_s(self) -> tuple[float, float]:
        """The error burst as seconds into the traffic phase."""
        return self.burst_start * self.duration_s, self.burst_end * self.duration_s

    def replica_name(self, index: int) -> str:
        return f"replica-{index}"


def roles(config: DemoConfig) -> tuple[ReplicaRole, ...]:
    """The fleet: every replica healthy and sent the same mix, except the two planted ones."""
    out = []
    for i in range(config.replicas):
        slowdown = config.slowdown if i == config.slow_replica else 1.0
        prompts = (
            config.long_prompt_tokens if i == config.long_replica else config.short_prompt_tokens
        )
        planted = (
            "replica"
            if i == config.slow_replica
            else "workload"
            if i == config.long_replica
            else "none"
        )
        out.append(ReplicaRole(config.replica_name(i), slowdown, prompts, planted))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One request of the open-loop schedule: when (seconds after the start), where, how big."""

    offset_s: float
    replica: int
    prompt_tokens: int
    max_tokens: int


def traffic_plan(config: DemoConfig) -> tuple[tuple[PlannedRequest, ...], ...]:
    """Poisson arrivals per replica over ``duration_s``; one tuple of requests per replica."""
    rng = np.random.default_rng(config.seed)
    plan = []
    for i, role in enumerate(roles(config)):
        n_max = int(config.rate_per_replica * config.duration_s * 2 + 20)
        gaps = rng.exponential(1.0 / config.rate_per_replica, size=n_max)
        offsets = np.cumsum(gaps)
        offsets = offsets[offsets < config.duration_s]
        lo, hi = role.prompt_tokens
        prompts = rng.integers(lo, hi + 1, size=offsets.size)
        outs = rng.integers(config.max_tokens[0], config.max_tokens[1] + 1, size=offsets.size)
        plan.append(
            tuple(
                PlannedRequest(float(t), i, int(p), int(m))
                for t, p, m in zip(offsets, prompts, outs, strict=True)
            )
        )
    return tuple(plan)
