"""The HTTP listener and the hooks that tie aiohttp's request cycle to the ``ConnectionGuard``.

- ``GuardedSite``: a TCP listener whose connections go through a ``limits.ConnectionGuard``.
- ``request_hooks(guard)``: a middleware that tells the guard a request head is in (aiohttp began
  handling it) and an access-logger class, called by aiohttp once each response is written, that
  tells it the response is done (so the next head's deadline can start). The logger logs nothing.
- ``body_deadline``: a middleware bounding the time from a request head to the end of its body.
- ``listen``: run an app on a ``GuardedSite`` with those hooks; the one way both servers listen.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.web_request import BaseRequest

from fleetwatch.engine_probe.serve.front.limits import ConnectionGuard, ConnectionStats

__all__ = ["BodyTimeout", "GuardedSite", "body_deadline", "listen", "request_hooks"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

HOOK_LOGGER = logging.getLogger("fleetwatch.serve.responses")
"""The logger aiohttp is given with ``request_hooks``' access-logger class (never written to)."""


def request_hooks(guard: ConnectionGuard) -> tuple[Any, type[AbstractAccessLogger]]:
    """The middleware (outermost) and the access-logger class (``web.AppRunner(access_log_class=,
    access_log=HOOK_LOGGER)``) that report each request's start and each response's end."""

    @web.middleware
    async def started(request: web.Request, handler: Handler) -> web.StreamResponse:
        guard.request_started(request.protocol)
        return await handler(request)

    class ResponseDone(AbstractAccessLogger):
        def log(self, request: BaseRequest, response: web.StreamResponse, time: float) -> None:
            guard.response_done(request.protocol, request.content)

        @property
        def enabled(self) -> bool:
            return True

    return started, ResponseDone


async def listen(
    app: web.Application,
    host: str,
    port: int,
    guard: ConnectionGuard,
    response_done: type[AbstractAccessLogger],
    handler_args: dict[str, Any],
) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on a ``GuardedSite`` (``response_done`` from ``request_hooks``, whose
    middleware the app already has); returns the runner and the port it bound."""
    runner = web.AppRunner(
        app,
        handle_signals=False,
        handler_cancellation=True,
        access_log_class=response_done,
        access_log=HOOK_LOGGER,
        **handler_args,
    )
    await runner.setup()
    site = GuardedSite(runner, host, port, guard, backlog=4096)
    await site.start()
    return runner, int(runner.addresses[0][1])


class GuardedSite(web.BaseSite):
    """A TCP listener whose connections go through a ``ConnectionGuard``."""

    __slots__ = ("_bound_port", "_guard", "_host", "_port")

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str,
        port: int,
        guard: ConnectionGuard,
        *,
        backlog: int = 4096,
    ) -> None:
        super().__init__(runner, backlog=backlog)
        self._host = host
        self._port = port
        self._bound_port: int | None = None
        self._guard = guard

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._bound_port or self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._guard.protocol_factory(server),
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=True,
        )
        self._bound_port = int(self._server.sockets[0].getsockname()[1])
        self._guard.start()

    async def stop(self) -> None:
        self._guard.stop()
        await super().stop()


class BodyTimeout(Exception):
    """A request body did not fully arrive in time (raised inside the handler's body read)."""


def body_deadline(
    timeout_s: float, answer: Callable[[], web.Response], stats: ConnectionStats | None = None
) -> Any:
    """Middleware: a request whose body has not fully arrived ``timeout_s`` after its head fails
    its body read with ``BodyTimeout``, answered by ``answer()`` (a 408) on a closing connection.
    The handler reads the body itself as before, so its own size limit (413) still applies."""

    @web.middleware
    async def deadline(request: web.Request, handler: Handler) -> web.StreamResponse:
        content = request.content
        if not request.body_exists or content.is_eof():
            return await handler(request)

        def expire() -> None:
            if not content.is_eof():
                content.set_exception(BodyTimeout(f"body not received within {timeout_s:g} s"))

        timer = asyncio.get_running_loop().call_later(timeout_s, expire)
        try:
            return await handler(request)
        except BodyTimeout:
            if stats is not None:
                stats.body_timeouts += 1
            resp = answer()
            resp.force_close()
            return resp
        finally:
            timer.cancel()

    return deadline
