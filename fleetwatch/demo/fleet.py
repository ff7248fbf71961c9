"""Run the demo fleet: four reference engines served over HTTP on loopback, driven open-loop.

Everything runs in one process and one asyncio loop: each replica is an ``LLMEngine`` in an
``AsyncEngine`` (its own step thread) behind its own ``CompletionServer`` on its own 127.0.0.1
port, with telemetry attached (a Prometheus registry per replica at ``/metrics``, spans to one
JSON-lines file, request records to memory). The probe sends each replica its planned requests
at their planned times, whatever happens to earlier ones (open loop).

The error burst changes the engines' faults while they run (``LLMEngine.set_faults``), which
switches injected errors on and off without restarting anything.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fleetwatch.core.stats import percentile
from fleetwatch.demo.host import HostLoad, HostProbe, engine_threads
from fleetwatch.demo.progress import Progress, SilentProgress
from fleetwatch.demo.scenario import DemoConfig, PlannedRequest, ReplicaRole, roles, traffic_plan
from fleetwatch.engine_probe.probe.measure import RequestResult

__all__ = ["FleetRun", "SweepLevel", "run_fleet", "run_sweep"]

_ALPHABET = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", dtype=np.uint8)

OnReady = Callable[[Mapping[str, str]], Awaitable[None]]
"""Called with {replica: "127.0.0.1:port"} once every server listens, before traffic starts."""
Hold = Callable[[float], Awaitable[None]]
"""Awaited after the traffic (and ``grace_s``) with the Unix time it ended, before the fleet stops."""


@dataclass(frozen=True, slots=True)
class FleetRun:
    """What the fleet phase produced. Wall-clock seconds (Unix) unless named otherwise."""

    roles: tuple[ReplicaRole, ...]
    addresses: Mapping[str, str]
    records: pd.DataFrame
    """Server-side request records of every replica (``fleetwatch.records`` frame)."""
    client: tuple[RequestResult, ...]
    """The probe's own view of each request (probe clock: ``time.monotonic``)."""
    start_s: float
    end_s: float
    burst_s: tuple[float, float]
    """When the burst's faults were actually switched on and off."""
    planned: int
    faults: Mapping[str, Mapping[str, float]]
    """Ground truth: each replica's active faults during the run (outside the burst)."""
    dropped: int
    """Telemetry items dropped by the bounded queues (0 expected)."""
    startups: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    """Each replica's cold start: seconds per phase (weights load, KV cache, warm-up, ...)."""
    host: HostLoad | None = None
    """The machine during the traffic: load, steal, each replica's CPU wait (``host``)."""


@dataclass(frozen=True, slots=True)
class SweepLevel:
    """One closed-loop level against the healthy sweep replica."""

    concurrency: int
    requests: int
    ok: int
    output_tokens_per_s: float
    tpot_p50_s: float
    tpot_p99_s: float
    ttft_p50_s: float


def _prompt(rng: np.random.Generator, tokens: int) -> str:
    # One character is one token in the server's byte-level scheme.
    return rng.choice(_ALPHABET, size=tokens).tobytes().decode("ascii")


def _bodies(
    plan: Sequence[PlannedRequest], rng: np.random.Generator, model: str
) -> list[dict[str, Any]]:
    from fleetwatch.engine_probe.probe.client import completion_body

    return [completion_body(_prompt(rng, p.prompt_tokens), p.max_tokens, model=model) for p in plan]


def _engine(
    role: ReplicaRole,
    config: DemoConfig,
    model_config: Any,
    threads: int | None,
    startup: Any = None,
) -> Any:
    from fleetwatch.engine_probe.engine import EngineConfig, FaultConfig, LLMEngine

    return LLMEngine(
        model_config,
        EngineConfig(
            replica=role.name,
            model_name="reference",
            device="cpu",
            seed=config.seed,
            num_threads=threads,
        ),
        faults=FaultConfig(slowdown=role.slowdown, seed=config.seed),
        startup=startup,
    )


