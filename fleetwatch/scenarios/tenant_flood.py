"""One tenant floods long prompts into a shared reference engine; do the others notice?

The real ``LLMEngine`` (real forward passes, real scheduler) runs on a virtual clock whose step
time follows the step's work: ``base_s + per_token_s × tokens computed`` (``StepTimedClock``), so
a long prefill costs what it would on hardware, in proportion, and the run is exactly
repeatable. In front of it, either nothing (requests enter the engine's FIFO waiting queue as
they arrive) or ``fleetwatch.engine_probe.serve.front.tenants.TenantGate`` — the per-tenant token buckets and
the weighted fair queue ``engine serve --tenant-limits`` uses. Arrivals are Poisson per tenant,
seeded. TTFT is measured from a request's arrival at the front (gate queue included) to the end
of the step that produced its first token.

``run_flood`` runs one configuration; ``FLOOD_SCENARIO`` is the one the tests and the benchmark
use; ``flood_report`` runs the three that matter (the other tenants alone, with the flood and
nothing in front, with the flood and the limits) and the ratios of the other tenants' TTFT p99
to their solo p99.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from fleetwatch.engine_probe.engine import EngineConfig, LLMEngine, ModelConfig, RequestParams
from fleetwatch.engine_probe.engine.scheduler import SchedulerOutput
from fleetwatch.engine_probe.serve.front.tenants import Refusal, TenantGate, TenantLimits, Ticket

__all__ = [
    "CONTENDED_SCENARIO",
    "FLOOD_SCENARIO",
    "FloodResult",
    "FloodScenario",
    "StepTimedClock",
    "TenantLoad",
    "fifo",
    "flood_report",
    "run_flood",
]


class StepTimedClock:
    """Virtual seconds: still between steps; a step lasts ``base_s + per_token_s × tokens``,
    added at the engine's second clock read inside the step (after the forward pass). The
    tokens are the plan's (``observe``: prefill chunk tokens plus one per decoding request)."""

    def __init__(self, base_s: float, per_token_s: float) -> None:
        self.now = 0.0
        self.base_s = base_s
        self.per_token_s = per_token_s
        self.in_step = False
        self._reads = 0
        self._step_s = base_s

    def __call__(self) -> float:
        if self.in_step:
            self._reads += 1
            if self._reads == 2:
                self.now += self._step_s
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)

    def observe(self, plan: SchedulerOutput) -> None:
        tokens = sum(n for _, n in plan.prefill) + len(plan.decode)
        self._step_s = self.base_s + self.per_token_s * tokens

    def begin_step(self) -> None:
        self.in_step, self._reads = True, 0

    def end_step(self) -> None:
        self.in_step = False


@dataclass(frozen=True, slots=True)
class TenantLoad:
    """One tenant's traffic: Poisson arrivals, prompt lengths uniform in ``prompt_tokens``."""

    name: str
    rate_per_s: float
    prompt_tokens: tuple[int, int]
    max_tokens: int


@dataclass(slots=True)
class FloodResult:
    """TTFTs (seconds) by tenant, and requests refused by the limits by tenant."""

    ttft: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    limited: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    steps: int = 0
    end_s: float = 0.0

    def p99(self, tenants: Sequence[str]) -> float:
        return self.percentile(tenants, 99)

    def p50(self, tenants: Sequence[str]) -> float:
        return self.percentile(tenants, 50)

    def percentile(self, tenants: Sequence[str], q: float) -> float:
        values = [v for t in tenants for v in self.ttft.get(t, [])]
        return float(np.percentile(values, q)) if values else float("nan")


SMALL_MODEL = ModelConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_layers=1,
                          num_heads=2, num_kv_heads=1, max_position_embeddings=4096)  # fmt: skip


