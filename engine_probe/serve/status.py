"""The read-only routes: ``GET /health``, ``GET /v1/models``, ``GET /v1/models/{model}`` and
``GET /metrics``. Model objects are OpenAI's: ``id``, ``object``, ``created`` (the second the
server started), ``owned_by``; an unknown model id is a 404 error object."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from fleetwatch.engine_probe.serve.front.admission import FrontDoor
from fleetwatch.engine_probe.serve.wire.errors import InvalidRequest

__all__ = ["StatusRoutes"]


class StatusRoutes:
    """Handlers reporting on one engine and its front door; ``/health`` is 503 while draining."""

    def __init__(
        self,
        engine: Any,
        door: FrontDoor,
        model_name: str,
        registry: CollectorRegistry,
        created: int = 0,
    ) -> None:
        self.engine = engine
        self.door = door
        self.model_name = model_name
        self.registry = registry
        self.created = created

    async def health(self, request: web.Request) -> web.Response:
        e = self.engine
        door = self.door
        body = {
            "status": "draining" if door.draining else "ok",
            "replica": e.replica,
            "model": e.model_name,
            "running": e.num_running,
            "waiting": e.num_waiting,
            "queue": door.waiting,
            "in_flight": len(door.flights),
            "kv_usage": e.kv_usage,
        }
        return web.json_response(body, status=503 if door.draining else 200)

    def model_object(self) -> dict[str, Any]:
        return {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "fleetwatch",
        }

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self.model_object()]})

    async def model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name != self.model_name:
            err = InvalidRequest(
                404,
                f"model {name[:80]!r} is not served here (this server serves {self.model_name!r})",
                "model",
            )
            self.door.metrics.code(404)
            return web.json_response(err.body(), status=404)
        return web.json_response(self.model_object())

    async def metrics(self, request: web.Request) -> web.Response:
        from prometheus_client.exposition import choose_encoder

        # OpenMetrics when the scraper asks for it (Prometheus does): its histograms carry
        # exemplars (trace ids); the Prometheus text format otherwise.
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = await asyncio.to_thread(encoder, self.registry)
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = content_type
        return resp
