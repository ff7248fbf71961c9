"""Liveness and readiness, and the cold start published as telemetry.

``/health`` answers as soon as the listener is up (the process is alive); ``/ready`` answers 200
only once the engine is warm and can serve within its SLO, and 503 with a JSON reason before
(``warming_up``), after a failed warm-up (``warmup_failed``) and while draining (``draining``).
An orchestrator routes traffic on ``/ready`` and restarts on ``/health``: a replica that loads
for minutes must not be killed for it, nor sent requests it would queue for minutes.

Generation requests that arrive before the engine is ready are answered 503 with
``Retry-After`` (``engine_not_ready``): the engine is not running yet, so they are counted by
status code only, not recorded as engine requests.

``publish_startup`` hands the timed phases to telemetry: the startup span (on the replica's
tracer provider) and ``fleetwatch_engine_startup_seconds{phase}``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from fleetwatch.engine_probe.engine.startup import StartupTimer
from fleetwatch.engine_probe.serve.wire.errors import Handler, InvalidRequest
from fleetwatch.telemetry.startup import StartupMetrics, emit_startup_span

__all__ = ["Readiness", "publish_startup"]

_log = logging.getLogger(__name__)

_GENERATION = ("/v1/completions", "/v1/chat/completions")


class Readiness:
    """Whether the server can take traffic now, and why not (``reason``: None when ready)."""

    def __init__(self, draining: Callable[[], bool], reason: str | None = None) -> None:
        self._draining = draining
        self.reason = reason
        """Why the engine is not ready (``warming_up``, ``warmup_failed``); None once warm."""
        self.detail = ""

    @property
    def why_not(self) -> str | None:
        if self._draining():
            return "draining"
        return self.reason

    @property
    def ready(self) -> bool:
        return self.why_not is None

    def set(self, reason: str | None, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail

    async def route(self, request: web.Request) -> web.Response:
        """``GET /ready``: 200 ``{"ready": true}``, or 503 ``{"ready": false, "reason": ...}``."""
        why = self.why_not
        if why is None:
            return web.json_response({"ready": True})
        body: dict[str, Any] = {"ready": False, "reason": why}
        if self.detail and why == self.reason:
            body["detail"] = self.detail
        return web.json_response(body, status=503, headers={"Retry-After": "1"})

    def gate(self, count: Callable[[int], None]) -> Any:
        """Middleware: generation requests get 503 + ``Retry-After`` until the engine is warm
        (draining is the front door's to answer); nothing is checked once ready."""

        @web.middleware
        async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
            reason = self.reason
            if reason is None or request.path not in _GENERATION:
                return await handler(request)
            err = InvalidRequest(
                503,
                f"the engine is not ready yet ({reason}); retry shortly",
                code="engine_not_ready",
                reason="NotReady",
            )
            count(503)
            return web.json_response(err.body(), status=503, headers={"Retry-After": "1"})

        return middleware


def publish_startup(
    timer: StartupTimer,
    metrics: StartupMetrics | None,
    tracer_provider: Any,
    *,
    model: str,
    replica: str,
) -> None:
    """Set the phase gauges and emit the startup span (when spans are configured)."""
    if metrics is not None:
        metrics.record(model, timer.seconds())
    if tracer_provider is None:
        return
    try:
        emit_startup_span(
            tracer_provider.get_tracer("fleetwatch.startup"),
            [(p.name, p.start_s, p.end_s) for p in timer.phases],
            model=model,
            replica=replica,
            offset_s=timer.offset_s,
        )
    except Exception:  # telemetry never takes the server down
        _log.exception("startup span not emitted")
