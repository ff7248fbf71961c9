"""Several reference-engine models behind one OpenAI-compatible server, resident within a byte
budget (``model_cache``): ``fleetwatch engine serve --model NAME=CONFIG ... --model-cache-bytes``.

The request's ``model`` field picks the model; an unknown one is a 404 ``model_not_found``, as
OpenAI answers. A model that is not resident is loaded on demand: a cold start timed phase by
phase (weights load, KV cache allocation, warm-up, readiness) into the same startup span and
``fleetwatch_engine_startup_seconds{model,phase}`` as a single-model server's. While it loads, its
requests wait; the request then runs through that model's own server (``CompletionServer``:
same checks, streaming, refusals, records) holding a lease that pins the model until the
response is complete. A model that cannot be made resident is a 503 naming the reason
(``model_too_large``, or ``model_cache_full`` with ``Retry-After`` while every resident model
serves requests).

A request's body and headers are checked against its model's limits (known from its configs)
before it may load or evict anything: an invalid request costs no load. Tenant limits (when on)
are one gate for the whole server, shared by every model and kept across evictions and reloads:
a tenant's budget does not multiply with the models it asks for.

Each loaded model has its own Prometheus registry; ``/metrics`` merges them with the server's
own (cache metrics, startup gauges) into one body (``merged_metrics``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from fleetwatch.engine_probe.engine.config import EngineConfig, ModelConfig
from fleetwatch.engine_probe.engine.startup import StartupTimer, warm_up
from fleetwatch.engine_probe.serve.front.config import ServerConfig
from fleetwatch.engine_probe.serve.front.http_metrics import HttpMetrics
from fleetwatch.engine_probe.serve.front.tenants import TenantAdmission
from fleetwatch.engine_probe.serve.multi.cache import CacheRefusal, ModelCache, retry_after_header
from fleetwatch.engine_probe.serve.multi.cache_metrics import CacheMetrics
from fleetwatch.engine_probe.serve.multi.merged_metrics import merged_exposition
from fleetwatch.engine_probe.serve.server import CompletionServer, request_limits
from fleetwatch.engine_probe.serve.startup import publish_startup
from fleetwatch.engine_probe.serve.wire.errors import InvalidRequest
from fleetwatch.telemetry.startup import StartupMetrics

__all__ = ["Loaded", "MultiModelServer", "ServedModel", "parse_model_flag", "served_models"]

_ROUTES = {"/v1/completions", "/v1/chat/completions"}


@dataclass(frozen=True, slots=True)
class ServedModel:
    """A model the server may load: its name (what clients send as ``model``) and configs."""

    name: str
    model: ModelConfig
    engine: EngineConfig

    @property
    def size_bytes(self) -> int:
        """Its footprint once loaded (weights, KV cache, scratch, headroom: ``preflight``)."""
        from fleetwatch.engine_probe.engine.preflight import estimate_memory

        return estimate_memory(self.model, self.engine).total


@dataclass(slots=True)
class Loaded:
    """A resident model: its server (engine, registry, telemetry) and its last cold start."""

    server: CompletionServer
    aengine: Any
    instrumentation: Any
    registry: CollectorRegistry
    timer: StartupTimer


class _NoClose:
    """A shared record sink handed to one model's telemetry: an eviction flushes, never closes."""

    def __init__(self, sink: Any) -> None:
        self._sink = sink

    def write(self, records: Any) -> None:
        self._sink.write(records)

    def flush(self) -> None:
        self._sink.flush()

    def close(self) -> None:
        self._sink.flush()