def run_flood(
    loads: Sequence[TenantLoad],
    *,
    limits: TenantLimits | None,
    duration_s: float = 10.0,
    max_num_seqs: int = 8,
    max_num_batched_tokens: int = 512,
    base_s: float = 0.010,
    per_token_s: float = 0.00005,
    seed: int = 0,
    count_requests: bool = False,
) -> FloodResult:
    """Serve ``loads`` for ``duration_s`` (virtual) and drain; ``limits`` None: no gate.
    ``count_requests``: the gate charges 1 unit per request whatever its tokens (a plain
    request-rate limit per tenant; set ``limits`` in requests per second)."""
    ec = EngineConfig(block_size=16, num_blocks=4096, max_num_seqs=max_num_seqs,
                      max_num_batched_tokens=max_num_batched_tokens, replica="r0",
                      device="cpu", seed=seed, num_threads=1)  # fmt: skip
    clock = StepTimedClock(base_s, per_token_s)
    engine = LLMEngine(SMALL_MODEL, ec, clock=clock, sleep=clock.sleep)
    schedule = engine.scheduler.schedule

    def timed_schedule() -> SchedulerOutput:
        plan = schedule()
        clock.observe(plan)
        return plan

    engine.scheduler.schedule = timed_schedule  # type: ignore[method-assign]
    gate = TenantGate(limits, max_num_seqs, clock=clock) if limits is not None else None

    rng = random.Random(seed)
    arrivals: list[tuple[float, str, list[int], int]] = []
    for load in loads:
        t = 0.0
        while True:
            t += rng.expovariate(load.rate_per_s)
            if t >= duration_s:
                break
            n = rng.randint(*load.prompt_tokens)
            prompt = [rng.randrange(SMALL_MODEL.vocab_size) for _ in range(n)]
            arrivals.append((t, load.name, prompt, load.max_tokens))
    arrivals.sort(key=lambda a: a[0])

    result = FloodResult()
    arrived: dict[str, tuple[float, str]] = {}
    tickets: dict[str, Ticket] = {}
    prompts: dict[int, tuple[str, list[int], int]] = {}
    by_ticket: dict[int, str] = {}
    produced: dict[str, int] = defaultdict(int)

    def dispatch(ready: list[Ticket]) -> None:
        for ticket in ready:
            rid = by_ticket.pop(id(ticket))
            _, prompt, max_tokens = prompts.pop(id(ticket))
            engine.add_request(prompt, max_tokens=max_tokens, params=RequestParams(request_id=rid))

    i = 0
    while i < len(arrivals) or engine.has_unfinished():
        while i < len(arrivals) and arrivals[i][0] <= clock.now:
            at, tenant, prompt, max_tokens = arrivals[i]
            rid = f"{tenant}-{i}"
            i += 1
            if gate is None:
                arrived[rid] = (at, tenant)
                engine.add_request(
                    prompt, max_tokens=max_tokens, params=RequestParams(request_id=rid)
                )
                continue
            got = (
                gate.admit(tenant, 1, 0)
                if count_requests
                else gate.admit(tenant, len(prompt), max_tokens)
            )
            if isinstance(got, Refusal):
                result.limited[tenant] += 1
                continue
            arrived[rid] = (at, tenant)
            tickets[rid] = got
            prompts[id(got)] = (tenant, prompt, max_tokens)
            by_ticket[id(got)] = rid
            dispatch(gate.enqueue(got))
        if not engine.has_unfinished():
            if i < len(arrivals):
                clock.now = max(clock.now, arrivals[i][0])
            continue
        clock.begin_step()
        outputs = engine.step()
        clock.end_step()
        result.steps += 1
        for out in outputs:
            rid = out.request_id
            if out.new_token_ids and produced[rid] == 0:
                at, tenant = arrived[rid]
                result.ttft[tenant].append(clock.now - at)
            produced[rid] += len(out.new_token_ids)
            if out.finished and gate is not None:
                used = 0 if count_requests else produced[rid]
                dispatch(gate.finish(tickets.pop(rid), used))
    result.end_s = clock.now
    return result


@dataclass(frozen=True, slots=True)
class FloodScenario:
    """The flooding-tenant scenario of the tests and ``benchmarks/bench_tenants.py``: ten tenants
    within their limits beside one that sends long prompts far beyond its own."""

    others: tuple[TenantLoad, ...] = tuple(
        TenantLoad(f"t{i}", 1.5, (32, 96), 16) for i in range(10)
    )
    flooder: TenantLoad = TenantLoad("flood", 4.0, (1200, 1800), 32)
    limits: TenantLimits = field(
        default_factory=lambda: TenantLimits(rate_per_s=150.0, burst=2000.0)
    )
    """Token limits every other tenant fits in (1.5 req/s x at most 112 units)."""
    request_limits: TenantLimits = field(
        default_factory=lambda: TenantLimits(
            rate_per_s=2.0, burst=10.0, prompt_weight=1.0, output_weight=0.0
        )
    )
    """The request-rate baseline (1 unit per request): every other tenant fits in it too."""
    duration_s: float = 20.0
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 2048
    base_s: float = 0.010
    per_token_s: float = 0.00002

    def run(
        self,
        *,
        seed: int = 0,
        flood: bool = True,
        limits: TenantLimits | None = None,
        count_requests: bool = False,
    ) -> FloodResult:
        loads = [*self.others, self.flooder] if flood else list(self.others)
        return run_flood(
            loads,
            limits=limits,
            duration_s=self.duration_s,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            base_s=self.base_s,
            per_token_s=self.per_token_s,
            seed=seed,
            count_requests=count_requests,
        )


FLOOD_SCENARIO = FloodScenario()
CONTENDED_SCENARIO = FloodScenario(
    flooder=TenantLoad("flood", 4.0, (1200, 1800), 128),
    limits=TenantLimits(rate_per_s=1e5, burst=1e6),
    max_num_seqs=8,
)
"""Limits too generous to hold the flooder back (oversubscribed) and few slots, the flooder's
requests holding them for 128 tokens: what is left is the order in which the front lets
requests into the engine, FIFO or fair."""


def fifo(limits: TenantLimits) -> TenantLimits:
    """The same limits with no fair queue: every admitted request enters the engine at once."""
    return replace(limits, slots=1 << 30)


def flood_report(scenario: FloodScenario = FLOOD_SCENARIO, seed: int = 0) -> dict[str, float]:
    """The other tenants' TTFT p99 alone (nothing in front of the engine), with the flood and
    nothing in front, with the flood and the token limits + fair queue; the two ratios to solo;
    and how many requests the limits refused."""
    names = [o.name for o in scenario.others]
    solo = scenario.run(seed=seed, flood=False)
    bare = scenario.run(seed=seed)
    gated = scenario.run(seed=seed, limits=scenario.limits)
    base = solo.p99(names)
    return {
        "solo_p99_s": base,
        "flood_no_limits_p99_s": bare.p99(names),
        "flood_limits_p99_s": gated.p99(names),
        "ratio_no_limits": bare.p99(names) / base,
        "ratio_limits": gated.p99(names) / base,
        "flood_limited": float(gated.limited.get(scenario.flooder.name, 0)),
        "flood_served": float(len(gated.ttft.get(scenario.flooder.name, []))),
        "others_limited": float(sum(gated.limited.get(n, 0) for n in names)),
        "others_served": float(sum(len(gated.ttft.get(n, [])) for n in names)),
    }
