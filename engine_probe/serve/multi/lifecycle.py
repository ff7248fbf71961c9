"""Starting and stopping a several-model server in-process (``MultiModelServer`` on a port).

The listener is the single-model server's (``listener.GuardedSite``: a connection cap and a
deadline on every request head, told of requests and responses by ``listener.request_hooks``),
with the same body deadline; models load on demand behind it.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from fleetwatch.engine_probe.serve.front.limits import ConnectionGuard
from fleetwatch.engine_probe.serve.front.listener import body_deadline, listen, request_hooks
from fleetwatch.engine_probe.serve.front.quiet_log import http_log
from fleetwatch.engine_probe.serve.multi.server import MultiModelServer
from fleetwatch.engine_probe.serve.wire.completions import InvalidRequest

__all__ = ["MultiModelHandle", "start_multi_model_server"]


@dataclass(slots=True)
class MultiModelHandle:
    """A running several-model server: its URL and ``stop()`` (drains, unloads every model)."""

    url: str
    port: int
    server: MultiModelServer
    runner: web.AppRunner

    async def stop(self) -> None:
        for site in list(self.runner.sites):
            await site.stop()
        await self.server.close()
        await self.runner.cleanup()

    async def __aenter__(self) -> MultiModelHandle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def start_multi_model_server(
    server: MultiModelServer, host: str = "127.0.0.1", port: int = 0
) -> MultiModelHandle:
    """Serve ``server`` on ``host:port`` (``port=0``: any free port); no model is loaded yet."""
    limits = server.config.connections
    guard = ConnectionGuard(limits)
    logger, _ = http_log(limits.log_interval_s)
    app = server.app()
    started, response_done = request_hooks(guard)
    app.middlewares.insert(0, started)
    timeout = InvalidRequest(408, f"request body not received within {limits.body_timeout_s:g} s")
    app.middlewares.append(
        body_deadline(limits.body_timeout_s, lambda: server.refuse(timeout), guard.stats)
    )
    runner, bound = await listen(app, host, port, guard, response_done, limits.handler_args(logger))
    return MultiModelHandle(f"http://{host}:{bound}", bound, server, runner)
