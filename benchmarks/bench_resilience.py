"""Resilience primitives against their usual peers, side by side in one run: breaker per-call
overhead (sync and async decorators, CLOSED, no-op function) vs pybreaker, circuitbreaker and
aiobreaker; 8 threads through one breaker around a 1 ms call; the micro-batcher in a closed loop
and for a lone request vs a hand-rolled asyncio.Queue batcher; how late the batcher's waker thread
sets an event after a 0.5 ms deadline vs a loop timer; the retry-storm table. Figures are
medians of interleaved rounds (every variant once per round, so load hits them alike), wall time
beside CPU time (``time.process_time``, all threads); costs are fleetwatch ÷ peer. Each benchmark
asserts fleetwatch and its peer computed the same thing; CPU model and load are printed with it.
``FLEETWATCH_BENCH_ONLY=overhead,waker`` (names without ``bench_``) runs only those parts.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

import aiobreaker
import circuitbreaker
import pybreaker
from prometheus_client import CollectorRegistry

from benchmarks.machine import cpu as machine_cpu
from benchmarks.machine import load
from fleetwatch.resilience.batcher import BatcherConfig, BatcherMetrics, MicroBatcher, Waker
from fleetwatch.resilience.breaker import BreakerMetrics, CircuitBreaker, State
from fleetwatch.resilience.cli import format_table
from fleetwatch.resilience.storm import StormConfig, simulate_storm

CALLS = 100_000
ROUNDS = 7
THREADS = 8
THREAD_SECONDS = 0.5
THREAD_ROUNDS = 5
BATCH_ROUNDS = 5
ITEMS = {8: 8_000, 64: 128_000, 256: 128_000}  # per closed-loop run, by callers
LONE_REQUESTS = 200
LONE_P50_GOAL_S = 0.0009  # a lone request at max_wait 0.5 ms: under a bare loop timer's ~1.1 ms
WAKER_DEADLINE_S = 0.0005
WAKER_WAKES = 100  # per round
WAKER_LATE_GOAL_S = 0.0004  # waker p50 lateness at most: deadline + lateness under 0.9 ms
PER_CALL_GOAL = 0.5  # fleetwatch overhead ÷ pybreaker overhead, at most
THREADS_GOAL = 6.0  # fleetwatch calls/s ÷ pybreaker calls/s, at least


def _verdict(ratio: float, goal: float, at_most: bool) -> str:
    met = ratio <= goal if at_most else ratio >= goal
    return f"{'met' if met else 'short'} by {abs(goal - ratio):.2f}x"


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.2f}"


def _title(text: str) -> None:
    """A part's heading, with the load average it ran under (the 1-minute figure covers it)."""
    print(f"\n({load()})\n\n## {text.rstrip()}\n")


def _header(columns: str) -> None:
    print(f"| {columns} |\n|---" + "|---:" * columns.count(" | ") + "|")


K = TypeVar("K")


def _interleave(cases: Mapping[K, Callable[[], Any]], rounds: int) -> dict[K, list[Any]]:
    """Run every case once per round, ``rounds`` times; each case's samples, in round order."""
    samples: dict[K, list[Any]] = {case: [] for case in cases}
    for _ in range(rounds):
        for case, run in cases.items():
            samples[case].append(run())
    return samples


def _medians(samples: list[tuple[float, ...]]) -> list[float]:
    return [statistics.median(column) for column in zip(*samples, strict=True)]


def _p50_p99(latencies: list[float]) -> tuple[float, float]:
    latencies.sort()
    return latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]


