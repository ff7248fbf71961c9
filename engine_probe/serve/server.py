"""The OpenAI-compatible HTTP server for the reference engine (aiohttp).

Routes: ``POST /v1/completions`` and ``POST /v1/chat/completions`` (SSE streaming, with a usage
chunk when ``stream_options.include_usage`` asks for it, or one JSON body with usage),
``GET /metrics`` (the server's Prometheus registry: engine telemetry plus the HTTP counters below),
``GET /health``, ``GET /v1/models`` and ``GET /v1/models/{model}``. Errors are OpenAI error
objects with OpenAI's status codes (``errors``), unknown routes included.

Behaviour that matters under load:

- Admission: at most ``max_queue`` requests may wait for their first token; beyond that the answer
  is 429 with ``Retry-After`` (seconds, from the recent mean request time). The engine's own
  rejection (``EngineConfig.max_waiting``) is answered 429 too. Headers are sent with the first
  output, so a request refused by the engine still gets a proper status code.
- A client that disconnects cancels its handler (aiohttp handler cancellation); when no reader is
  left the engine request is aborted and its KV blocks are freed at once.
- ``Idempotency-Key``: a request carrying a key seen within ``idempotency_ttl_s`` attaches to that
  request (in flight or finished ok) and replays its stream: the work is done once. The same key
  with a different body is refused (400); a key whose request was aborted or failed runs anew.
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

- Every refusal at the front door (draining, body too large, invalid, queue full) is recorded as
  a ``rejected`` request (``refusals``): a record, a span, a count in ``fleetwatch_requests_total``.

This module wires the parts; beside it: ``handler`` (both generation routes), ``validation`` and
``chat`` (checking bodies), ``front_door`` (queue limit, 429, drain), ``idempotency``,
``producer`` (the engine side, stop strings), ``streaming`` (the HTTP side), ``render`` and
``chat_render`` (SSE and JSON bodies), ``status`` (health, models, metrics routes).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from fleetwatch.engine_probe.serve.front.admission import FrontDoor
from fleetwatch.engine_probe.serve.front.config import ServerConfig
from fleetwatch.engine_probe.serve.front.http_metrics import HttpMetrics
from fleetwatch.engine_probe.serve.front.idempotency import IdempotencyKeys
from fleetwatch.engine_probe.serve.front.refusals import Refusals
from fleetwatch.engine_probe.serve.front.tenants import TenantAdmission
from fleetwatch.engine_probe.serve.handler import Api, GenerateHandler
from fleetwatch.engine_probe.serve.inflight import InFlight
from fleetwatch.engine_probe.serve.producer import Producer
from fleetwatch.engine_probe.serve.queue_times import QueueTimes
from fleetwatch.engine_probe.serve.status import StatusRoutes
from fleetwatch.engine_probe.serve.streaming import Responder
from fleetwatch.engine_probe.serve.wire.chat import parse_chat
from fleetwatch.engine_probe.serve.wire.chat_render import ChatRenderer
from fleetwatch.engine_probe.serve.wire.completions import Limits, parse_completion
from fleetwatch.engine_probe.serve.wire.errors import error_middleware
from fleetwatch.engine_probe.serve.wire.render import Renderer

__all__ = ["CompletionServer", "request_limits"]


def request_limits(model: Any, engine: Any, config: ServerConfig) -> Limits:
    """What a request to the model with these configs may ask (``ModelConfig``,
    ``EngineConfig``): known before the model is loaded."""
    return Limits(
        vocab_size=model.vocab_size,
        context_tokens=model.max_position_embeddings,
        model_name=engine.model_name,
        max_tokens_cap=config.max_tokens_cap,
        kv_blocks=engine.num_blocks,
        block_size=engine.block_size,
    )


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
        tenants: TenantAdmission | None = None,
    ) -> None:
        """``tenants``: a tenant gate shared with other servers (several models behind one
        front); None builds this server's own from ``config.tenants`` (when on)."""
        self.aengine = aengine
        engine = aengine.engine
        self.engine = engine
        self.config = cfg = config or ServerConfig()
        self.registry = registry if registry is not None else CollectorRegistry()
        self.clock = clock
        self.wall_clock = wall_clock
        self.limits = request_limits(engine.model_config, engine.engine_config, cfg)
        self.metrics = HttpMetrics(self.registry, engine.replica)
        self.queue_times = QueueTimes()
        self._detach_queue_times = engine.attach(self.queue_times)
        self.door = FrontDoor(engine, cfg, self.metrics)
        self.keys = IdempotencyKeys(
            cfg.idempotency_ttl_s,
            cfg.idempotency_max_keys,
            clock,
            max_bytes=cfg.idempotency_max_bytes,
        )
        name = self.limits.model_name
        render = Renderer(name, wall_clock)
        self.producer = Producer(aengine, self.door, render, self.queue_times, clock)
        self.responder = Responder(cfg, self.metrics, self.door)
        self.status = StatusRoutes(engine, self.door, name, self.registry, int(wall_clock()))
        self.refusals = Refusals(aengine, self.metrics)
        self.apis = {
            "/v1/completions": Api(
                "completions", parse_completion, render, "cmpl", "text_completion"
            ),
            "/v1/chat/completions": Api(
                "chat", parse_chat, ChatRenderer(name, wall_clock), "chatcmpl", "chat"
            ),
        }
        self.tenants = tenants
        if self.tenants is None and cfg.tenants is not None:
            self.tenants = TenantAdmission.build(
                cfg.tenants,
                slots=engine.engine_config.max_num_seqs,
                registry=self.registry,
                replica=engine.replica,
                clock=clock,
            )
        self.handler = GenerateHandler(
            replica=engine.replica,
            config=cfg,
            limits=self.limits,
            metrics=self.metrics,
            door=self.door,
            keys=self.keys,
            producer=self.producer,
            responder=self.responder,
            refusals=self.refusals,
            clock=engine.clock,
            tenants=self.tenants,
        )

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
        def crashed(request: web.Request, exc: BaseException) -> None:
            api = self.apis.get(request.path)
            self.handler.crashed(request, exc, api.operation if api is not None else None)

        app = web.Application(
            client_max_size=self.config.max_body_bytes,
            middlewares=[error_middleware(self.metrics.code, crashed)],
        )
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/metrics", self.status.metrics)
        app.router.add_get("/health", self.status.health)
        app.router.add_get("/v1/models", self.status.models)
        app.router.add_get("/v1/models/{model:.+}", self.status.model)
        return app

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self.handler.handle(request, self.apis["/v1/completions"])

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self.handler.handle(request, self.apis["/v1/chat/completions"])

    def close(self) -> None:
        """Detach from the engine (after ``drain``)."""
        self._detach_queue_times()

    async def drain(self, timeout_s: float) -> int:
        """Refuse new work and wait for in-flight requests; return how many were still running."""
        return await self.door.drain(timeout_s)
