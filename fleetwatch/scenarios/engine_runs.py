"""Fleets of real reference engines with injected faults, on a virtual clock, as request records.

Used by the scenario tests, the benchmark's false-positive measurement and examples. Every replica
is a real ``fleetwatch.engine_probe.engine.LLMEngine`` (tiny model, CPU) stepping through an open-loop
arrival schedule. Time is virtual and deterministic: each engine step costs ``step_s`` of clock
time (the engine's own ``FaultConfig.slowdown`` then stretches it through the injected sleep), so
TTFT grows with the number of prefill chunks a prompt needs and TPOT with slowdowns, and a run
gives the same records on every machine.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.records import RequestRecord, to_frame
from fleetwatch.telemetry.instrument import instrument
from fleetwatch.telemetry.sink import MemoryRecordSink

__all__ = ["ReplicaPlan", "VirtualClock", "run_fleet", "run_replica"]


class VirtualClock:
    """A clock that advances only when told: ``step_s`` per engine step, plus injected sleeps.

    Inside ``LLMEngine.step`` the clock is read at the step's start and again after the compute;
    the second read advances time by ``step_s``.
    """

    def __init__(self, step_s: float, start_s: float = 0.0) -> None:
        self.now = start_s
        self.step_s = step_s
        self.in_step = False
        self._reads = 0

    def __call__(self) -> float:
        if self.in_step:
            self._reads += 1
            if self._reads == 2:
                self.now += self.step_s
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)

    def begin_step(self) -> None:
        self.in_step, self._reads = True, 0

    def end_step(self) -> None:
        self.in_step = False


@dataclass(frozen=True, slots=True)
class ReplicaPlan:
    """One replica's traffic and faults.

    Prompt lengths are uniform in [prompt_len/2, 3·prompt_len/2] times ``prompt_scale``; output
    lengths uniform in [max_tokens/2, max_tokens]; arrivals Poisson at ``rate_per_s``. A
    ``huge_share`` of requests instead carry ``huge_prompt_len`` prompt tokens.
    """

    name: str
    requests: int = 40
    prompt_len: int = 48
    prompt_scale: float = 1.0
    max_tokens: int = 12
    rate_per_s: float = 20.0
    slowdown: float = 1.0
    error_rate: float = 0.0
    huge_share: float = 0.0
    huge_prompt_len: int = 1200
    seed: int = 0


def run_replica(
    plan: ReplicaPlan,
    *,
    step_s: float = 0.005,
    model: Mapping[str, Any] | None = None,
    engine: Mapping[str, Any] | None = None,
) -> list[RequestRecord]:
    """Run one engine through ``plan``'s arrivals on a virtual clock; return its records."""
    from fleetwatch.engine_probe.engine import EngineConfig, FaultConfig, LLMEngine, ModelConfig

    mc = ModelConfig(
        **{
            "vocab_size": 128,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_layers": 1,
            "num_heads": 2,
            "num_kv_heads": 1,
            "max_position_embeddings": 2048,
            **(model or {}),
        }
    )
    ec = EngineConfig(
        **{
            "block_size": 16,
            "num_blocks": 512,
            "max_num_seqs": 8,
            "max_num_batched_tokens": 64,
            "replica": plan.name,
            "device": "cpu",
            "seed": plan.seed,
            "num_threads": 1,
            **(engine or {}),
        }
    )
    clock = VirtualClock(step_s)
    eng = LLMEngine(
        mc,
        ec,
        faults=FaultConfig(slowdown=plan.slowdown, error_rate=plan.error_rate, seed=plan.seed),
        clock=clock,
        sleep=clock.sleep,
    )
    # The records come from fleetwatch's own telemetry, as in production, on the virtual clock.
    sink = MemoryRecordSink()
    inst = instrument(
        eng, record_sink=sink, metrics=False, record_times="engine", model="reference", env={}
    )
    rng = random.Random(plan.seed)
    t = 0.0
    arrivals = []
    for _ in range(plan.requests):
        t += rng.expovariate(plan.rate_per_s)
        n = max(
            1,
            round(rng.randint(plan.prompt_len // 2, plan.prompt_len * 3 // 2) * plan.prompt_scale),
        )
        if plan.huge_share and rng.random() < plan.huge_share:
            n = plan.huge_prompt_len
        prompt = [rng.randrange(mc.vocab_size) for _ in range(n)]
        arrivals.append((t, prompt, rng.randint(max(2, plan.max_tokens // 2), plan.max_tokens)))
    i = 0
    while i < len(arrivals) or eng.has_unfinished():
        while i < len(arrivals) and arrivals[i][0] <= clock.now:
            eng.add_request(arrivals[i][1], max_tokens=arrivals[i][2])
            i += 1
        if eng.has_unfinished():
            clock.begin_step()
            eng.step()
            clock.end_step()
        elif i < len(arrivals):
            clock.now = arrivals[i][0]
    inst.detach()
    if inst.drops.total:
        raise AnalysisError(f"{plan.name}: telemetry dropped {inst.drops.total} records")
    return list(sink.records)


def run_fleet(
    plans: Sequence[ReplicaPlan],
    *,
    step_s: float = 0.005,
    model: Mapping[str, Any] | None = None,
    engine: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """Run every replica plan; return all records as one ``fleetwatch.records`` frame."""
    records: list[RequestRecord] = []
    for plan in plans:
        records.extend(run_replica(plan, step_s=step_s, model=model, engine=engine))
    return to_frame(records)