def _peers(asynchronous: bool) -> dict[str, Callable[[Any], Any]]:
    peers: dict[str, Callable[[Any], Any]] = {
        "no breaker": lambda f: f,
        "fleetwatch": CircuitBreaker("bench"),
        "fleetwatch + metrics": CircuitBreaker("b", metrics=BreakerMetrics(CollectorRegistry())),
        "pybreaker": pybreaker.CircuitBreaker(fail_max=5, reset_timeout=60),
        "circuitbreaker": circuitbreaker.CircuitBreaker(failure_threshold=5, recovery_timeout=60),
        "aiobreaker": aiobreaker.CircuitBreaker(5, timedelta(seconds=60)),
    }
    if asynchronous:
        del peers["pybreaker"]  # its async support needs tornado
    return peers


def _per_call(wrap: Callable[[Any], Any], asynchronous: bool) -> Callable[[], tuple[float, ...]]:
    calls = [0]  # the guarded function counts its calls and returns the count

    def counted() -> int:
        calls[0] += 1
        return calls[0]

    async def coro() -> int:
        return counted()

    fn = wrap(coro if asynchronous else counted)

    async def run_async() -> int:
        return sum([await fn() for _ in range(CALLS)])

    def run() -> tuple[float, float]:
        before = calls[0]
        wall, cpu = time.perf_counter(), time.process_time()
        total = asyncio.run(run_async()) if asynchronous else sum(fn() for _ in range(CALLS))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        # same answer: every call ran once and returned its own count
        assert calls[0] == before + CALLS and total == (2 * before + CALLS + 1) * CALLS // 2
        return wall / CALLS, cpu / CALLS

    return run


def _overhead(asynchronous: bool) -> dict[str, float]:
    """Print per-call cost and overhead (minus no breaker, paired per round); return wall overheads."""
    cases = {name: _per_call(wrap, asynchronous) for name, wrap in _peers(asynchronous).items()}
    samples = _interleave(cases, ROUNDS)
    bare = samples["no breaker"]
    over = {
        name: _medians([(w - bw, c - bc) for (w, c), (bw, bc) in zip(values, bare, strict=True)])
        for name, values in samples.items()
    }
    kind = "async decorator, no-op coroutine" if asynchronous else "sync decorator, no-op function"
    _title(
        f"Breaker per-call overhead, {kind}, CLOSED "
        f"({CALLS:,} calls x {ROUNDS} interleaved rounds, median)\n"
    )
    _header(
        "breaker | wall µs/call | overhead µs (wall) | (CPU) | fleetwatch ÷ this (wall) | (CPU)"
    )
    ours = over["fleetwatch"]
    for name, values in samples.items():
        (w, c), wall = over[name], statistics.median(v[0] for v in values)
        ratio = "| |" if name == "no breaker" else f"| {ours[0] / w:.2f}x | {ours[1] / c:.2f}x |"
        print(f"| {name} | {_us(wall)} | {_us(w)} | {_us(c)} {ratio}")
    return {name: w for name, (w, _) in over.items()}


def bench_overhead() -> None:
    over = _overhead(asynchronous=False)
    ours, peer = over["fleetwatch"], over["pybreaker"]
    ratio = ours / peer
    print(
        f"\nbreaker overhead per call: fleetwatch {_us(ours)} µs, pybreaker {_us(peer)} µs, "
        f"ratio {ratio:.2f}x, goal <= {PER_CALL_GOAL}x, {_verdict(ratio, PER_CALL_GOAL, True)}"
    )
    _overhead(asynchronous=True)


def _threaded(call: Callable[[Callable[[], int]], int]) -> tuple[float, float]:
    """Calls/s and CPU s per call of THREADS threads calling a 1 ms function for a while."""
    stop = threading.Event()
    made = [0] * THREADS

    def loop(i: int) -> None:
        def work() -> int:
            time.sleep(0.001)
            return i

        while not stop.is_set():
            assert call(work) == i  # same answer: every call admitted, run and answered
            made[i] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(THREADS)]
    wall, cpu = time.perf_counter(), time.process_time()
    for t in threads:
        t.start()
    stop.wait(THREAD_SECONDS)
    stop.set()
    for t in threads:
        t.join()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return sum(made) / wall, cpu / sum(made)


