"""``POST /v1/completions`` and ``POST /v1/chat/completions``: one path for both APIs.

An ``Api`` names what differs (how a body is checked, how answers are rendered, the id prefix);
the rest is shared: draining (503), the body limit (413), checks (400/404), ``Idempotency-Key``,
the queue limit (429), per-tenant token limits when on (``tenants``: 429 with ``Retry-After``,
400 for a request over the burst), then the request is admitted, its producer started (after
its turn in the tenants' fair queue), and its answer streamed or sent whole by the ``Responder``.
Every refusal goes through ``Refusals``, so it is answered as an OpenAI error and recorded as a
``rejected`` request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from fleetwatch.engine_probe.serve.front.admission import FrontDoor
from fleetwatch.engine_probe.serve.front.config import ServerConfig
from fleetwatch.engine_probe.serve.front.http_metrics import HttpMetrics
from fleetwatch.engine_probe.serve.front.idempotency import IdempotencyKeys, check_key
from fleetwatch.engine_probe.serve.front.refusals import Refusals
from fleetwatch.engine_probe.serve.front.tenants import Hold, Refusal, TenantAdmission
from fleetwatch.engine_probe.serve.inflight import InFlight
from fleetwatch.engine_probe.serve.producer import Producer
from fleetwatch.engine_probe.serve.request_context import request_context
from fleetwatch.engine_probe.serve.streaming import Responder
from fleetwatch.engine_probe.serve.wire.completions import CompletionRequest
from fleetwatch.engine_probe.serve.wire.errors import InvalidRequest, request_key
from fleetwatch.engine_probe.serve.wire.options import Limits
from fleetwatch.engine_probe.serve.wire.render import Renderer

__all__ = ["ADMITTED", "Api", "GenerateHandler"]

ADMITTED = request_key("fleetwatch.admitted")
"""Key set on an ``aiohttp`` request once it was admitted (the engine reports it from then on)."""


@dataclass(frozen=True, slots=True)
class Api:
    """What one endpoint does differently."""

    name: str
    parse: Callable[[bytes, Limits], CompletionRequest]
    render: Renderer
    id_prefix: str
    operation: str


class GenerateHandler:
    """Handles generation requests for one engine (see the module docstring)."""

    def __init__(
        self,
        *,
        replica: str,
        config: ServerConfig,
        limits: Limits,
        metrics: HttpMetrics,
        door: FrontDoor,
        keys: IdempotencyKeys,
        producer: Producer,
        responder: Responder,
        refusals: Refusals,
        clock: Callable[[], float],
        tenants: TenantAdmission | None = None,
    ) -> None:
        self.clock = clock
        """The engine's clock: a request's arrival is stamped on receipt, in engine time."""
        self.replica = replica
        self.config = config
        self.limits = limits
        self.metrics = metrics
        self.door = door
        self.keys = keys
        self.producer = producer
        self.responder = responder
        self.refusals = refusals
        self.tenants = tenants
        """Per-tenant limits and fair queue (None: off)."""
        self._ids = itertools.count()

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{self.replica}-{next(self._ids)}"

    async def handle(self, request: web.Request, api: Api) -> web.StreamResponse:
        arrived = self.clock()
        rid = self.new_id(api.id_prefix)
        traceparent = request.headers.get("traceparent")
        req: CompletionRequest | None = None
        tenant: str | None = None

        def refuse(exc: InvalidRequest, headers: dict[str, str] | None = None) -> web.Response:
            return self.refusals.refuse(
                exc,
                request_id=rid,
                operation=api.operation,
                traceparent=traceparent,
                prompt_tokens=len(req.prompt_token_ids) if req is not None else 0,
                max_tokens=req.max_tokens if req is not None else 0,
                headers=headers,
                arrival_s=arrived,
                tenant=tenant,
            )

        closed = self.door.closed()
        if closed is not None:
            return refuse(*closed)
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            limit = self.config.max_body_bytes
            return refuse(InvalidRequest(413, f"body exceeds {limit} bytes"))
        try:
            req = api.parse(raw, self.limits)
            key = request.headers.get("Idempotency-Key")
            check_key(key)
            context = request_context(request, self.config.traffic_class, streaming=req.stream)
        except InvalidRequest as exc:
            return refuse(exc)
        tenant = context.tenant
        if key is not None:
            flight = self.keys.lookup(key)
            if flight is not None:
                if flight.canonical != req.canonical:
                    return refuse(
                        InvalidRequest(
                            400,
                            "Idempotency-Key was used with a different request body",
                            "Idempotency-Key",
                            code="idempotency_key_reused",
                            reason="IdempotencyKeyReused",
                        )
                    )
                self.metrics.joins.inc()
                return await self.responder.respond(request, flight, req, api.render)
        full = self.door.full()
        if full is not None:
            return refuse(*full)
        hold: Hold | None = None
        if self.tenants is not None:
            tenant = self.tenants.tenant(context.tenant)
            context = dataclasses.replace(context, tenant=tenant)
            got = self.tenants.admit(tenant, len(req.prompt_token_ids), req.max_tokens)
            if isinstance(got, Refusal):
                return refuse(got.error, got.headers)
            hold = got
        flight = InFlight(rid, req.canonical, max_lag=self.config.max_lag)
        flight.arrival_s = arrived
        if key is not None:
            self.keys.remember(key, flight)
        self.door.admit(flight)
        request[ADMITTED] = True
        flight.producer = asyncio.create_task(
            self.producer.run(flight, req, context, api.render, hold)
        )
        return await self.responder.respond(request, flight, req, api.render)

    def crashed(self, request: web.Request, exc: BaseException, operation: str | None) -> None:
        """An unexpected fault answered 500 by the middleware: record it (as ``error``) unless the
        request was admitted, in which case the engine reports it."""
        if operation is None or request.get(ADMITTED):
            return
        self.refusals.record(
            self.new_id("err"),
            type(exc).__name__,
            status="error",
            operation=operation,
            traceparent=request.headers.get("traceparent"),
        )
