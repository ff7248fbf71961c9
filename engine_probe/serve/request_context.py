"""What a completion request's HTTP exchange says about it, beyond its body.

- Traffic class: ``X-Fleetwatch-Traffic-Class: chat`` labels the request's metrics, span and record
  (``traffic_class``), so per-class SLOs (``selector: {traffic_class: chat}``) see it. Without
  the header the server's default applies (``ServerConfig.traffic_class``, ``engine serve
  --traffic-class``, itself ``default`` unless set). A value is 1-64 letters, digits,
  underscores, dots, colons or dashes; anything else is refused with 400 naming the header.
  Cardinality stays bounded downstream: telemetry caps the label's values per replica
  (``max_label_values``, 64) and folds the excess into ``other``, counted in
  ``fleetwatch_telemetry_label_overflow_total``.
- Tenant: ``X-Fleetwatch-Tenant: acme`` names the request's tenant (same rule as a traffic class,
  400 naming the header otherwise); it reaches the engine's record and span as ``tenant``, and,
  with ``engine serve --tenant-limits``, selects the token bucket and fair-queue flow
  (``tenants``, which bounds the distinct values). Absent: no tenant (the limits' ``default``).
- Trace context: ``traceparent`` and ``tracestate`` are handed on as sent (telemetry's W3C
  propagator decides whether to continue them).
- HTTP: method, matched route, the server's address and port as the client addressed it, and the
  rule giving the status code the server answers with (``answered_status``), for the span's
  ``http.*`` and ``server.*`` attributes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from fleetwatch.engine_probe.serve.wire.completions import InvalidRequest
from fleetwatch.telemetry.hooks import HttpRequestInfo

__all__ = [
    "TENANT_HEADER",
    "TRAFFIC_CLASS_HEADER",
    "TRAFFIC_CLASS_RULE",
    "RequestContext",
    "answered_status",
    "request_context",
    "valid_traffic_class",
]

TRAFFIC_CLASS_HEADER: Final = "X-Fleetwatch-Traffic-Class"
TENANT_HEADER: Final = "X-Fleetwatch-Tenant"
TRAFFIC_CLASS_RULE: Final = "1-64 letters, digits, underscores, dots, colons or dashes"
_CLASS: Final = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_REFUSED: Final = {"rejected": 429, "aborted": 503}
"""Status codes of requests that ended before any output, by status (others: 500)."""


def valid_traffic_class(value: str) -> bool:
    """Whether ``value`` may be a traffic class (``TRAFFIC_CLASS_RULE``)."""
    return _CLASS.fullmatch(value) is not None


def answered_status(streaming: bool) -> Callable[[str, bool], int]:
    """The status code this server answers a request with, from how it ended (``streaming``
    answers go out with the first output, so a stream that fails later was still a 200)."""

    def status_code(status: str, produced_output: bool) -> int:
        if status == "ok":
            return 200
        if not produced_output:
            return _REFUSED.get(status, 500)
        return 200 if streaming else 500

    return status_code


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Per-request facts from the HTTP exchange, handed to the engine with the request."""

    traffic_class: str = "default"
    traceparent: str | None = None
    tracestate: str | None = None
    http: HttpRequestInfo | None = None
    tenant: str | None = None


def _label_header(headers: Any, name: str) -> str | None:
    """A header whose value becomes a label (traffic class, tenant): stripped, or
    ``InvalidRequest`` (400 naming the header) when it breaks ``TRAFFIC_CLASS_RULE``."""
    raw = headers.get(name)
    if raw is None:
        return None
    value = str(raw).strip()
    if not valid_traffic_class(value):
        raise InvalidRequest(400, f"{name} must be {TRAFFIC_CLASS_RULE}, got {value[:80]!r}", name)
    return value


def _server(request: web.Request) -> tuple[str | None, int | None]:
    url = request.url
    if url.host:
        return url.host, url.port
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    if isinstance(sockname, tuple) and len(sockname) >= 2:
        return str(sockname[0]), int(sockname[1])
    return None, None


def request_context(request: web.Request, default_class: str, *, streaming: bool) -> RequestContext:
    """The context of one request; ``InvalidRequest`` (400, naming the header) for a malformed
    traffic class or tenant."""
    headers = request.headers
    traffic_class = _label_header(headers, TRAFFIC_CLASS_HEADER) or default_class
    route = request.match_info.route.resource
    address, port = _server(request)
    http = HttpRequestInfo(
        method=request.method,
        route=route.canonical if route is not None else request.path,
        server_address=address,
        server_port=port,
        status_code=answered_status(streaming),
    )
    return RequestContext(
        traffic_class=traffic_class,
        traceparent=headers.get("traceparent"),
        tracestate=headers.get("tracestate"),
        http=http,
        tenant=_label_header(headers, TENANT_HEADER),
    )
