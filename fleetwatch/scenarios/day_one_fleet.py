"""Day one, as a running fleet: reference engines served as ``fleetwatch engine serve`` serves them,
and a client that uses fleetwatch's resilience library, all on 127.0.0.1 in one event loop.

- Replicas: an ``LLMEngine`` per replica behind ``start_server`` with the options ``engine serve``
  passes (``--goodput 0.5,0.05``: the goodput counter; a GPU sampler per replica:
  ``fleetwatch_gpu_available``). Each engine runs one request before it is served and observed,
  as a server warms up before taking traffic: a cold first forward pass is slow enough to fail
  the goodput target, and with windows scaled to seconds one slow request is a page.
- Step time: every engine step also waits ``STEP_S`` (``FaultConfig`` stall on every step), as a
  GPU decode step of a real model takes milliseconds. The tiny CPU model alone decodes a token
  in well under a millisecond, where a few hundred microseconds of CPU contention between
  replicas sharing the host is a 50 % difference that the outlier rules rightly flag; with the
  wait, per-token times are in the range the histogram buckets and the rules are made for, and
  the replicas sleep instead of competing for the CPU.
- Client: open-loop traffic, seeded. Interactive requests carry ``X-Fleetwatch-Traffic-Class:
  chat`` and go through a circuit breaker per replica and a retry policy with a shared budget;
  offline requests carry ``batch`` and go through a micro-batcher. The library's metrics are
  served at their own ``/metrics`` (``client_address``), as a client process would serve them.
- Faults, switched while everything runs: an outage (every engine fails every new request) and a
  slow replica (its steps take ``factor`` times as long).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from fleetwatch.engine_probe.serve.request_context import TRAFFIC_CLASS_HEADER
from fleetwatch.scenarios.day_one import GOODPUT

__all__ = ["REPLICAS", "STEP_S", "DayOneFleet", "Traffic", "model_config"]

REPLICAS: Final = 4
"""Replicas served. The outlier rules judge a fleet of three, but with three the median absolute
deviation is the gap between the two closest replicas, and two replicas landing in the same
histogram bucket make a healthy third one look far off: four, as the demo runs."""
STEP_S: Final = 0.015
"""Seconds every engine step waits on top of its computation (the device's step time)."""


def model_config(seed: int) -> Any:
    """A small model shape (``engine serve --model-config``), so that the replicas, their client
    and Prometheus share two CPU cores and still meet the 50 ms TPOT of the goodput SLO."""
    from fleetwatch.engine_probe.engine import ModelConfig

    return ModelConfig(
        num_layers=2, hidden_size=64, intermediate_size=128, num_heads=4, num_kv_heads=2, seed=seed
    )


@dataclass(frozen=True, slots=True)
class Traffic:
    """Open-loop load per replica: requests per second and sizes, seeded."""

    chat_rps: float = 1.6
    batch_rps: float = 0.5
    prompt_tokens: tuple[int, int] = (16, 48)
    chat_max_tokens: int = 12
    batch_max_tokens: int = 24
    seed: int = 0


@dataclass(slots=True)
class DayOneFleet:
    """Start with ``start()``, drive with ``run()``, switch faults, ``stop()``."""

    traffic: Traffic = field(default_factory=Traffic)
    replicas: int = REPLICAS
    handles: list[Any] = field(default_factory=list)
    engines: list[Any] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    _runner: web.AppRunner | None = None
    client_address: str = ""
    _session: aiohttp.ClientSession | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _client: Any = None

    @property
    def addresses(self) -> dict[str, str]:
        """Replica name -> ``127.0.0.1:port`` of its ``/metrics``."""
        return {
            e.replica: f"127.0.0.1:{h.port}"
            for e, h in zip(self.engines, self.handles, strict=True)
        }

    async def start(self) -> None:
        from fleetwatch.engine_probe.engine import EngineConfig, FaultConfig, LLMEngine
        from fleetwatch.engine_probe.engine.startup import StartupTimer
        from fleetwatch.engine_probe.serve import ServerConfig, start_server
        from fleetwatch.engine_probe.serve.command.telemetry_options import telemetry_options

        model = model_config(self.traffic.seed)
        for i in range(self.replicas):
            timer = StartupTimer()  # as `engine serve`: phases timed, warm-up before /ready
            engine = LLMEngine(
                model,
                EngineConfig(
                    replica=f"replica-{i}", model_name="reference", device="cpu", num_threads=1
                ),
                faults=FaultConfig(stall_every_steps=1, stall_s=STEP_S, seed=self.traffic.seed),
                startup=timer,
            )
            handle = await start_server(
                engine,
                "127.0.0.1",
                0,
                config=ServerConfig(),
                telemetry_options=telemetry_options(engine.replica, goodput=GOODPUT),
                startup=timer,
            )
            self.engines.append(engine)
            self.handles.append(handle)
        for handle in self.handles:
            if not await handle.wait_ready():
                raise RuntimeError(f"{handle.url}: warm-up failed")
        self._client = _ResilientClient(self.registry, [h.url for h in self.handles], self.outcomes)
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.client_address = f"127.0.0.1:{self._runner.addresses[0][1]}"
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256))

    async def _metrics(self, request: web.Request) -> web.Response:
        body = await asyncio.to_thread(generate_latest, self.registry)
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})

    async def run(self, stop: asyncio.Event) -> None:
        """Send open-loop traffic to every replica until ``stop`` is set."""
        t = self.traffic
        loop = asyncio.get_running_loop()
        plans = [
            (i, cls, rate)
            for i in range(self.replicas)
            for cls, rate in (("chat", t.chat_rps), ("batch", t.batch_rps))
        ]
        await asyncio.gather(
            *(
                # One seeded stream per replica and class: the same requests whatever the timing.
                self._stream(i, cls, rate, random.Random(f"{t.seed}/{i}/{cls}"), loop, stop)
                for i, cls, rate in plans
            )
        )

    async def _stream(
        self,
        replica: int,
        cls: str,
        rate: float,
        rng: random.Random,
        loop: asyncio.AbstractEventLoop,
        stop: asyncio.Event,
    ) -> None:
        t = self.traffic
        at = loop.time()
        while not stop.is_set():
            at += rng.expovariate(rate)
            lo, hi = t.prompt_tokens
            prompt = [rng.randrange(1, 2000) for _ in range(rng.randint(lo, hi))]
            max_tokens = t.chat_max_tokens if cls == "chat" else t.batch_max_tokens
            body = {"model": "reference", "prompt": prompt, "max_tokens": max_tokens}
            delay = at - loop.time()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                if stop.is_set():
                    return
            assert self._session is not None
            task = asyncio.create_task(self._client.send(self._session, replica, cls, body))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def outage(self, on: bool) -> None:
        """Every engine fails every new request (``on``), or none does."""
        for e in self.engines:
            e.set_faults(dataclasses.replace(e.faults, error_rate=1.0 if on else 0.0))

    def slow(self, replica: int, factor: float) -> None:
        """Replica ``replica``'s steps take ``factor`` times as long (1: healthy): computation
        and device wait alike."""
        e = self.engines[replica]
        e.set_faults(dataclasses.replace(e.faults, slowdown=factor, stall_s=STEP_S * factor))

    async def stop(self) -> None:
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=15)
        for task in list(self._tasks):
            task.cancel()
        if self._client is not None:
            await self._client.close()
        if self._session is not None:
            await self._session.close()
        for h in self.handles:
            await h.stop(drain_timeout_s=5.0)
        if self._runner is not None:
            await self._runner.cleanup()