class MultiModelServer:
    """The front of several models (see the module docstring). Build the app with ``app()``."""

    def __init__(
        self,
        models: Sequence[ServedModel],
        budget_bytes: int,
        *,
        replica: str = "replica-0",
        config: ServerConfig | None = None,
        registry: CollectorRegistry | None = None,
        tracer_provider: Any = None,
        record_sink: Any = None,
        telemetry_options: Callable[[str], dict[str, Any]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.models = {m.name: m for m in models}
        self.replica = replica
        self.config = config or ServerConfig()
        self.registry = registry if registry is not None else CollectorRegistry()
        self.tracer_provider = tracer_provider
        self.record_sink = _NoClose(record_sink) if record_sink is not None else None
        self.telemetry_options = telemetry_options
        self.clock = clock
        self.draining = False
        self.created = int(time.time())
        self.metrics = HttpMetrics(self.registry, replica)
        self.startup = StartupMetrics(replica, lambda: not self.draining)
        self.registry.register(self.startup)
        self.limits = {
            name: request_limits(m.model, m.engine, self.config) for name, m in self.models.items()
        }
        self.tenants = (  # one gate for every model: a tenant's budget is the server's
            TenantAdmission.build(
                self.config.tenants,
                slots=sum(m.engine.max_num_seqs for m in self.models.values()),
                registry=self.registry,
                replica=replica,
                clock=clock,
            )
            if self.config.tenants is not None
            else None
        )
        sizes = {name: m.size_bytes for name, m in self.models.items()}
        events = CacheMetrics(self.registry, replica, list(self.models), budget_bytes)
        self.cache: ModelCache[Loaded] = ModelCache(
            budget_bytes, sizes, self._load, self._unload, clock=clock, events=events
        )
        events.changed(self.cache)

    # -- loading -------------------------------------------------------------------------------

    async def _load(self, name: str) -> Loaded:
        """A cold start of ``name``: build (weights, KV cache) and warm up off the loop, then
        attach telemetry, start the step loop and publish the phases."""
        from fleetwatch.engine_probe.engine import AsyncEngine, LLMEngine
        from fleetwatch.telemetry.instrument import instrument

        spec = self.models[name]
        timer = StartupTimer(clock=self.clock)

        def build() -> Any:
            engine = LLMEngine(spec.model, spec.engine, startup=timer)
            warm_up(engine, timer)
            return engine

        engine = await asyncio.to_thread(build)
        start = timer.last_end_s
        registry = CollectorRegistry()
        options: dict[str, Any] = {"shutdown_timeout_s": self.config.telemetry_timeout_s}
        if self.telemetry_options is not None:
            options.update(self.telemetry_options(name))
        instrumentation = instrument(
            engine,
            registry=registry,
            tracer_provider=self.tracer_provider,
            record_sink=self.record_sink,
            **options,
        )
        aengine = AsyncEngine(engine)
        await aengine.start()
        server = CompletionServer(
            aengine, config=self.config, registry=registry, tenants=self.tenants
        )
        timer.mark("readiness", start)
        provider = instrumentation.tracer_provider
        publish_startup(timer, self.startup, provider, model=name, replica=engine.replica)
        return Loaded(server, aengine, instrumentation, registry, timer)

    async def _unload(self, name: str, loaded: Loaded) -> None:
        """Stop a model without leases: drain (its last producers end), stop, detach."""
        await loaded.server.drain(self.config.drain_timeout_s)
        loaded.server.close()
        await loaded.aengine.stop()
        await asyncio.to_thread(loaded.instrumentation.detach, self.config.telemetry_timeout_s)

    # -- HTTP ----------------------------------------------------------------------------------

    def app(self) -> web.Application:
        from fleetwatch.engine_probe.serve.wire.errors import error_middleware

        app = web.Application(
            client_max_size=self.config.max_body_bytes,
            middlewares=[error_middleware(self.metrics.code)],
        )
        app.router.add_post("/v1/completions", self.generate)
        app.router.add_post("/v1/chat/completions", self.generate)
        app.router.add_get("/metrics", self.metrics_route)
        app.router.add_get("/health", self.health)
        app.router.add_get("/ready", self.ready)
        app.router.add_get("/v1/models", self.list_models)
        app.router.add_get("/v1/models/{model:.+}", self.one_model)
        return app

    def refuse(self, err: InvalidRequest, headers: Mapping[str, str] | None = None) -> web.Response:
        self.metrics.code(err.status)
        return web.json_response(err.body(), status=err.status, headers=headers)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        if self.draining:
            return self.refuse(InvalidRequest(503, "server is shutting down"), {"Retry-After": "1"})
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            limit = self.config.max_body_bytes
            return self.refuse(InvalidRequest(413, f"body exceeds {limit} bytes"))
        try:
            name = self._model_of(raw)
            self._check(request, raw, name)
        except InvalidRequest as exc:
            return self.refuse(exc)
        try:
            async with self.cache.lease(name) as loaded:
                api = loaded.server.apis[request.path]
                return await loaded.server.handler.handle(request, api)
        except CacheRefusal as exc:
            code = "model_too_large" if exc.reason == "too_large" else "model_cache_full"
            err = InvalidRequest(503, exc.message, "model", code=code, reason="ModelNotResident")
            return self.refuse(err, retry_after_header(exc))

    def _check(self, request: web.Request, raw: bytes, name: str) -> None:
        """The checks that need no loaded model (the body against the model's limits, the
        headers), before the request may cost a load or an eviction: ``InvalidRequest``."""
        from fleetwatch.engine_probe.serve.front.idempotency import check_key
        from fleetwatch.engine_probe.serve.request_context import request_context
        from fleetwatch.engine_probe.serve.wire.chat import parse_chat
        from fleetwatch.engine_probe.serve.wire.completions import parse_completion

        parse = parse_completion if request.path == "/v1/completions" else parse_chat
        req = parse(raw, self.limits[name])
        check_key(request.headers.get("Idempotency-Key"))
        request_context(request, self.config.traffic_class, streaming=req.stream)

    def _model_of(self, raw: bytes) -> str:
        """The ``model`` field: 400 when the body is not a JSON object or has no model name, 404
        (``model_not_found``) when it is not one of the served models."""
        from fleetwatch.engine_probe.serve.wire.options import load_body

        body = load_body(raw)
        name = body.get("model")
        if not isinstance(name, str) or not name:
            raise InvalidRequest(400, "'model' must name one of the served models", "model")
        if name not in self.models:
            served = ", ".join(sorted(self.models))
            raise InvalidRequest(
                404,
                f"the model {name[:80]!r} does not exist here (served: {served})",
                "model",
                code="model_not_found",
            )
        return name

    def _model_object(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": self.created, "owned_by": "fleetwatch"}

    async def list_models(self, request: web.Request) -> web.Response:
        data = [self._model_object(n) for n in self.models]
        return web.json_response({"object": "list", "data": data})

    async def one_model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name not in self.models:
            msg = f"the model {name[:80]!r} does not exist here"
            return self.refuse(InvalidRequest(404, msg, "model", code="model_not_found"))
        return web.json_response(self._model_object(name))

    async def health(self, request: web.Request) -> web.Response:
        cache = self.cache
        models = {
            n: {"resident": n in cache.resident_names(), "requests": cache.pins(n)}
            for n in self.models
        }
        body = {
            "status": "draining" if self.draining else "ok",
            "replica": self.replica,
            "resident_bytes": cache.resident_bytes,
            "budget_bytes": cache.budget_bytes,
            "models": models,
        }
        return web.json_response(body)

    async def ready(self, request: web.Request) -> web.Response:
        """200 unless draining, with no model resident too: models load on a request, so a 503
        until one is would keep a balancer from sending the request that loads it."""
        if self.draining:
            return web.json_response({"ready": False, "reason": "draining"}, status=503)
        return web.json_response({"ready": True})

    async def metrics_route(self, request: web.Request) -> web.Response:
        parts = {}
        for name in self.cache.resident_names():
            entry = self.cache.entry(name)
            if entry is not None and entry.value is not None:
                parts[name] = entry.value.registry
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = await asyncio.to_thread(merged_exposition, self.registry, parts, encoder)
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = content_type
        return resp

    async def close(self) -> None:
        """Refuse new requests, let a load in progress end, drain and unload every resident
        model (one loaded by that last load included)."""
        self.draining = True
        await self.cache.join()
        for name in self.cache.resident_names():
            entry = self.cache.entry(name)
            if entry is not None and entry.value is not None:
                await self._unload(name, entry.value)


def served_models(
    specs: Sequence[tuple[str, ModelConfig]], engine_config: Callable[[str], EngineConfig]
) -> list[ServedModel]:
    """``ServedModel``s from (name, model config) pairs; the engine config is per name."""
    return [ServedModel(name, model, engine_config(name)) for name, model in specs]


def parse_model_flag(text: str) -> tuple[str, str]:
    """``NAME=CONFIG`` (``--model``) as (name, config path or ``default``)."""
    name, sep, source = text.partition("=")
    if not sep or not name or not source:
        raise ValueError(f"--model wants NAME=CONFIG (a config.json, or 'default'), got {text!r}")
    if json.dumps(name)[1:-1] != name or len(name) > 128:
        raise ValueError(f"--model name {name[:40]!r} must be plain text of 128 characters or less")
    return name, source
