"""Starting and stopping servers in-process: ``start_server(engine, host, port) -> ServerHandle``.

Several servers (one engine each) can run in one process and one event loop on different ports;
the demo and the tests do exactly that. Each server has its own Prometheus registry unless one is
passed, and attaches ``telemetry.instrument`` to its engine (metrics into that registry, spans on
the given tracer provider or the ``OTEL_*`` environment, records to ``record_sink``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from engine_probe.serve.config import ServerConfig
from engine_probe.serve.server import CompletionServer

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

    @property
    def registry(self) -> CollectorRegistry:
        return self.server.registry

    @property
    def engine(self) -> Any:
        return self.server.engine

    async def stop(self, drain_timeout_s: float | None = None) -> int:
        """Stop listening, drain, shut down; return the number of requests cut off by the timeout."""
        timeout = self.server.config.drain_timeout_s if drain_timeout_s is None else drain_timeout_s
        for site in list(self.runner.sites):
            await site.stop()
        cut = await self.server.drain(timeout)
        await self.runner.cleanup()
        self.server.close()
        if self.owns_engine:
            await self.aengine.stop()
        if self.instrumentation is not None:
            self.instrumentation.detach()
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
) -> ServerHandle:
    """Serve ``engine`` (an ``LLMEngine``, or an ``AsyncEngine`` already started) on ``host:port``.

    ``port=0`` picks a free port (see ``handle.port``). An ``LLMEngine`` is wrapped in an
    ``AsyncEngine`` that the handle starts and stops; an ``AsyncEngine`` stays the caller's.
    """
    from engine_probe.engine import AsyncEngine

    owns = not isinstance(engine, AsyncEngine)
    aengine = AsyncEngine(engine) if owns else engine
    registry = registry if registry is not None else CollectorRegistry()
    instrumentation = None
    if telemetry:
        from telemetry.instrument import instrument

        instrumentation = instrument(
            aengine.engine,
            registry=registry,
            tracer_provider=tracer_provider,
            record_sink=record_sink,
            **(telemetry_options or {}),
        )
    if owns:
        await aengine.start()
    server = CompletionServer(aengine, config=config, registry=registry)
    runner = web.AppRunner(
        server.app(), handle_signals=False, handler_cancellation=True, access_log=None
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096)
    await site.start()
    bound_port = int(runner.addresses[0][1])
    return ServerHandle(
        url=f"http://{host}:{bound_port}",
        host=host,
        port=bound_port,
        server=server,
        aengine=aengine,
        instrumentation=instrumentation,
        runner=runner,
        owns_engine=owns,
    )
