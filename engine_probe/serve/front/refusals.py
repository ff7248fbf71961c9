"""Every request the HTTP front refuses is observable, like one the engine ran.

A refusal (queue full, draining, body too large, invalid, unknown model, an unexpected fault
before admission) is answered with the OpenAI error object, counted in
``fleetwatch_http_responses_total``, and reported to the engine's observers as a request that
arrived and finished at once with status ``rejected`` (``error`` for a server fault, a 5xx other
than the 503 of draining) and its reason as
``error_type`` (``AsyncEngine.refuse``). Telemetry then gives it what every request gets: a
record, a span with error status, and a count in ``fleetwatch_requests_total``, so an
availability SLO over the server's metrics sees front-door 429s as it sees engine rejections.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from fleetwatch.engine_probe.serve.front.http_metrics import HttpMetrics
from fleetwatch.engine_probe.serve.wire.errors import InvalidRequest
from fleetwatch.telemetry.hooks import RequestInfo

__all__ = ["Refusals"]

_log = logging.getLogger(__name__)


class Refusals:
    """Answers and records refusals for one engine (see the module docstring)."""

    def __init__(self, aengine: Any, metrics: HttpMetrics) -> None:
        self.aengine = aengine
        self.metrics = metrics

    def refuse(
        self,
        exc: InvalidRequest,
        *,
        request_id: str,
        operation: str,
        traceparent: str | None = None,
        prompt_tokens: int = 0,
        max_tokens: int = 0,
        headers: dict[str, str] | None = None,
        arrival_s: float | None = None,
        tenant: str | None = None,
    ) -> web.Response:
        """The error answer for ``exc``, counted and recorded."""
        resp = self.metrics.error(exc, {"X-Request-Id": request_id, **(headers or {})})
        self.record(
            request_id,
            exc.reason,
            status="rejected" if exc.status < 500 or exc.status == 503 else "error",
            operation=operation,
            traceparent=traceparent,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            arrival_s=arrival_s,
            tenant=tenant,
        )
        return resp

    def record(
        self,
        request_id: str,
        reason: str,
        *,
        status: str = "rejected",
        operation: str = "text_completion",
        traceparent: str | None = None,
        prompt_tokens: int = 0,
        max_tokens: int = 0,
        arrival_s: float | None = None,
        tenant: str | None = None,
    ) -> None:
        """Report a refused request to the engine's observers (record, span, counters)."""
        info = RequestInfo(
            request_id,
            prompt_tokens,
            max_tokens,
            traceparent=traceparent,
            operation=operation,
            tenant=tenant,
        )
        refuse = getattr(self.aengine, "refuse", None)
        if refuse is None:
            return
        try:
            refuse(info, reason, status, arrival_s)
        except Exception:  # the answer matters more than its record; say why it is missing
            _log.exception("could not record refused request %s", request_id)