def bench_threads() -> None:
    ours = CircuitBreaker("bench")
    calls: dict[str, Callable[[Callable[[], int]], int]] = {
        "no breaker": lambda fn: fn(),
        "fleetwatch": ours.call,
        "pybreaker": pybreaker.CircuitBreaker(fail_max=5, reset_timeout=60).call,
        "circuitbreaker": circuitbreaker.CircuitBreaker(5, recovery_timeout=60).call,
    }
    runs = {name: partial(_threaded, call) for name, call in calls.items()}
    samples = _interleave(runs, THREAD_ROUNDS)
    assert ours.state is State.CLOSED and ours.snapshot().failed == 0
    _title(
        f"{THREADS} threads calling a 1 ms function through one breaker "
        f"({THREAD_ROUNDS} x {THREAD_SECONDS:g} s interleaved rounds, median)\n"
    )
    _header("breaker | calls/s | CPU µs/call | fleetwatch ÷ this (calls/s)")
    med = {name: _medians(values) for name, values in samples.items()}
    rate = med["fleetwatch"][0]
    for name, (r, cpu) in med.items():
        print(f"| {name} | {r:,.0f} | {_us(cpu)} | {rate / r:.2f}x |")
    ratio = rate / med["pybreaker"][0]
    print(
        f"\nbreaker {THREADS} threads × 1 ms: fleetwatch {rate:,.0f} calls/s, "
        f"pybreaker {med['pybreaker'][0]:,.0f} calls/s, ratio {ratio:.2f}x, "
        f"goal >= {THREADS_GOAL:g}x, {_verdict(ratio, THREADS_GOAL, False)}"
    )


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


def _make_batcher(kind: str, wait_s: float) -> MicroBatcher[int, int] | _QueueBatcher:
    if kind == "queue":
        return _QueueBatcher(64, wait_s)
    metrics = BatcherMetrics(CollectorRegistry()) if kind == "metrics" else None
    config = BatcherConfig(max_batch_size=64, max_wait_s=wait_s, max_queue=100_000)
    config = replace(config, spin_s=0.0) if kind == "timer" else config  # the loop timer alone
    return MicroBatcher(_noop_batch, config, metrics=metrics)


