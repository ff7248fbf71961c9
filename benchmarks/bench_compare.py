"""Run comparison calibration: how often ``fleet compare`` cries wolf, and what a comparison costs.

Cases come from ``fleetwatch.scenarios.compare_runs`` (2,000–4,000 requests a run, seeded):

- false regressions: 200 pairs of runs of one configuration;
- prompt mix only: 30 pairs, identical engine, long-prompt share 15 % → 30–50 %;
- detection: 30 pairs, every decode step 20 % slower;
- verdicts with power: at 200, 1,000 and 10,000 requests a side, 1,000 null pairs and 1,000 pairs
  with every decode step 10 % slower (twice ``--min-effect``): how often each is called
  regression, inconclusive and no regression (floors: a false regression at most 1 % of null
  pairs; the planted shift called "no regression" at most 5 %);
- output shape (counts only: ``shape.judge_shape``): at 200, 1,000 and 10,000 requests a side,
  1,000 null pairs (finish reasons stop / length / abort 75 / 20 / 5 %, 1.5 % errors of two
  types, 1 % empty) and 1,000 pairs each with the ``length`` share raised to 30 % and to 22 %
  (twice ``--min-effect``): how often any share, and ``finish_reason=length``, is called moved;
- the canary judge (``fleet canary``): at 200, 1,000 and 10,000 requests a side, 1,000 alike
  canaries and 1,000 with every latency 10 % slower (log-normal TTFT, TPOT, e2e and output
  tokens in vLLM's buckets, 0.05 % errors): how often each is promoted, held and rolled back (floors: alike
  canaries of 10,000 promoted at least 80 %, rolled back at most 1 %); and at 0.5 % errors,
  1,000 alike canaries judged with the default rate threshold (0.1 point) and with
  ``--max-error-rise 0.3``, and 1,000 whose errors rose to 1.1 % (a rise of twice it); and
  1,000 whose answers got 10 % longer, and 1,000 10 % shorter (output tokens, log-normal in
  vLLM's ``vllm:request_generation_tokens`` buckets), latency and errors alike.

Baseline: the rule the decision replaced — a regression wherever any of the 18 bootstrap 95 %
intervals (p50/p90/p99 × 6 metrics) excludes 0 with a rise of at least 5 % — read from the same
reports' intervals, so both columns see identical data. Time per comparison: median wall and CPU
seconds of ``compare_runs`` (2,000 bootstrap draws, the CLI's default) over the null pairs.
"""

from __future__ import annotations

import statistics
import time

from fleetwatch.fleet.canary.judge import judge_canary
from fleetwatch.fleet.compare import CompareReport, compare_runs
from fleetwatch.fleet.compare.shape import judge_shape
from fleetwatch.scenarios.compare_runs import (
    Case,
    canary_side_draw,
    compare_pair,
    shape_counts_draw,
)


def _old_rule(report: CompareReport) -> set[str]:
    """Metrics the replaced rule would list as regressed."""
    return {
        m.metric
        for m in report.metrics
        for s in m.shifts
        if (s.ci_low > 0 or s.ci_high < 0) and s.shift > 0 and s.shift >= 0.05 * abs(s.before)
    }


def _run(case: Case, pairs: int) -> tuple[int, int, list[float], list[float], set[str]]:
    ours = old = 0
    wall: list[float] = []
    cpu: list[float] = []
    found: set[str] = set()
    for seed in range(pairs):
        before, after = compare_pair(case, seed)
        t, c = time.perf_counter(), time.process_time()
        report = compare_runs(before, after)
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
        listed = _old_rule(report)
        if case == "decode_slowdown":
            ours += "decode_s" in report.regressions
            old += "decode_s" in listed
            found |= set(report.regressions)
        else:
            ours += bool(report.regressions)
            old += bool(listed)
    return ours, old, wall, cpu, found


POWER_SIZES = (200, 1000, 10_000)
POWER_PAIRS = 1000


def verdict_rates(case: Case, size: int, pairs: int, draws: int = 500) -> dict[str, int]:
    """How often ``pairs`` seeded pairs of ``size`` requests a side get each run verdict."""
    counts = {"regression": 0, "inconclusive": 0, "no regression": 0}
    for seed in range(pairs):
        before, after = compare_pair(case, seed, sizes=(size, size))
        counts[compare_runs(before, after, draws=draws).verdict] += 1
    return counts


def shape_rates(size: int, pairs: int, after: tuple[float, float, float], seed: int) -> int:
    """Pairs (of ``pairs``) where a share moved: any share when ``after`` is the before mix,
    else ``finish_reason=length``."""
    import numpy as np

    before = (0.75, 0.2, 0.05)
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(pairs):
        b, a = shape_counts_draw(rng, size, before), shape_counts_draw(rng, size, after)
        moved = {
            s.name
            for s in judge_shape(b, a, alpha=0.01, min_effect=0.05, confidence=0.95)
            if s.verdict == "rose"
        }
        hits += bool(moved) if after == before else "finish_reason=length" in moved
    return hits


CANARY_SIZES = (200, 1000, 10_000)


