"""Starting and stopping servers in-process: ``start_server(engine, host, port) -> ServerHandle``.

Several servers (one engine each) can run in one process and one event loop on different ports;
the demo and the tests do exactly that. Each server has its own Prometheus registry unless one is
passed, and attaches ``fleetwatch.telemetry.instrument`` to its engine (metrics into that registry, spans on
the given tracer provider or the ``OTEL_*`` environment, records to ``record_sink``).

The listener is a ``listener.GuardedSite``: a cap on connections and a deadline on every request
head in front of aiohttp (told of each request's start and response's end by
``listener.request_hooks``), whose own limits (keep-alive, header sizes, read buffer) come from
``ServerConfig.connections`` too; request bodies have a deadline (``listener.body_deadline``).
Housekeeping runs on the loop: expired head deadlines (the guard's sweep) and expired
``Idempotency-Key`` entries. ``accept()`` failures are counted and logged once a minute at most.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from fleetwatch.engine_probe.engine.startup import StartupTimer, warm_up
from fleetwatch.engine_probe.serve.front.config import ServerConfig
from fleetwatch.engine_probe.serve.front.conn_metrics import ConnectionMetrics
from fleetwatch.engine_probe.serve.front.limits import ConnectionGuard
from fleetwatch.engine_probe.serve.front.listener import body_deadline, listen, request_hooks
from fleetwatch.engine_probe.serve.front.quiet_log import AcceptErrors, http_log
from fleetwatch.engine_probe.serve.server import CompletionServer
from fleetwatch.engine_probe.serve.startup import Readiness, publish_startup
from fleetwatch.engine_probe.serve.wire.completions import InvalidRequest
from fleetwatch.telemetry.startup import StartupMetrics

__all__ = ["ServerHandle", "start_server"]


@dataclass(slots=True)
class ServerHandle:
    """A running server: its URL, parts, and ``stop()`` (graceful: drains in-flight streams)."""

    url: str
    host: str
    port: int
    server: CompletionServer
    aengine: Any
    instrumentation: Any
    runner: web.AppRunner
    owns_engine: bool
    guard: ConnectionGuard | None = None
    housekeeping: asyncio.Task[None] | None = field(default=None, repr=False)
    readiness: Readiness | None = None
    startup: StartupTimer | None = None
    warming: asyncio.Task[None] | None = field(default=None, repr=False)

    async def wait_ready(self) -> bool:
        """Wait for the warm-up (``start_server(startup=...)``) to end; True when ready."""
        if self.warming is not None:
            await asyncio.shield(self.warming)
        return self.readiness is None or self.readiness.ready

    @property
    def registry(self) -> CollectorRegistry:
        return self.server.registry

    @property
    def engine(self) -> Any:
        return self.server.engine

    async def stop(self, drain_timeout_s: float | None = None) -> int:
        """Stop listening, drain, shut down; return the number of requests cut off by the timeout.

        Takes at most the drain timeout, plus ``telemetry_timeout_s`` for telemetry (whatever a
        span collector does), plus the time to stop the engine's current step."""
        timeout = self.server.config.drain_timeout_s if drain_timeout_s is None else drain_timeout_s
        if self.warming is not None:  # a warm-up runs in a thread: let it end
            with contextlib.suppress(Exception):
                await asyncio.shield(self.warming)
        if self.housekeeping is not None:
            self.housekeeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.housekeeping
            self.housekeeping = None
        for site in list(self.runner.sites):
            await site.stop()
        cut = await self.server.drain(timeout)
        await self.runner.cleanup()
        self.server.close()
        if self.owns_engine:
            await self.aengine.stop()
        if self.instrumentation is not None:
            # bounded (telemetry_timeout_s) and blocking: off the event loop
            timeout = self.server.config.telemetry_timeout_s
            await asyncio.to_thread(self.instrumentation.detach, timeout)
        return cut

    async def __aenter__(self) -> ServerHandle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def start_server(
    engine: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    config: ServerConfig | None = None,
    registry: CollectorRegistry | None = None,
    tracer_provider: Any = None,
    record_sink: Any = None,
    telemetry: bool = True,
    telemetry_options: dict[str, Any] | None = None,
    startup: StartupTimer | None = None,
) -> ServerHandle:
    """Serve ``engine`` (an ``LLMEngine``, or an ``AsyncEngine`` already started) on ``host:port``.

    ``port=0`` picks a free port (see ``handle.port``). An ``LLMEngine`` is wrapped in an
    ``AsyncEngine`` that the handle starts and stops; an ``AsyncEngine`` stays the caller's.

    ``startup`` (the timer the engine was built with, ``LLMEngine(startup=...)``): the listener
    opens at once (``/health`` live, ``/ready`` 503 ``warming_up``) while the engine warms up in
    the background (``handle.wait_ready()``); then the startup span and phase gauges are
    published and ``/ready`` turns 200. Needs an ``LLMEngine`` (the warm-up drives it directly).
    """
    from fleetwatch.engine_probe.engine import AsyncEngine

    entered = startup.clock() if startup is not None else 0.0
    owns = not isinstance(engine, AsyncEngine)
    aengine = AsyncEngine(engine) if owns else engine
    registry = registry if registry is not None else CollectorRegistry()
    config = config if config is not None else ServerConfig()
    instrumentation = None
    if telemetry:
        from fleetwatch.telemetry.instrument import instrument

        options = {"shutdown_timeout_s": config.telemetry_timeout_s, **(telemetry_options or {})}
        instrumentation = instrument(
            aengine.engine,
            registry=registry,
            tracer_provider=tracer_provider,
            record_sink=record_sink,
            **options,
        )
    warm = startup is not None and owns
    if owns and not warm:
        await aengine.start()
    server = CompletionServer(aengine, config=config, registry=registry)
    limits = server.config.connections
    guard = ConnectionGuard(limits)
    accept_errors = AcceptErrors.install(asyncio.get_running_loop(), limits.log_interval_s)
    logger, request_errors = http_log(limits.log_interval_s)
    registry.register(
        ConnectionMetrics(
            aengine.engine.replica,
            guard,
            lambda: accept_errors.count,
            lambda: server.keys.nbytes,
            lambda: request_errors.count,
        )
    )
    app = server.app()
    started, response_done = request_hooks(guard)
    app.middlewares.insert(0, started)
    readiness = Readiness(lambda: server.draining, "warming_up" if warm else None)
    app.router.add_get("/ready", readiness.route)
    app.middlewares.append(readiness.gate(server.metrics.code))
    timeout = InvalidRequest(408, f"request body not received within {limits.body_timeout_s:g} s")
    app.middlewares.append(
        body_deadline(limits.body_timeout_s, lambda: server.metrics.error(timeout), guard.stats)
    )
    runner, bound_port = await listen(
        app, host, port, guard, response_done, limits.handler_args(logger)
    )
    housekeeping = asyncio.create_task(_housekeeping(server, limits.sweep_interval_s))
    warming = None
    if startup is not None and warm:
        # this server's own start, marked before returning: the caller may build the next
        # replica's engine on the loop before the warm-up task first runs
        startup.mark("server_start", entered)
        metrics = StartupMetrics(aengine.engine.replica, lambda: readiness.ready)
        registry.register(metrics)
        provider = instrumentation.tracer_provider if instrumentation is not None else None
        warming = asyncio.create_task(
            _warm(aengine, instrumentation, readiness, startup, metrics, provider)
        )
    return ServerHandle(
        url=f"http://{host}:{bound_port}",
        host=host,
        port=bound_port,
        server=server,
        aengine=aengine,
        instrumentation=instrumentation,
        runner=runner,
        owns_engine=owns,
        guard=guard,
        housekeeping=housekeeping,
        readiness=readiness,
        startup=startup if warm else None,
        warming=warming,
    )


