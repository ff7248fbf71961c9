"""A probe plan (which loads, how many requests, what targets) and running it against one URL.

A plan is a sweep: closed loop over concurrencies, or open loop (Poisson, gamma, constant) over
rates. Each load level is run to completion before the next starts, and is summarised on its own,
together with the client's own load while it ran (``clientload``: loop lag, CPU, verdict). A level
runs in this process's loop, or spread over ``workers`` processes (``workers``; 0 sizes it from the
streams and the CPUs) with the same schedule.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal
from urllib.parse import urlsplit

import numpy as np

from fleetwatch.core.records import RequestRecord, Status
from fleetwatch.engine_probe.probe.arrivals import constant_arrivals, gamma_arrivals
from fleetwatch.engine_probe.probe.chat import API_PATHS, resolve_model
from fleetwatch.engine_probe.probe.client import OnDone, Prober, RequestBody, request_body
from fleetwatch.engine_probe.probe.clientload import ClientLoad, auto_workers, judge
from fleetwatch.engine_probe.probe.errors import ProbeError
from fleetwatch.engine_probe.probe.measure import RequestResult
from fleetwatch.engine_probe.probe.stats import RunSummary, SLOTargets, capacity, summarise
from fleetwatch.engine_probe.probe.workers import WorkerPool, merge, run_share, split

__all__ = ["LevelResult", "ProbePlan", "ProbeRun", "make_prompts", "run_plan", "to_records"]

Mode = Literal["closed", "poisson", "gamma", "constant"]
_ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", dtype=np.uint8)


def make_prompts(n: int, tokens: int, rng: np.random.Generator) -> list[str]:
    """``n`` distinct random prompts of ``tokens`` characters (one token each in the byte scheme)."""
    return [rng.choice(_ALPHABET, size=tokens).tobytes().decode("ascii") for _ in range(n)]


@dataclass(frozen=True, slots=True)
class ProbePlan:
    """What to run. ``levels`` are concurrencies (closed) or rates in requests/s (open)."""

    mode: Mode = "closed"
    levels: tuple[float, ...] = (1,)
    requests: int = 100
    prompt_tokens: int = 128
    max_tokens: int = 64
    burstiness: float = 1.0
    max_concurrency: int | None = None
    model: str | None = None
    """The ``model`` field sent; None: the first model ``GET /v1/models`` lists."""
    seed: int = 0
    targets: SLOTargets = field(default_factory=SLOTargets)
    timeout_s: float = 600.0
    warmup: int = 0
    """Requests sent (closed loop, one at a time) before the first level and not counted."""
    headers: tuple[tuple[str, str], ...] = ()
    """Extra HTTP headers (e.g. authorization) sent with every request."""
    api: str = "chat"
    """``chat`` (``/v1/chat/completions``) or ``completions`` (``/v1/completions``)."""
    workers: int = 0
    """Client processes per level; 0: one per 256 concurrent streams, at most one per CPU."""
    lag_fraction: float = 0.1
    """Client-bound when the loop's p99 lag exceeds this fraction of ITL p50 (``clientload``)..."""
    lag_limit_s: float = 0.001
    """...or this many seconds, whichever is smaller."""

    def __post_init__(self) -> None:
        if self.api not in API_PATHS:
            raise ProbeError(f"--api must be chat or completions, got {self.api!r}")
        if self.mode not in ("closed", "poisson", "gamma", "constant"):
            raise ProbeError(f"mode must be closed, poisson, gamma or constant, got {self.mode!r}")
        if not self.levels:
            raise ProbeError("no load levels given (--concurrency or --rate)")
        for level in self.levels:
            if not level > 0:
                raise ProbeError(f"load levels must be > 0, got {level}")
            if self.mode == "closed" and level != int(level):
                raise ProbeError(f"concurrency must be a whole number, got {level}")
        if self.requests < 1:
            raise ProbeError(f"--requests must be >= 1, got {self.requests}")
        if self.prompt_tokens < 1 or self.max_tokens < 1:
            raise ProbeError("--prompt-tokens and --max-tokens must be >= 1")
        if self.warmup < 0:
            raise ProbeError(f"--warmup must be >= 0, got {self.warmup}")
        if self.workers < 0:
            raise ProbeError(f"--workers must be >= 0 (0: automatic), got {self.workers}")
        if not 0 < self.lag_fraction <= 1:
            raise ProbeError(f"--lag-fraction must be in (0, 1], got {self.lag_fraction}")
        if not self.lag_limit_s > 0:
            raise ProbeError(f"--lag-limit-ms must be > 0, got {self.lag_limit_s * 1e3:g}")

    def level_label(self, level: float) -> str:
        return f"c={int(level)}" if self.mode == "closed" else f"{level:g}/s"

    def workers_for(self, level: float) -> int:
        """Processes for ``level``: ``workers``, or sized from its concurrent streams."""
        if self.workers:
            return self.workers
        streams = int(level) if self.mode == "closed" else self.requests
        return auto_workers(min(streams, self.max_concurrency or streams))


@dataclass(frozen=True, slots=True)
class LevelResult:
    level: float
    results: tuple[RequestResult, ...]
    summary: RunSummary
    client: ClientLoad | None = None
    """The client's loop lag, CPU and verdict while this level ran."""


@dataclass(frozen=True, slots=True)
class ProbeRun:
    """A finished sweep; ``wall_offset_s`` maps probe-clock instants to Unix seconds."""

    url: str
    plan: ProbePlan
    levels: tuple[LevelResult, ...]
    wall_offset_s: float
    model: str = ""
    """The model the requests named (the plan's, or the one the server listed)."""

    @property
    def capacity(self) -> float | None:
        return capacity([lv.summary for lv in self.levels])