async def _burst(
    engines: Sequence[Any],
    config: DemoConfig,
    t0: float,
    clock: Callable[[], float],
    switched: list[float],
) -> None:
    start, end = config.burst_window_s
    await asyncio.sleep(max(0.0, t0 + start - clock()))
    healthy = [e.faults for e in engines]
    for e in engines:
        e.set_faults(dataclasses.replace(e.faults, error_rate=config.burst_error_rate))
    switched.append(time.time())
    try:
        await asyncio.sleep(max(0.0, t0 + end - clock()))
    finally:
        for e, f in zip(engines, healthy, strict=True):
            e.set_faults(f)
        switched.append(time.time())


async def run_fleet(
    config: DemoConfig,
    model_config: Any,
    *,
    span_file: Path,
    on_ready: OnReady | None = None,
    progress: Progress | None = None,
    grace_s: float = 0.0,
    hold: Hold | None = None,
    threads: int | None = 1,
) -> FleetRun:
    """Serve the fleet, run the planned traffic with the burst, stop, return records and times.

    ``grace_s``: seconds to keep serving after the last response (lets a scraper see the end);
    ``hold`` is then awaited with the Unix time the traffic ended, the replicas still serving.
    """
    import fleetwatch.telemetry.instrument  # noqa: F401  (first: importing telemetry.spans alone is circular)
    from fleetwatch.engine_probe.engine.startup import StartupTimer
    from fleetwatch.engine_probe.serve import start_server
    from fleetwatch.records import to_frame
    from fleetwatch.telemetry.metrics.drops import DropCounter
    from fleetwatch.telemetry.sink import MemoryRecordSink
    from fleetwatch.telemetry.spans.provider import tracer_provider

    progress = progress or SilentProgress()
    fleet_roles = roles(config)
    plan = traffic_plan(config)
    rng = np.random.default_rng(config.seed + 1)
    bodies = [_bodies(p, rng, "reference") for p in plan]
    drops = DropCounter()
    provider = tracer_provider(env={}, span_file=span_file, drops=drops)
    sinks = [MemoryRecordSink() for _ in fleet_roles]
    timers = [StartupTimer() for _ in fleet_roles]
    engines = [
        _engine(r, config, model_config, threads, t)
        for r, t in zip(fleet_roles, timers, strict=True)
    ]
    handles = []
    burst: asyncio.Task[None] | None = None
    sampler: asyncio.Task[None] | None = None
    try:
        for engine, sink, timer in zip(engines, sinks, timers, strict=True):
            handles.append(
                await start_server(
                    engine,
                    "127.0.0.1",
                    0,
                    tracer_provider=provider,
                    record_sink=sink,
                    startup=timer,
                )
            )
        await asyncio.gather(*(h.wait_ready() for h in handles))
        addresses = {
            r.name: f"127.0.0.1:{h.port}" for r, h in zip(fleet_roles, handles, strict=True)
        }
        faults = {e.replica: dict(e.active_faults) for e in engines}
        if on_ready is not None:
            await on_ready(addresses)
        total = sum(len(p) for p in plan)
        progress.phase(f"traffic: {len(engines)} replicas, {config.duration_s:g} s", total)

        def done(r: RequestResult) -> None:
            progress.advance(r.ok)

        clock = time.monotonic
        switched: list[float] = []
        lead = 0.05
        t0 = clock() + lead
        start_wall = time.time() + lead
        burst = asyncio.create_task(_burst(engines, config, t0, clock, switched))
        probe = HostProbe(engine_threads([r.name for r in fleet_roles]))
        sampler = asyncio.create_task(_sample_load(probe))
        async with _ProberGroup([h.url for h in handles], total) as probers:
            results = await asyncio.gather(
                *(
                    prober.open_loop(
                        [p.offset_s for p in planned],
                        body,
                        lead_s=lead,
                        on_done=done,
                    )
                    for prober, planned, body in zip(probers, plan, bodies, strict=True)
                )
            )
        await burst
        end_wall = time.time()
        sampler.cancel()
        host = probe.end()
        if grace_s > 0:
            await asyncio.sleep(grace_s)
        if hold is not None:
            await hold(end_wall)
    finally:
        if burst is not None and not burst.done():
            burst.cancel()
        if sampler is not None:
            sampler.cancel()
        for h in handles:
            await h.stop(drain_timeout_s=5.0)
        if provider is not None:
            provider.shutdown()
    dropped = drops.total + sum(
        h.instrumentation.drops.total for h in handles if h.instrumentation is not None
    )
    client = tuple(r for per in results for r in per)
    records = to_frame([rec for s in sinks for rec in s.records])
    return FleetRun(
        roles=fleet_roles,
        addresses=addresses,
        records=records,
        client=client,
        start_s=start_wall,
        end_s=end_wall,
        burst_s=(switched[0], switched[1]),
        planned=total,
        faults=faults,
        dropped=dropped,
        startups={e.replica: t.seconds() for e, t in zip(engines, timers, strict=True)},
        host=host,
    )