def canary_rates(
    size: int,
    slow: float,
    pairs: int,
    seed: int,
    errors: tuple[float, float] = (0.0005, 0.0005),
    max_error_rise: float | None = None,
    longer: float = 1.0,
) -> dict[str, int]:
    """How often ``fleet canary``'s judge promotes, holds and rolls back ``pairs`` seeded
    canaries of ``size`` requests a side, the canary ``slow`` times slower and its answers
    ``longer`` times longer, ``errors`` the (baseline, canary) error rates (``--min-requests``
    at the size: the data guard aside)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {"promote": 0, "hold": 0, "rollback": 0}
    for _ in range(pairs):
        b = canary_side_draw(rng, size, errors=errors[0])
        c = canary_side_draw(rng, size, slow, errors=errors[1], longer=longer)
        decision = judge_canary(b, c, min_requests=min(size, 500), max_error_rise=max_error_rise)
        out[decision.decision] += 1
    return out


def _three(d: dict[str, int]) -> str:
    return f"{d['promote']} / {d['hold']} / {d['rollback']}"


def main() -> None:
    import os

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {os.cpu_count()} CPUs, 1-minute load average {load:.1f} at start")
    print("| case | ours | baseline (any CI excludes 0, ≥ 5 %) | notes |")
    print("|---|---|---|---|")
    n, old, wall, cpu, _ = _run("null", 200)
    print(
        f"| false regressions, same-distribution pairs | {n}/200 ({n / 200:.1%}) | "
        f"{old}/200 ({old / 200:.1%}) | family-wise error 1 %, Holm over 6 metrics |",
        flush=True,
    )
    n2, old2, _, _, _ = _run("prompt_mix", 30)
    print(
        f"| regressions, prompt mix only | {n2}/30 | {old2}/30 | like-for-like within strata of "
        "uncached prompt tokens |",
        flush=True,
    )
    n3, old3, _, _, found = _run("decode_slowdown", 30)
    print(
        f"| detection, 20 % decode slowdown (decode_s listed) | {n3}/30 | {old3}/30 | "
        f"listed: {', '.join(sorted(found))} |",
        flush=True,
    )
    print(
        f"| time per comparison, 2,000–4,000 vs 2,000–4,000 requests, 2,000 draws | "
        f"{statistics.median(wall) * 1000:.0f} ms wall, {statistics.median(cpu) * 1000:.0f} ms CPU "
        "| | median over the 200 null pairs |"
    )
    print()
    print(
        "| requests a side | pairs | null: regression / inconclusive / no regression | "
        "decode 10 % slower: regression / inconclusive / no regression |"
    )
    print("|---:|---:|---|---|")
    for size in POWER_SIZES:
        null = verdict_rates("null", size, POWER_PAIRS)
        slow = verdict_rates("decode_10", size, POWER_PAIRS)
        print(
            f"| {size:,} | {POWER_PAIRS:,} | {null['regression']} / {null['inconclusive']} / "
            f"{null['no regression']} | {slow['regression']} / {slow['inconclusive']} / "
            f"{slow['no regression']} |",
            flush=True,
        )
    print()
    print(
        "| requests a side | null: any share moved | length 20 → 30 % caught | 20 → 22 % caught |"
    )
    print("|---:|---:|---:|---:|")
    for size in POWER_SIZES:
        null = shape_rates(size, POWER_PAIRS, (0.75, 0.2, 0.05), 7)
        big = shape_rates(size, POWER_PAIRS, (0.65, 0.3, 0.05), 8)
        small = shape_rates(size, POWER_PAIRS, (0.73, 0.22, 0.05), 9)
        print(
            f"| {size:,} | {null} / {POWER_PAIRS:,} | {big} / {POWER_PAIRS:,} | "
            f"{small} / {POWER_PAIRS:,} |",
            flush=True,
        )
    print()
    print(
        "| canary: requests a side | pairs | alike: promote / hold / roll back | "
        "10 % slower | at 0.5 % errors, alike | alike, --max-error-rise 0.3 | "
        "errors 0.5 → 1.1 %, --max-error-rise 0.3 | answers 10 % longer | 10 % shorter | "
        "judge time |"
    )
    print("|---:|---:|---|---|---|---|---|---|---|---:|")
    half = (0.005, 0.005)
    for size in CANARY_SIZES:
        t = time.perf_counter()
        cells = [canary_rates(size, 1.0, POWER_PAIRS, 11)]
        per = (time.perf_counter() - t) / POWER_PAIRS
        cells += [
            canary_rates(size, 1.1, POWER_PAIRS, 12),
            canary_rates(size, 1.0, POWER_PAIRS, 13, half),
            canary_rates(size, 1.0, POWER_PAIRS, 13, half, max_error_rise=0.003),
            canary_rates(size, 1.0, POWER_PAIRS, 14, (0.005, 0.011), max_error_rise=0.003),
            canary_rates(size, 1.0, POWER_PAIRS, 15, longer=1.1),
            canary_rates(size, 1.0, POWER_PAIRS, 16, longer=0.9),
        ]
        print(
            f"| {size:,} | {POWER_PAIRS:,} | {' | '.join(_three(c) for c in cells)} | "
            f"{per * 1e3:.1f} ms (with the draw) |",
            flush=True,
        )
    print()


if __name__ == "__main__":
    main()
