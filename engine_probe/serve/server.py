"""The OpenAI-compatible HTTP server for the reference engine (aiohttp).

Routes: ``POST /v1/completions`` (SSE streaming with usage in the last chunk, or one JSON body),
``GET /metrics`` (the server's Prometheus registry: engine telemetry plus the HTTP counters below),
``GET /health`` and ``GET /v1/models``.

Behaviour that matters under load:

- Admission: at most ``max_queue`` requests may wait for their first token; beyond that the answer
  is 429 with ``Retry-After`` (seconds, from the recent mean request time). The engine's own
  rejection (``EngineConfig.max_waiting``) is answered 429 too. Headers are sent with the first
  output, so a request refused by the engine still gets a proper status code.
- A client that disconnects cancels its handler (aiohttp handler cancellation); when no reader is
  left the engine request is aborted and its KV blocks are freed at once.
- ``Idempotency-Key``: a request carrying a key seen within ``idempotency_ttl_s`` attaches to that
  request (in flight or finished ok) and replays its stream: the work is done once. The same key
  with a different body is refused (422); a key whose request was aborted or failed runs anew.
- Slow readers: a streaming reader more than ``max_lag`` outputs behind is dropped (its connection
  closed); if it was the only reader the request is aborted.
- ``X-Fleetwatch-Traffic-Class`` names the request's traffic class (``request_context``; the
  server's default otherwise), which labels its metrics, span and record.
- ``traceparent`` and ``tracestate`` (W3C) are handed to the engine as sent; telemetry's W3C
  propagator decides: the request's span continues a valid one, and an invalid one starts a new
  trace (as the spec says). The HTTP method, route, server address and port, and the rule for the
  status code answered go with them, for the span's ``http.*`` and ``server.*`` attributes.
- ``ServerHandle.stop()`` drains (``drain`` here): the listener closes and new requests get 503, in-flight streams finish (up to
  ``drain_timeout_s``), then the rest are aborted.

This module wires the parts and handles ``POST /v1/completions``; beside it: ``front_door``
(queue limit, 429, drain), ``idempotency``, ``producer`` (the engine side), ``streaming`` (the
HTTP side), ``render`` (SSE and JSON bodies), ``status`` (health, models, metrics routes).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from engine_probe.serve.config import ServerConfig
from engine_probe.serve.front_door import FrontDoor
from engine_probe.serve.http_metrics import HttpMetrics
from engine_probe.serve.idempotency import IdempotencyKeys, check_key
from engine_probe.serve.inflight import InFlight
from engine_probe.serve.producer import Producer
from engine_probe.serve.queue_times import QueueTimes
from engine_probe.serve.render import Renderer
from engine_probe.serve.request_context import request_context
from engine_probe.serve.status import StatusRoutes
from engine_probe.serve.streaming import Responder
from engine_probe.serve.validation import InvalidRequest, Limits, parse_completion

__all__ = ["CompletionServer"]


class CompletionServer:
    """Serves one ``AsyncEngine`` (started by the caller). Build the app with ``app()``."""

    def __init__(
        self,
        aengine: Any,
        *,
        config: ServerConfig | None = None,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.aengine = aengine
        engine = aengine.engine
        self.engine = engine
        self.config = cfg = config or ServerConfig()
        self.registry = registry if registry is not None else CollectorRegistry()
        self.clock = clock
        self.wall_clock = wall_clock
        mc = engine.model_config
        self.limits = Limits(
            vocab_size=mc.vocab_size,
            context_tokens=mc.max_position_embeddings,
            model_name=engine.model_name,
            max_tokens_cap=cfg.max_tokens_cap,
        )
        self.metrics = HttpMetrics(self.registry, engine.replica)
        self.queue_times = QueueTimes()
        self._detach_queue_times = engine.attach(self.queue_times)
        self.door = FrontDoor(engine, cfg, self.metrics)
        self.keys = IdempotencyKeys(cfg.idempotency_ttl_s, cfg.idempotency_max_keys, clock)
        render = Renderer(self.limits.model_name, wall_clock)
        self.producer = Producer(aengine, self.door, render, self.queue_times, clock)
        self.responder = Responder(cfg, self.metrics, self.door, render)
        self.status = StatusRoutes(engine, self.door, self.limits.model_name, self.registry)
        self._ids = itertools.count()

    @property
    def waiting(self) -> int:
        """Admitted requests without a first output yet."""
        return self.door.waiting

    @property
    def draining(self) -> bool:
        return self.door.draining

    @property
    def flights(self) -> set[InFlight]:
        return self.door.flights

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_body_bytes)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/metrics", self.status.metrics)
        app.router.add_get("/health", self.status.health)
        app.router.add_get("/v1/models", self.status.models)
        return app

    async def completions(self, request: web.Request) -> web.StreamResponse:
        closed = self.door.closed()
        if closed is not None:
            return closed
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self.metrics.error(
                InvalidRequest(413, f"body exceeds {self.config.max_body_bytes} bytes")
            )
        try:
            req = parse_completion(raw, self.limits)
            key = request.headers.get("Idempotency-Key")
            check_key(key)
            context = request_context(request, self.config.traffic_class, streaming=req.stream)
        except InvalidRequest as exc:
            return self.metrics.error(exc)
        if key is not None:
            flight = self.keys.lookup(key)
            if flight is not None:
                if flight.canonical != req.canonical:
                    return self.metrics.error(
                        InvalidRequest(
                            422,
                            "Idempotency-Key was used with a different request body",
                            "Idempotency-Key",
                        )
                    )
                self.metrics.joins.inc()
                return await self.responder.respond(request, flight, req)
        full = self.door.full()
        if full is not None:
            return full
        rid = f"cmpl-{self.engine.replica}-{next(self._ids)}"
        flight = InFlight(rid, req.canonical, max_lag=self.config.max_lag)
        if key is not None:
            self.keys.remember(key, flight)
        self.door.admit(flight)
        flight.producer = asyncio.create_task(self.producer.run(flight, req, context))
        return await self.responder.respond(request, flight, req)

    def close(self) -> None:
        """Detach from the engine (after ``drain``)."""
        self._detach_queue_times()

    async def drain(self, timeout_s: float) -> int:
        """Refuse new work and wait for in-flight requests; return how many were still running."""
        return await self.door.drain(timeout_s)