async def until_signalled() -> None:
    """Return at SIGINT, SIGTERM or SIGHUP (the serving commands then drain and stop)."""
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def _warm(
    aengine: Any,
    instrumentation: Any,
    readiness: Readiness,
    timer: StartupTimer,
    metrics: StartupMetrics,
    provider: Any,
) -> None:
    """Warm the engine up off the loop with telemetry paused (the warm-up is not traffic), start
    its step loop, then mark the server ready and publish the startup."""
    engine = aengine.engine
    if instrumentation is not None:
        instrumentation.pause()
    try:
        await asyncio.to_thread(warm_up, engine, timer)
    except Exception as exc:
        readiness.set("warmup_failed", f"{type(exc).__name__}: {exc}"[:200])
        raise
    finally:
        if instrumentation is not None:
            instrumentation.resume()
    start = timer.clock()  # from this task's turn: a wait for the loop is not this start's
    await aengine.start()
    timer.mark("readiness", start)
    readiness.set(None)
    publish_startup(timer, metrics, provider, model=engine.model_name, replica=engine.replica)


async def _housekeeping(server: CompletionServer, interval_s: float) -> None:
    """Expire ``Idempotency-Key`` entries while nobody sends keyed requests."""
    while True:
        await asyncio.sleep(max(interval_s, 1.0))
        server.keys.expire()