class _ResilientClient:
    """Breaker per replica and a retry budget for chat; a micro-batcher for batch."""

    def __init__(self, registry: CollectorRegistry, urls: Sequence[str], outcomes: dict[str, int]):
        from fleetwatch.resilience.batcher.batcher import MicroBatcher
        from fleetwatch.resilience.batcher.config import BatcherConfig
        from fleetwatch.resilience.batcher.metrics import BatcherMetrics
        from fleetwatch.resilience.breaker import BreakerConfig, CircuitBreaker
        from fleetwatch.resilience.breaker.metrics import BreakerMetrics
        from fleetwatch.resilience.retry.budget import RetryBudget
        from fleetwatch.resilience.retry.classify import llm_http_retryable
        from fleetwatch.resilience.retry.metrics import RetryMetrics
        from fleetwatch.resilience.retry.policy import RetryPolicy

        self.urls = list(urls)
        self.outcomes = outcomes
        breaker_metrics = BreakerMetrics(registry)
        config = BreakerConfig(
            window_size=10, minimum_calls=5, wait_in_open_s=2.0, half_open_calls=2
        )
        self.breakers = [
            CircuitBreaker(f"replica-{i}", config, metrics=breaker_metrics)
            for i in range(len(self.urls))
        ]
        retry_metrics = RetryMetrics(registry)
        budget = RetryBudget(name="llm", metrics=retry_metrics)
        self.policy = RetryPolicy(
            name="chat",
            max_attempts=3,
            deadline_s=30.0,
            base_s=0.05,
            cap_s=0.5,
            retryable=llm_http_retryable,
            budget=budget,
            metrics=retry_metrics,
            rng=random.Random(1),
        )
        self.batcher: Any = MicroBatcher(
            self._batch,
            BatcherConfig(max_batch_size=4, max_wait_s=0.05),
            metrics=BatcherMetrics(registry),
            name="batch",
        )
        self._session: aiohttp.ClientSession | None = None

    async def send(
        self, session: aiohttp.ClientSession, replica: int, cls: str, body: dict[str, Any]
    ) -> None:
        self._session = session
        try:
            if cls == "batch":
                status = await self.batcher.submit((replica, body))
            else:
                breaker = self.breakers[replica]
                await self.policy.call_async(breaker.call_async, self._post, replica, cls, body)
                status = "ok"
        except Exception as exc:
            status = type(exc).__name__
        key = f"{cls}:{status}"
        self.outcomes[key] = self.outcomes.get(key, 0) + 1

    async def _post(self, replica: int, cls: str, body: dict[str, Any]) -> None:
        from fleetwatch.resilience.retry.classify import CallFailure, FailureKind, LLMCallError

        assert self._session is not None
        url = f"{self.urls[replica]}/v1/completions"
        async with self._session.post(url, json=body, headers={TRAFFIC_CLASS_HEADER: cls}) as r:
            await r.read()
            if r.status != 200:
                after = r.headers.get("Retry-After")
                failure = CallFailure(
                    FailureKind.HTTP_STATUS, r.status, retry_after_s=float(after) if after else None
                )
                raise LLMCallError(failure)

    async def _batch(self, items: list[tuple[int, dict[str, Any]]]) -> list[str]:
        async def one(replica: int, body: dict[str, Any]) -> str:
            try:
                await self._post(replica, "batch", body)
            except Exception as exc:
                return type(exc).__name__
            return "ok"

        return list(await asyncio.gather(*(one(r, b) for r, b in items)))

    async def close(self) -> None:
        await self.batcher.close()
