"""The read-only routes: ``GET /health``, ``GET /v1/models`` and ``GET /metrics``."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from engine_probe.serve.front_door import FrontDoor

__all__ = ["StatusRoutes"]


class StatusRoutes:
    """Handlers reporting on one engine and its front door; ``/health`` is 503 while draining."""

    def __init__(
        self, engine: Any, door: FrontDoor, model_name: str, registry: CollectorRegistry
    ) -> None:
        self.engine = engine
        self.door = door
        self.model_name = model_name
        self.registry = registry

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

    async def models(self, request: web.Request) -> web.Response:
        data = [{"id": self.model_name, "object": "model", "owned_by": "fleetwatch"}]
        return web.json_response({"object": "list", "data": data})

    async def metrics(self, request: web.Request) -> web.Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        body = await asyncio.to_thread(generate_latest, self.registry)
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp
