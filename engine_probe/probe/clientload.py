"""The probe's own load: how late its event loop runs what is due, how much CPU it burns, and the
verdict on whether its latency percentiles can be trusted.

A lag sampler hands the loop a callback every ``interval_s`` and records how late it ran (actual -
due). A chunk that arrives while the loop is that late is stamped that late, so the lag measures
the error the client adds to its latency samples.

The verdict (``judge``): a level is **client-bound** when the p99 loop lag of its busiest worker
exceeds the limit ``min(lag_fraction × reference, lag_limit_s)``, where the reference is the
smallest latency the run measures at its median: ITL p50 (or TPOT p50 when chunks carry several
tokens and ITL p50 is 0), else TTFT p50. Defaults: 10 % and 1 ms. Percentiles of a client-bound
level are marked as such in the table and the JSON (``client.verdict``): they measure the client
as much as the server. Spread the streams over more processes (``--workers``) or use a bigger
client machine.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fleetwatch.engine_probe.probe.stats import Distribution, RunSummary, distribution

__all__ = [
    "CLIENT_BOUND",
    "ClientLoad",
    "LagSampler",
    "WorkerLoad",
    "auto_workers",
    "judge",
    "reference_latency",
]

CLIENT_BOUND = "client-bound"
OK = "ok"
SATURATED = 0.8
"""A worker whose CPU ÷ wall reaches this kept its core busy: its loop is the bottleneck."""


class LagSampler:
    """Records event-loop lag: ``start()`` inside a running loop, ``stop()`` returns the samples
    (seconds).

    A helper thread wakes every ``interval_s`` and hands the loop a callback stamped with the
    instant it was due (``call_soon_threadsafe``, which wakes a loop waiting in its selector at
    once); the loop records how late the callback ran. That is the wait any socket read would
    have had at that instant: the loop busy with other callbacks, or the process kept off the CPU.
    A timer inside the loop would also count the selector's millisecond rounding of its timeout
    (up to 1 ms on an idle loop), which is no delay to reads. Clock and sleep are parameters so
    tests drive it without waiting.
    """

    def __init__(
        self,
        interval_s: float = 0.01,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self.sleep = sleep
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _record(self, due: float) -> None:
        self.samples.append(max(0.0, self.clock() - due))

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        clock, step = self.clock, self.interval_s
        due = clock() + step
        while True:
            self.sleep(max(0.0, due - clock()))
            if self._stop.is_set():
                return
            try:
                loop.call_soon_threadsafe(self._record, due)
            except RuntimeError:  # the loop closed under us
                return
            due = max(due + step, clock())

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._thread = threading.Thread(
            target=self._tick, args=(loop,), name="probe-lag", daemon=True
        )
        self._thread.start()

    async def stop(self) -> list[float]:
        self._stop.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None
        return self.samples


@dataclass(frozen=True, slots=True)
class WorkerLoad:
    """One client process during one load level."""

    lag_samples: tuple[float, ...]
    cpu_s: float
    """Process CPU time (user + system) spent during the level."""
    wall_s: float

    @property
    def cpu_fraction(self) -> float:
        """CPU over wall time: near 1.0 means the worker's single loop was saturated."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class ClientLoad:
    """The client's load during one level and the verdict on its percentiles."""

    workers: int
    lag: Distribution
    """Loop lag over all workers' samples, seconds."""
    worst_lag_p99_s: float
    """The highest per-worker p99 lag: the one the verdict uses."""
    cpu_s: tuple[float, ...]
    """Process CPU seconds per worker."""
    cpu_fraction: tuple[float, ...]
    """CPU ÷ wall per worker."""
    reference: str
    """Which latency the limit is a fraction of (itl_p50, tpot_p50, ttft_p50), or none."""
    reference_s: float
    limit_s: float
    verdict: str
    """``ok`` or ``client-bound``."""
    cause: str = ""
    """Why, when client-bound: ``own CPU`` (a worker's loop kept a core busy: add workers) or
    ``CPU contention`` (the workers were mostly waiting for a core other processes held)."""

    @property
    def client_bound(self) -> bool:
        return self.verdict == CLIENT_BOUND


def reference_latency(s: RunSummary) -> tuple[str, float]:
    """The smallest latency measured at its median: ITL p50, else TPOT p50, else TTFT p50."""
    for name, value in (("itl_p50", s.itl.p50), ("tpot_p50", s.tpot.p50), ("ttft_p50", s.ttft.p50)):
        if math.isfinite(value) and value > 0:
            return name, value
    return "none", math.nan


def judge(
    loads: Sequence[WorkerLoad],
    summary: RunSummary,
    *,
    lag_fraction: float = 0.1,
    lag_limit_s: float = 0.001,
) -> ClientLoad:
    """Summarise the workers' loads; client-bound when the worst p99 lag exceeds the limit."""
    merged = [x for w in loads for x in w.lag_samples]
    per_worker = [distribution(w.lag_samples).p99 for w in loads if w.lag_samples]
    worst = max(per_worker) if per_worker else math.nan
    ref_name, ref = reference_latency(summary)
    limit = min(lag_fraction * ref, lag_limit_s) if math.isfinite(ref) else lag_limit_s
    bound = math.isfinite(worst) and worst > limit
    busiest = max((w.cpu_fraction for w in loads), default=0.0)
    cause = ("own CPU" if busiest >= SATURATED else "CPU contention") if bound else ""
    return ClientLoad(
        workers=len(loads),
        lag=distribution(merged),
        worst_lag_p99_s=worst,
        cpu_s=tuple(w.cpu_s for w in loads),
        cpu_fraction=tuple(w.cpu_fraction for w in loads),
        reference=ref_name,
        reference_s=ref,
        limit_s=limit,
        verdict=CLIENT_BOUND if bound else OK,
        cause=cause,
    )


STREAMS_PER_WORKER = 256
"""Streams one asyncio loop is given by default (see ``auto_workers``)."""


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def auto_workers(streams: int, cpus: int | None = None) -> int:
    """Default worker processes: one per ``STREAMS_PER_WORKER`` concurrent streams, at most one per
    usable CPU, at least one. The probe spends about 35 µs of CPU per chunk (BENCHMARKS.md, AMD
    EPYC): 256 streams at a 20 ms token gap are 12,800 chunks/s, about half a core, which leaves a
    loop room to answer each read promptly; 1,000 streams would need 1.75 cores from one loop.
    More processes than cores only add contention."""
    cpus = usable_cpus() if cpus is None else cpus
    return max(1, min(cpus, math.ceil(streams / STREAMS_PER_WORKER)))
