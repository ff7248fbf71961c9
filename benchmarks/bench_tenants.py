"""One tenant floods long prompts into a shared reference engine: the other tenants' TTFT.

``fleetwatch.scenarios.tenant_flood`` runs the real engine on a virtual clock whose step time
follows the step's tokens, so every number here is exactly repeatable (seeded) and independent
of this machine's load; wall and CPU time of the simulation are printed beside it. Variants, all
with the same arrivals:

- solo: the other tenants alone, nothing in front of the engine (their baseline);
- flood, nothing in front: the engine's FIFO waiting queue;
- flood, request-rate limit per tenant: the strongest simple limiter (what ``limit_req`` in a
  proxy does) at a rate every well-behaved tenant fits in;
- flood, token limits without the fair queue (every admitted request enters the engine at once);
- flood, token limits and the fair queue (``engine serve --tenant-limits``).

The column that matters: the other tenants' TTFT p99 over their solo p99 (goal: at most 1.2x).
A second table isolates the fair queue: limits too generous to hold the flooder back and every
engine slot taken, FIFO admission into the engine against the fair queue.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from benchmarks.machine import machine
from fleetwatch.scenarios.tenant_flood import (
    CONTENDED_SCENARIO,
    FLOOD_SCENARIO,
    FloodResult,
    FloodScenario,
    fifo,
)

SEEDS = (0, 1, 2, 3, 4)
GOAL = 1.2


def _describe(sc: FloodScenario) -> str:
    o, f = sc.others[0], sc.flooder
    return (
        f"other tenants: {len(sc.others)} x {o.rate_per_s:g} req/s, prompts "
        f"{o.prompt_tokens[0]}-{o.prompt_tokens[1]} tokens, max_tokens {o.max_tokens}; flooder: "
        f"{f.rate_per_s:g} req/s, prompts {f.prompt_tokens[0]}-{f.prompt_tokens[1]} tokens, "
        f"max_tokens {f.max_tokens}; {sc.duration_s:g} s of arrivals; token limit "
        f"{sc.limits.rate_per_s:g}/s burst {sc.limits.burst:g} per tenant; step "
        f"{sc.base_s * 1e3:g} ms + {sc.per_token_s * 1e6:g} us/token, {sc.max_num_seqs} slots, "
        f"{sc.max_num_batched_tokens} tokens/step"
    )


def _table(sc: FloodScenario, variants: list[tuple[str, dict[str, Any]]]) -> list[float]:
    """Print one table; return the last variant's p99 / solo p99 per seed."""
    names = [o.name for o in sc.others]
    rows: dict[str, list[FloodResult]] = {name: [] for name, _ in variants}
    wall, cpu = time.perf_counter(), time.process_time()
    for seed in SEEDS:
        for name, v in variants:
            rows[name].append(sc.run(seed=seed, **v))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    solo = [r.p99(names) for r in rows[variants[0][0]]]
    print(f"\n{_describe(sc)}\n")
    print("| variant | others' TTFT p50 (ms) | others' TTFT p99 (ms) | p99 / solo p99, seeds "
          f"{' '.join(map(str, SEEDS))} | median | flooder served / refused | others refused |")  # fmt: skip
    print("|---|---:|---:|---|---:|---:|---:|")
    last: list[float] = []
    for name, results in rows.items():
        last = [r.p99(names) / s for r, s in zip(results, solo, strict=True)]
        p50 = statistics.median(r.p50(names) for r in results) * 1e3
        p99 = statistics.median(r.p99(names) for r in results) * 1e3
        served = sum(len(r.ttft.get(sc.flooder.name, [])) for r in results)
        refused = sum(r.limited.get(sc.flooder.name, 0) for r in results)
        others = sum(r.limited.get(n, 0) for r in results for n in names)
        per_seed = " ".join(f"{x:.2f}" for x in last)
        print(f"| {name} | {p50:.1f} | {p99:.1f} | {per_seed} | {statistics.median(last):.2f}x |"
              f" {served} / {refused} | {others} |")  # fmt: skip
    print(f"\n(simulated in {wall:.1f} s wall, {cpu:.1f} s CPU)")
    return last


def main() -> None:
    print(f"machine: {machine()}")
    sc = FLOOD_SCENARIO
    print("\n## A tenant floods long prompts; every other tenant within its limits")
    gated = _table(
        sc,
        [
            ("solo (other tenants alone)", {"flood": False}),
            ("flood, nothing in front", {}),
            (
                f"flood, request-rate limit {sc.request_limits.rate_per_s:g}/s burst "
                f"{sc.request_limits.burst:g} per tenant (baseline)",
                {"limits": sc.request_limits, "count_requests": True},
            ),
            ("flood, token limits, no fair queue", {"limits": fifo(sc.limits)}),
            ("flood, token limits + fair queue", {"limits": sc.limits}),
        ],
    )
    print(
        f"\ntoken limits + fair queue: worst seed {max(gated):.2f}x solo p99 "
        f"(goal <= {GOAL}x: {'met' if max(gated) <= GOAL else 'missed'})"
    )
    print("\n## Limits too generous to stop the flood (oversubscribed), every slot taken")
    cs = CONTENDED_SCENARIO
    _table(
        cs,
        [
            ("solo (other tenants alone)", {"flood": False}),
            ("flood, FIFO into the engine", {"limits": fifo(cs.limits)}),
            ("flood, fair queue", {"limits": cs.limits}),
        ],
    )
    print(f"\n(end: {machine()})")
