"""The HTTP front's own Prometheus series, and the error answer that counts its status code.

Labels stay bounded: status codes and a fixed set of abort reasons.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge

from fleetwatch.engine_probe.serve.wire.errors import InvalidRequest

__all__ = ["HttpMetrics"]


class HttpMetrics:
    """Responses by code, stream aborts by reason, idempotent joins, and the queue depth."""

    def __init__(self, registry: CollectorRegistry, replica: str) -> None:
        self.responses = Counter(
            "fleetwatch_http_responses",
            "HTTP responses by status code.",
            ["replica", "code"],
            registry=registry,
        )
        self.stream_ends = Counter(
            "fleetwatch_http_stream_aborts",
            "Requests aborted by the HTTP front, by reason (client_disconnect, slow_reader).",
            ["replica", "reason"],
            registry=registry,
        )
        self.joins = Counter(
            "fleetwatch_http_idempotent_joins",
            "Requests attached to an in-flight request by Idempotency-Key.",
            ["replica"],
            registry=registry,
        ).labels(replica)
        self.queue = Gauge(
            "fleetwatch_http_queue_depth",
            "Requests admitted by the HTTP front that have no output yet.",
            ["replica"],
            registry=registry,
        ).labels(replica)
        self.replica = replica

    def code(self, status: int) -> None:
        self.responses.labels(self.replica, str(status)).inc()

    def abort(self, reason: str) -> None:
        self.stream_ends.labels(self.replica, reason).inc()

    def error(self, exc: InvalidRequest, headers: dict[str, str] | None = None) -> web.Response:
        """The JSON error answer for ``exc``, counted under its status code."""
        self.code(exc.status)
        return web.json_response(exc.body(), status=exc.status, headers=headers)
