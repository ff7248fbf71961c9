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
"""

from __future__ import annotations

import os
import statistics
import time

from engine_probe.serve.tenants import TenantLimits
from fleetwatch.scenarios.tenant_flood import (
    FLOOD_SCENARIO,
    FloodResult,
)

SEEDS = (0, 1, 2, 3, 4)
GOAL = 1.2


def _machine() -> str:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        models = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
    one, five, fifteen = os.getloadavg()
    cpu = models[0] if models else "unknown CPU"
    return f"{cpu}, {os.cpu_count()} CPUs; load average {one:.2f} {five:.2f} {fifteen:.2f}"


def main() -> None:
    sc = FLOOD_SCENARIO
    print(f"machine: {_machine()}")
    print(
        f"\nother tenants: {len(sc.others)} x {sc.others[0].rate_per_s:g} req/s, prompts "
        f"{sc.others[0].prompt_tokens[0]}-{sc.others[0].prompt_tokens[1]} tokens, max_tokens "
        f"{sc.others[0].max_tokens}; flooder: {sc.flooder.rate_per_s:g} req/s of "
        f"{sc.flooder.prompt_tokens[0]}-{sc.flooder.prompt_tokens[1]}-token prompts; "
        f"{sc.duration_s:g} s of arrivals; token limit {sc.limits.rate_per_s:g}/s burst "
        f"{sc.limits.burst:g} per tenant; request limit {sc.request_limits.rate_per_s:g}/s burst "
        f"{sc.request_limits.burst:g} per tenant; step {sc.base_s * 1e3:g} ms + "
        f"{sc.per_token_s * 1e6:g} us/token, {sc.max_num_seqs} slots, "
        f"{sc.max_num_batched_tokens} tokens/step\n"
    )
    names = [o.name for o in sc.others]
    variants: list[tuple[str, dict[str, object]]] = [
        ("solo (other tenants alone)", {"flood": False, "limits": None}),
        ("flood, nothing in front", {"flood": True, "limits": None}),
        (
            "flood, request-rate limit per tenant (baseline)",
            {"flood": True, "limits": sc.request_limits, "count_requests": True},
        ),
        (
            "flood, token limits, no fair queue",
            {"flood": True, "limits": _no_queue(sc.limits)},
        ),
        ("flood, token limits + fair queue", {"flood": True, "limits": sc.limits}),
    ]
    rows: dict[str, list[FloodResult]] = {name: [] for name, _ in variants}
    wall = time.perf_counter()
    cpu = time.process_time()
    for seed in SEEDS:
        for name, v in variants:
            rows[name].append(sc.run(seed=seed, **v))  # type: ignore[arg-type]
    wall = time.perf_counter() - wall
    cpu = time.process_time() - cpu
    solo = [r.p99(names) for r in rows[variants[0][0]]]
    print("| variant | others' TTFT p50 (ms) | others' TTFT p99 (ms) | p99 / solo p99, per seed |"
          " p99 / solo (median) | flooder served / refused | others refused |")  # fmt: skip
    print("|---|---:|---:|---|---:|---:|---:|")
    for name, results in rows.items():
        ratios = [r.p99(names) / s for r, s in zip(results, solo, strict=True)]
        p50 = statistics.median(r.p50(names) for r in results) * 1e3
        p99 = statistics.median(r.p99(names) for r in results) * 1e3
        served = sum(len(r.ttft.get(sc.flooder.name, [])) for r in results)
        refused = sum(r.limited.get(sc.flooder.name, 0) for r in results)
        others_refused = sum(r.limited.get(n, 0) for r in results for n in names)
        per_seed = " ".join(f"{x:.2f}" for x in ratios)
        print(f"| {name} | {p50:.1f} | {p99:.1f} | {per_seed} | {statistics.median(ratios):.2f}x |"
              f" {served} / {refused} | {others_refused} |")  # fmt: skip
    gated = [r.p99(names) / s for r, s in zip(rows[variants[-1][0]], solo, strict=True)]
    bare = [r.p99(names) / s for r, s in zip(rows[variants[1][0]], solo, strict=True)]
    print(
        f"\ntoken limits + fair queue: worst seed {max(gated):.2f}x solo p99 (goal <= {GOAL}x: "
        f"{'met' if max(gated) <= GOAL else 'missed'}); nothing in front: best seed "
        f"{min(bare):.2f}x. Seeds {', '.join(map(str, SEEDS))}; simulated in {wall:.1f} s wall, "
        f"{cpu:.1f} s CPU ({_machine()})"
    )


def _no_queue(limits: TenantLimits) -> TenantLimits:
    from dataclasses import replace

    return replace(limits, slots=1 << 30)