async def run_plan(
    url: str,
    plan: ProbePlan,
    *,
    on_done: OnDone | None = None,
    on_level: Callable[[float, int], None] | None = None,
    bound_tokens_per_s: Callable[[float], float | None] | None = None,
    max_connections: int | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> ProbeRun:
    """Run every level of ``plan`` against ``url``; ``bound_tokens_per_s(batch)`` gives the bound."""
    rng = np.random.default_rng(plan.seed)
    top = int(max(plan.levels)) if plan.mode == "closed" else plan.requests
    conns = max_connections or min(max(top, plan.max_concurrency or 0) + 16, 65536)
    model = plan.model
    if model is None:
        model = await resolve_model(url, dict(plan.headers))
    offset = wall_clock() - clock()
    levels: list[LevelResult] = []

    def bodies_for(prompts: list[str]) -> list[RequestBody]:
        return [request_body(plan.api, p, plan.max_tokens, model=model) for p in prompts]

    setup = {
        "url": url,
        "max_connections": conns,
        "timeout_s": plan.timeout_s,
        "headers": dict(plan.headers),
        "api": plan.api,
    }
    shared_clock = clock is time.monotonic
    pools: dict[int, WorkerPool] = {}
    try:
        async with Prober(**setup, clock=clock) as prober:  # type: ignore[arg-type]
            if plan.warmup:
                rng_warm = np.random.default_rng(plan.seed + 1)
                warm = make_prompts(plan.warmup, plan.prompt_tokens, rng_warm)
                await prober.closed_loop(1, bodies_for(warm))
            for level in plan.levels:
                if on_level is not None:
                    on_level(level, plan.requests)
                bodies = bodies_for(make_prompts(plan.requests, plan.prompt_tokens, rng))
                offsets: list[float] | None = None
                if plan.mode == "constant":
                    offsets = constant_arrivals(level, plan.requests)
                elif plan.mode != "closed":
                    burst = plan.burstiness if plan.mode == "gamma" else 1.0
                    offsets = gamma_arrivals(level, plan.requests, burstiness=burst, rng=rng)
                cap = int(level) if plan.mode == "closed" else plan.max_concurrency or 0
                n = plan.workers_for(level) if shared_clock else 1
                shares = split(bodies, n, offsets_s=offsets, concurrency=cap)
                if len(shares) == 1:
                    results, load = await run_share(prober, shares[0], None, on_done=on_done)
                    loads = [load]
                else:
                    pool = pools.get(len(shares)) or pools.setdefault(
                        len(shares), WorkerPool(len(shares))
                    )
                    parts = await asyncio.to_thread(pool.run, setup, shares)
                    results = merge([p[0] for p in parts])
                    loads = [p[1] for p in parts]
                    if on_done is not None:
                        for r in results:
                            on_done(r)
                summary = summarise(
                    results,
                    label=plan.level_label(level),
                    mode=plan.mode,
                    rate=None if plan.mode == "closed" else level,
                    concurrency=int(level) if plan.mode == "closed" else None,
                    targets=plan.targets,
                )
                if bound_tokens_per_s is not None:
                    batch = _mean_in_flight(summary)
                    bound = bound_tokens_per_s(batch) if batch > 0 else None
                    if bound:
                        summary = replace(
                            summary, bound_fraction=summary.output_tokens_per_s / bound
                        )
                client = judge(
                    loads, summary, lag_fraction=plan.lag_fraction, lag_limit_s=plan.lag_limit_s
                )
                levels.append(LevelResult(level, tuple(results), summary, client))
    finally:
        for pool in pools.values():
            pool.close()
    return ProbeRun(url=url, plan=plan, levels=tuple(levels), wall_offset_s=offset, model=model)


def _mean_in_flight(s: RunSummary) -> float:
    """Little's law: requests in flight = throughput × mean time in system (the batch the server ran)."""
    if s.concurrency is not None:
        return float(s.concurrency)
    if s.e2e.n == 0:
        return 0.0
    return s.request_throughput * s.e2e.mean


def to_records(run: ProbeRun, *, replica: str | None = None) -> list[RequestRecord]:
    """Every request of the run in the shared record schema (Unix seconds).

    ``arrival_s`` is the actual send, ``intended_s`` the scheduled send, so analyses can measure
    from either. ``scheduled_s`` (the engine's admission) is arrival plus the queue time the server
    reported (``timing.queue_s``, sent by fleetwatch servers), else left empty: no client can see it.
    """
    host = replica or (urlsplit(run.url).netloc or run.url)
    off = run.wall_offset_s
    out: list[RequestRecord] = []
    for lv in run.levels:
        for r in lv.results:
            finished = r.finished_s + off
            first = r.first_token_s + off if r.first_token_s is not None else None
            scheduled = None
            if r.server_queue_s is not None and first is not None:
                scheduled = min(r.sent_s + off + r.server_queue_s, first)
            out.append(
                RequestRecord(
                    request_id=f"{lv.summary.label}-{r.index}",
                    replica=host,
                    model=run.model or run.plan.model or "unknown",
                    arrival_s=r.sent_s + off,
                    scheduled_s=scheduled,
                    first_token_s=first,
                    finished_s=finished,
                    intended_s=r.scheduled_s + off,
                    prompt_tokens=r.prompt_tokens,
                    output_tokens=r.output_tokens,
                    max_itl_s=r.max_itl_s if r.ok else None,
                    status=Status(r.status),
                    finish_reason=r.finish_reason,
                    error_type=None if r.ok else _error_type(r),
                    traffic_class=f"probe-{lv.summary.label}",
                )
            )
    return out


def _error_type(r: RequestResult) -> str:
    if r.http_status is not None and r.http_status != 200:
        return f"HTTP{r.http_status}"
    return (r.error or "error").split(":", 1)[0][:64]
