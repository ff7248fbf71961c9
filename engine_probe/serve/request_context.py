"""What a completion request's HTTP headers say about it, beyond its body.

- Traffic class: ``X-Fleetwatch-Traffic-Class: chat`` labels the request's metrics, span and record
  (``traffic_class``), so per-class SLOs (``selector: {traffic_class: chat}``) see it. Without
  the header the server's default applies (``ServerConfig.traffic_class``, ``engine serve
  --traffic-class``, itself ``default`` unless set). A value is 1-64 letters, digits,
  underscores, dots, colons or dashes; anything else is refused with 422 naming the header. Cardinality stays
  bounded downstream: telemetry caps the label's values per replica (``max_label_values``, 64)
  and folds the excess into ``other``, counted in ``fleetwatch_telemetry_label_overflow_total``.
- Trace context: ``traceparent`` is handed on as sent (telemetry's W3C propagator decides).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from engine_probe.serve.validation import InvalidRequest

__all__ = [
    "TRAFFIC_CLASS_HEADER",
    "TRAFFIC_CLASS_RULE",
    "RequestContext",
    "request_context",
    "valid_traffic_class",
]

TRAFFIC_CLASS_HEADER: Final = "X-Fleetwatch-Traffic-Class"
TRAFFIC_CLASS_RULE: Final = "1-64 letters, digits, underscores, dots, colons or dashes"
_CLASS: Final = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def valid_traffic_class(value: str) -> bool:
    """Whether ``value`` may be a traffic class (``TRAFFIC_CLASS_RULE``)."""
    return _CLASS.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Per-request facts from the headers, handed to the engine with the request."""

    traffic_class: str = "default"
    traceparent: str | None = None


def request_context(headers: Mapping[str, str], default_class: str) -> RequestContext:
    """The context of one request; ``InvalidRequest`` (422, naming the header) for a malformed
    traffic class."""
    raw = headers.get(TRAFFIC_CLASS_HEADER)
    traffic_class = default_class
    if raw is not None:
        value = raw.strip()
        if not valid_traffic_class(value):
            raise InvalidRequest(
                422,
                f"{TRAFFIC_CLASS_HEADER} must be {TRAFFIC_CLASS_RULE}, got {value[:80]!r}",
                TRAFFIC_CLASS_HEADER,
            )
        traffic_class = value
    return RequestContext(traffic_class=traffic_class, traceparent=headers.get("traceparent"))
