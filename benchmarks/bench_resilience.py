"""Resilience primitives, side by side in one run (medians of interleaved rounds).

1. Circuit breaker per-call overhead on a no-op function: fleetwatch vs pybreaker vs circuitbreaker.
2. 8 threads calling a 1 ms function through one breaker: throughput vs pybreaker (which holds its
   lock across the call) and vs no breaker.
3. Micro-batcher with a no-op batch function at batch 64: items/s and submit latency (p50/p99;
   with a no-op batch function all of it is added by batching), with and without Prometheus
   metrics, against a hand-rolled asyncio.Queue + wait_for batcher.
4. The retry-storm table (``fleetwatch resilience storm`` defaults).
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Callable

import circuitbreaker
import pybreaker
from prometheus_client import CollectorRegistry

from resilience.batcher import BatcherConfig, BatcherMetrics, MicroBatcher
from resilience.breaker import BreakerConfig, BreakerMetrics, CircuitBreaker
from resilience.cli import format_table
from resilience.storm import StormConfig, simulate_storm

CALLS = 100_000
ROUNDS = 7
THREADS = 8
THREAD_SECONDS = 1.0
THREAD_ROUNDS = 3


def _noop() -> None:
    return None


def _per_call_ns(fn: Callable[[], None], calls: int = CALLS) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls


def _breakers() -> dict[str, Callable[[], None]]:
    ours = CircuitBreaker("bench")(_noop)
    ours_metrics = CircuitBreaker("bench", metrics=BreakerMetrics(CollectorRegistry()))(_noop)
    pyb = pybreaker.CircuitBreaker(fail_max=5, reset_timeout=60)(_noop)
    cb = circuitbreaker.CircuitBreaker(failure_threshold=5, recovery_timeout=60)(_noop)
    return {
        "no breaker": _noop,
        "fleetwatch": ours,
        "fleetwatch + metrics": ours_metrics,
        "pybreaker": pyb,
        "circuitbreaker": cb,
    }


def bench_overhead() -> None:
    variants = _breakers()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(ROUNDS):
        for name, fn in variants.items():
            samples[name].append(_per_call_ns(fn))
    bare = statistics.median(samples["no breaker"])
    ours = statistics.median(samples["fleetwatch"]) - bare
    print(
        f"\n## Breaker per-call overhead (no-op function, {CALLS:,} calls x {ROUNDS} rounds, median)\n"
    )
    print("| breaker | ns/call | overhead ns/call | overhead vs fleetwatch |")
    print("|---|---:|---:|---:|")
    for name, values in samples.items():
        med = statistics.median(values)
        overhead = med - bare
        ratio = "" if name == "no breaker" else f"{overhead / ours:.2f}x"
        print(f"| {name} | {med:,.0f} | {overhead:,.0f} | {ratio} |")


def _threaded_throughput(call: Callable[[Callable[[], None]], None]) -> float:
    stop = threading.Event()
    counts = [0] * THREADS

    def work() -> None:
        time.sleep(0.001)

    def loop(i: int) -> None:
        n = 0
        while not stop.is_set():
            call(work)
            n += 1
        counts[i] = n

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(THREADS)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(THREAD_SECONDS)
    stop.set()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - start)


def bench_threads() -> None:
    ours = CircuitBreaker("bench", BreakerConfig())
    pyb = pybreaker.CircuitBreaker(fail_max=5, reset_timeout=60)
    variants: dict[str, Callable[[Callable[[], None]], None]] = {
        "no breaker": lambda fn: fn(),
        "fleetwatch": ours.call,
        "pybreaker": pyb.call,
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(THREAD_ROUNDS):
        for name, call in variants.items():
            samples[name].append(_threaded_throughput(call))
    print(
        f"\n## {THREADS} threads calling a 1 ms function through one breaker ({THREAD_ROUNDS} x {THREAD_SECONDS:g} s rounds, median)\n"
    )
    print("| breaker | calls/s | vs pybreaker |")
    print("|---|---:|---:|")
    pyb_rate = statistics.median(samples["pybreaker"])
    for name, values in samples.items():
        rate = statistics.median(values)
        print(f"| {name} | {rate:,.0f} | {rate / pyb_rate:.2f}x |")


async def _noop_batch(items: list[int]) -> list[int]:
    return items


class _QueueBatcher:
    """The usual hand-rolled batcher (asyncio.Queue + wait_for, no isolation), as a baseline."""

    def __init__(self, size: int, wait_s: float) -> None:
        self.queue: asyncio.Queue[tuple[int, asyncio.Future[int]]] = asyncio.Queue()
        self.size = size
        self.wait_s = wait_s
        self.task = asyncio.ensure_future(self.run())

    async def submit(self, item: int) -> int:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.queue.put_nowait((item, future))
        return await future

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self.queue.get()]
            deadline = loop.time() + self.wait_s
            while len(batch) < self.size:
                try:
                    batch.append(self.queue.get_nowait())
                except asyncio.QueueEmpty:
                    left = deadline - loop.time()
                    if left <= 0:
                        break
                    try:
                        batch.append(await asyncio.wait_for(self.queue.get(), left))
                    except TimeoutError:
                        break
            results = await _noop_batch([item for item, _ in batch])
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():
                    future.set_result(result)

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def _batcher_run(callers: int, items: int, kind: str) -> tuple[float, float, float]:
    batcher: MicroBatcher[int, int] | _QueueBatcher
    if kind == "queue":
        batcher = _QueueBatcher(64, 0.001)
    else:
        batcher = MicroBatcher(
            _noop_batch,
            BatcherConfig(max_batch_size=64, max_wait_s=0.001, max_queue=100_000),
            metrics=BatcherMetrics(CollectorRegistry()) if kind == "metrics" else None,
        )
    latencies: list[float] = []
    per = items // callers
    clock = time.perf_counter

    async def caller() -> None:
        for i in range(per):
            t = clock()
            await batcher.submit(i)
            latencies.append(clock() - t)

    start = clock()
    await asyncio.gather(*(caller() for _ in range(callers)))
    elapsed = clock() - start
    await batcher.close()
    latencies.sort()
    return (
        per * callers / elapsed,
        latencies[len(latencies) // 2],
        latencies[int(len(latencies) * 0.99)],
    )


def bench_batcher() -> None:
    labels = {
        "plain": "fleetwatch MicroBatcher",
        "metrics": "fleetwatch MicroBatcher + metrics",
        "queue": "asyncio.Queue + wait_for batcher (baseline)",
    }
    cases = [(64, "plain"), (64, "metrics"), (64, "queue"), (256, "plain"), (256, "queue")]
    samples: dict[tuple[int, str], list[tuple[float, float, float]]] = {c: [] for c in cases}
    for _ in range(5):
        for callers, kind in cases:
            samples[(callers, kind)].append(asyncio.run(_batcher_run(callers, 128_000, kind)))
    print(
        "\n## Micro-batcher, no-op batch function, max batch 64, max wait 1 ms "
        "(closed loop, 5 rounds of 128,000 items, median)\n"
    )
    print("| batcher | concurrent callers | items/s | submit latency p50 (us) | p99 (us) |")
    print("|---|---:|---:|---:|---:|")
    for (callers, kind), values in samples.items():
        rate = statistics.median(v[0] for v in values)
        p50 = statistics.median(v[1] for v in values) * 1e6
        p99 = statistics.median(v[2] for v in values) * 1e6
        print(f"| {labels[kind]} | {callers} | {rate:,.0f} | {p50:,.0f} | {p99:,.0f} |")


def bench_storm() -> None:
    config = StormConfig()
    start = time.perf_counter()
    result = simulate_storm(config)
    elapsed = time.perf_counter() - start
    print(
        f"\n## Retry storm: {config.clients:,} clients, backend down {config.outage_s:g} s, "
        f"{config.max_attempts} attempts, base {config.base_s:g} s, cap {config.cap_s:g} s, "
        f"budget {config.budget_ratio:g} + {config.budget_min_retries_per_s:g}/s (simulated in {elapsed:.1f} s)\n"
    )
    print(format_table(result.rows))


def main() -> None:
    bench_overhead()
    bench_threads()
    bench_batcher()
    bench_storm()


if __name__ == "__main__":
    main()