async def _saturate(callers: int, kind: str) -> tuple[float, float, float, float]:
    """items/s, CPU s/item, latency p50 and p99 (s) of ``callers`` submitting in a closed loop."""
    batcher = _make_batcher(kind, 0.001)
    latencies: list[float] = []
    per = ITEMS[callers] // callers
    answers = 0

    async def caller(base: int) -> None:
        nonlocal answers
        for i in range(base, base + per):
            t = time.perf_counter()
            answer = await batcher.submit(i)  # not `answers += await ...`: that reads first
            latencies.append(time.perf_counter() - t)
            answers += answer

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(caller(c * per) for c in range(callers)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    n = per * callers
    await batcher.close()
    assert answers == n * (n - 1) // 2  # same answers: every item came back as itself
    return (n / wall, cpu / n, *_p50_p99(latencies))


async def _lone(kind: str, wait_s: float) -> tuple[float, float, float]:
    """One caller, one request at a time: latency p50 and p99 (s), CPU s/request."""
    batcher = _make_batcher(kind, wait_s)
    latencies = []
    cpu = time.process_time()
    for i in range(LONE_REQUESTS):
        t = time.perf_counter()
        assert await batcher.submit(i) == i  # same answers
        latencies.append(time.perf_counter() - t)
    cpu = time.process_time() - cpu
    await batcher.close()
    return (*_p50_p99(latencies), cpu / LONE_REQUESTS)


def _run(coro_fn: Callable[..., Any], *args: Any) -> Any:
    return asyncio.run(coro_fn(*args))


_LABELS = {
    "plain": "fleetwatch MicroBatcher",
    "metrics": "fleetwatch MicroBatcher + metrics",
    "timer": "fleetwatch MicroBatcher, spin_s=0 (loop timer alone)",
    "queue": "asyncio.Queue + wait_for batcher (baseline)",
}


def bench_batcher() -> None:
    cases = [(8, "plain"), (8, "timer"), (8, "queue"), (64, "plain"), (64, "metrics")]
    cases += [(64, "queue"), (256, "plain"), (256, "queue")]
    runs = {case: partial(_run, _saturate, *case) for case in cases}
    med = {case: _medians(v) for case, v in _interleave(runs, BATCH_ROUNDS).items()}
    _title(
        "Micro-batcher, closed loop: no-op batch function, max batch 64, max wait 1 ms; 8 "
        "callers flush by the deadline, 64 and 256 saturate it "
        f"({BATCH_ROUNDS} interleaved rounds of {ITEMS[8]:,}/{ITEMS[64]:,}/{ITEMS[256]:,} items, median)\n"
    )
    _header("batcher | callers | items/s | CPU µs/item | ÷ baseline (CPU) | p50 (µs) | p99 (µs)")
    for (callers, kind), (rate, cpu, p50, p99) in med.items():
        base_cpu = med[(callers, "queue")][1]
        print(
            f"| {_LABELS[kind]} | {callers} | {rate:,.0f} | {_us(cpu)} | {cpu / base_cpu:.2f}x "
            f"| {p50 * 1e6:,.0f} | {p99 * 1e6:,.0f} |"
        )
    pairs = [(med[(c, "plain")], med[(c, "queue")]) for c in (8, 64, 256)]
    print(
        "\nbatcher saturation items/s vs baseline (8 callers, deadline-bound / 64 / 256): "
        f"fleetwatch {'/'.join(f'{o[0]:,.0f}' for o, _ in pairs)}, "
        f"baseline {'/'.join(f'{b[0]:,.0f}' for _, b in pairs)}, fleetwatch ÷ baseline cost "
        f"{'/'.join(f'{b[0] / o[0]:.2f}x' for o, b in pairs)} (wall), "
        f"{'/'.join(f'{o[1] / b[1]:.2f}x' for o, b in pairs)} (CPU)"
    )
    waits = (0.0005, 0.001, 0.005)
    kinds = ("plain", "timer", "queue")
    lone = {(w, k): partial(_run, _lone, k, w) for w in waits for k in kinds}
    lmed = {case: _medians(v) for case, v in _interleave(lone, BATCH_ROUNDS).items()}
    _title(
        "Micro-batcher lone request: one caller, submit → result, no-op batch function "
        f"({BATCH_ROUNDS} interleaved rounds of {LONE_REQUESTS} requests, median)\n"
    )
    _header("batcher | max wait (ms) | p50 (ms) | p99 (ms) | p50 − max wait (ms) | CPU ms/req")
    for (wait_s, kind), (p50, p99, cpu) in lmed.items():
        print(
            f"| {_LABELS[kind]} | {wait_s * 1e3:g} | {p50 * 1e3:.3f} | {p99 * 1e3:.3f} "
            f"| {(p50 - wait_s) * 1e3:+.3f} | {cpu * 1e3:.3f} |"
        )
    ours, base = [[lmed[(w, k)] for w in waits] for k in ("plain", "queue")]

    def ms(rows: list[list[float]], i: int) -> str:
        return "/".join(f"{row[i] * 1e3:.3f}" for row in rows)

    lone_p50 = ours[0][0]
    print(
        f"\nbatcher lone request at max_wait 0.5 ms: p50 {lone_p50 * 1e3:.3f} ms, goal < "
        f"{LONE_P50_GOAL_S * 1e3:g} ms, {'met' if lone_p50 < LONE_P50_GOAL_S else 'short'} by "
        f"{abs(LONE_P50_GOAL_S - lone_p50) * 1e3:.3f} ms"
    )
    print(
        f"\nbatcher lone-request added latency at max_wait 0.5/1/5 ms vs baseline: fleetwatch "
        f"{ms(ours, 0)} ms (CPU {ms(ours, 2)} ms/request), baseline {ms(base, 0)} ms "
        f"(CPU {ms(base, 2)} ms/request), fleetwatch ÷ baseline "
        + "/".join(f"{o[0] / b[0]:.2f}x" for o, b in zip(ours, base, strict=True))
    )


async def _lateness(kind: str) -> tuple[float, float, float]:
    """Seconds from deadline to wake-up of ``WAKER_WAKES`` events set at ``WAKER_DEADLINE_S`` from
    now, by the waker thread or by a loop timer: p50, p99 and the earliest."""
    loop = asyncio.get_running_loop()
    waker = Waker(loop, "bench waker") if kind == "waker" else None
    late = []
    for _ in range(WAKER_WAKES):
        event = asyncio.Event()
        deadline = loop.time() + WAKER_DEADLINE_S
        if waker is not None:
            waker.arm(deadline, event)
        else:
            loop.call_at(deadline, event.set)
        await event.wait()
        late.append(loop.time() - deadline)
    if waker is not None:
        waker.close()
    earliest = min(late)
    # same answer: every event set, none before its deadline (a timer may run one clock tick early)
    assert earliest >= (0.0 if kind == "waker" else -time.get_clock_info("monotonic").resolution)
    return (*_p50_p99(late), earliest)


def bench_waker() -> None:
    kinds = {"waker": "fleetwatch Waker (thread)", "timer": "loop timer (loop.call_at)"}
    runs = {kind: partial(_run, _lateness, kind) for kind in kinds}
    med = {kind: _medians(v) for kind, v in _interleave(runs, BATCH_ROUNDS).items()}
    _title(
        f"Batcher waker: an event set {WAKER_DEADLINE_S * 1e3:g} ms from now, lateness after the "
        f"deadline ({BATCH_ROUNDS} interleaved rounds of {WAKER_WAKES} wake-ups, median)\n"
    )
    _header("wake-up | p50 late (µs) | p99 late (µs) | earliest (µs) | fleetwatch ÷ this (p50)")
    ours = med["waker"][0]
    for kind, (p50, p99, earliest) in med.items():
        print(f"| {kinds[kind]} | {_us(p50)} | {_us(p99)} | {_us(earliest)} | {ours / p50:.2f}x |")
    print(
        f"\nwaker lateness at a {WAKER_DEADLINE_S * 1e3:g} ms deadline: p50 {_us(ours)} µs, loop "
        f"timer {_us(med['timer'][0])} µs, goal <= {_us(WAKER_LATE_GOAL_S)} µs, "
        f"{'met' if ours <= WAKER_LATE_GOAL_S else 'short'} by {_us(abs(WAKER_LATE_GOAL_S - ours))} µs"
    )


def bench_storm() -> None:
    config, start = StormConfig(), time.perf_counter()
    result, elapsed = simulate_storm(config), time.perf_counter() - start
    _title(
        f"Retry storm: {config.clients:,} clients, backend down {config.outage_s:g} s, "
        f"{config.max_attempts} attempts, base {config.base_s:g} s, cap {config.cap_s:g} s, "
        f"budget {config.budget_ratio:g} + {config.budget_min_retries_per_s:g}/s (simulated in {elapsed:.1f} s)\n"
    )
    print(format_table(result.rows))


def main() -> None:
    print(f"\nmachine: {machine_cpu()}; {load()}")
    only = {s for s in os.environ.get("FLEETWATCH_BENCH_ONLY", "").split(",") if s}
    for bench in (bench_overhead, bench_threads, bench_batcher, bench_waker, bench_storm):
        if not only or bench.__name__.removeprefix("bench_") in only:
            bench()
    print(f"\n(end: {load()})")


if __name__ == "__main__":
    main()
