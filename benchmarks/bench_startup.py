"""Cold starts and the model cache.

1. The reference engine's cold start, phase by phase (default model, 2048 KV blocks, CPU):
   median of interleaved repeats, wall and CPU seconds, beside the same build and warm-up done
   without a timer (the baseline): the phases cost nothing to time. Same answer: the warm-up
   request's tokens are equal.
2. The model cache's eviction policy on a seeded trace: GreedyDual-Size (``ModelCache``) against
   the strongest simple policy, LRU by bytes (evict least recently used until the model fits),
   on models 50x apart in size whose load costs a fixed start-up plus bytes over a bandwidth.
   Same answer: both serve every request and never exceed the budget; they differ in how many
   requests wait for a load and for how long.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections import OrderedDict

from benchmarks.machine import machine
from fleetwatch.engine_probe.engine import EngineConfig, LLMEngine, ModelConfig
from fleetwatch.engine_probe.engine.startup import StartupTimer, warm_up
from fleetwatch.engine_probe.serve.multi.cache import ModelCache

REPEATS = 5


def _cold_start(timed: bool) -> tuple[float, float, dict[str, float], list[int]]:
    wall0, cpu0 = time.perf_counter(), time.process_time()
    timer = StartupTimer() if timed else None
    engine = LLMEngine(ModelConfig(), EngineConfig(device="cpu"), startup=timer)
    warm_up(engine, timer)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    [tokens] = engine.generate([[1, 2, 3]], max_tokens=4)
    return wall, cpu, timer.seconds() if timer is not None else {}, tokens


def bench_cold_start() -> None:
    runs: dict[bool, list[tuple[float, float, dict[str, float], list[int]]]] = {
        True: [],
        False: [],
    }
    for _ in range(REPEATS):
        for timed in (True, False):
            runs[timed].append(_cold_start(timed))
    assert all(r[3] == runs[True][0][3] for rs in runs.values() for r in rs), "answers differ"
    print(
        f"\n## Reference engine cold start (default model, 2048 KV blocks, CPU; median of {REPEATS})"
    )
    print(f"({machine()})\n")
    print("| phase | wall s (median) |")
    print("|---|---:|")
    for phase in runs[True][0][2]:
        print(f"| {phase} | {statistics.median(r[2][phase] for r in runs[True]):.4f} |")
    print("\n| build + warm-up | wall s | CPU s | ratio (wall) |")
    print("|---|---:|---:|---:|")
    base = statistics.median(r[0] for r in runs[False])
    for timed, name in ((True, "timed phases (StartupTimer)"), (False, "untimed (baseline)")):
        wall = statistics.median(r[0] for r in runs[timed])
        cpu = statistics.median(r[1] for r in runs[timed])
        print(f"| {name} | {wall:.4f} | {cpu:.4f} | {wall / base:.2f}x |")


# -- the cache policies ------------------------------------------------------------------------

SIZES_MB = {"tiny": 80, "small": 400, "mid-a": 1_000, "mid-b": 1_600, "big": 4_000}
START_S = 2.0  # process/CUDA context/compile: paid by every load, whatever the size
BANDWIDTH_MB_S = 1_000.0
BUDGET_MB = 5_500


def _cost(name: str) -> float:
    return START_S + SIZES_MB[name] / BANDWIDTH_MB_S


def _trace(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    names = list(SIZES_MB)
    weights = [1 / (i + 1) for i in range(len(names))]  # Zipf: the tiny one is asked most
    rng.shuffle(weights)
    return rng.choices(names, weights, k=n)


async def _gds(trace: list[str]) -> tuple[int, float, int]:
    now = [0.0]
    peak = [0]
    resident: dict[str, int] = {}

    async def load(name: str) -> str:
        resident[name] = SIZES_MB[name]
        peak[0] = max(peak[0], sum(resident.values()))
        now[0] += _cost(name)
        return name

    async def unload(name: str, value: str) -> None:
        del resident[name]

    cache = ModelCache(BUDGET_MB, SIZES_MB, load, unload, clock=lambda: now[0])
    for name in trace:
        async with cache.lease(name):
            pass
    return peak[0], now[0], len(trace)


def _lru(trace: list[str]) -> tuple[int, float, int]:
    resident: OrderedDict[str, int] = OrderedDict()
    waited = 0.0
    peak = 0
    for name in trace:
        if name in resident:
            resident.move_to_end(name)
            continue
        while sum(resident.values()) + SIZES_MB[name] > BUDGET_MB:
            resident.popitem(last=False)
        resident[name] = SIZES_MB[name]
        peak = max(peak, sum(resident.values()))
        waited += _cost(name)
    return peak, waited, len(trace)


def bench_policies() -> None:
    print("\n## Model cache eviction: GreedyDual-Size against LRU by bytes (seeded traces)")
    sizes = ", ".join(f"{k} {v} MB" for k, v in SIZES_MB.items())
    print(
        f"(models {sizes}; budget {BUDGET_MB} MB; a load costs {START_S:g} s + size at "
        f"{BANDWIDTH_MB_S:g} MB/s; 20,000 requests per trace, Zipf popularity)\n"
    )
    print("| trace seed | GDS load seconds | LRU load seconds | GDS ÷ LRU | GDS wall s |")
    print("|---:|---:|---:|---:|---:|")
    ratios = []
    for seed in range(5):
        trace = _trace(20_000, seed)
        t0 = time.perf_counter()
        peak_g, waited_g, n_g = asyncio.run(_gds(trace))
        wall = time.perf_counter() - t0
        peak_l, waited_l, n_l = _lru(trace)
        assert n_g == n_l and peak_g <= BUDGET_MB and peak_l <= BUDGET_MB
        ratios.append(waited_g / waited_l)
        print(f"| {seed} | {waited_g:,.1f} | {waited_l:,.1f} | {ratios[-1]:.2f}x | {wall:.2f} |")
    print(f"\nmedian GDS ÷ LRU load seconds: {statistics.median(ratios):.2f}x")


def main() -> None:
    bench_cold_start()
    bench_policies()


if __name__ == "__main__":
    main()