async def _sample_load(probe: HostProbe, every_s: float = 1.0) -> None:
    while True:
        await asyncio.sleep(every_s)
        probe.sample()


class _ProberGroup:
    """One ``Prober`` (own connection pool) per replica URL, entered and left together."""

    def __init__(self, urls: Sequence[str], total: int) -> None:
        from fleetwatch.engine_probe.probe.client import Prober

        self._probers = [Prober(u, max_connections=max(64, total)) for u in urls]

    async def __aenter__(self) -> list[Any]:
        for p in self._probers:
            await p.__aenter__()
        return list(self._probers)

    async def __aexit__(self, *exc: object) -> None:
        for p in self._probers:
            await p.__aexit__(*exc)


async def run_sweep(
    config: DemoConfig,
    model_config: Any,
    *,
    progress: Progress | None = None,
    threads: int | None = 1,
) -> tuple[SweepLevel, ...]:
    """Closed-loop concurrency sweep against one fresh healthy replica (telemetry off)."""
    from fleetwatch.engine_probe.probe.client import Prober, completion_body
    from fleetwatch.engine_probe.serve import start_server

    progress = progress or SilentProgress()
    role = ReplicaRole("replica-sweep", 1.0, config.short_prompt_tokens, "none")
    engine = _engine(role, config, model_config, threads)
    handle = await start_server(engine, "127.0.0.1", 0, telemetry=False)
    rng = np.random.default_rng(config.seed + 2)
    levels = []
    try:
        n = config.sweep_requests
        progress.phase("sweep: one healthy replica", n * len(config.sweep_concurrency))
        async with Prober(handle.url, max_connections=64) as prober:
            for c in config.sweep_concurrency:
                lo, hi = config.short_prompt_tokens
                bodies = [
                    completion_body(
                        _prompt(rng, int(rng.integers(lo, hi + 1))), config.sweep_max_tokens
                    )
                    for _ in range(max(n, c))
                ]
                t = time.monotonic()
                res = await prober.closed_loop(c, bodies, on_done=lambda r: progress.advance(r.ok))
                span = time.monotonic() - t
                ok = [r for r in res if r.ok]
                tpots = [r.tpot_s for r in ok if r.tpot_s is not None]
                ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
                levels.append(
                    SweepLevel(
                        concurrency=c,
                        requests=len(res),
                        ok=len(ok),
                        output_tokens_per_s=sum(r.output_tokens for r in ok) / span,
                        tpot_p50_s=percentile(tpots, 50),
                        tpot_p99_s=percentile(tpots, 99),
                        ttft_p50_s=percentile(ttfts, 50),
                    )
                )
    finally:
        await handle.stop(drain_timeout_s=5.0)
    return tuple(levels)
