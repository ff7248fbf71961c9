"""``RequestParams``: what a caller asks of one request beyond its prompt and output length."""

from __future__ import annotations

from dataclasses import dataclass

from fleetwatch.engine_probe.engine.config import SamplingParams
from fleetwatch.telemetry.hooks import HttpRequestInfo

__all__ = ["RequestParams"]


@dataclass(frozen=True, slots=True)
class RequestParams:
    """How a request is sampled, named and reported; ``LLMEngine.add_request`` and
    ``AsyncEngine.generate`` take one beside the prompt and ``max_tokens``.

    Example::

        engine.add_request([1, 2, 3], max_tokens=8, params=RequestParams(tenant="acme"))
    """

    sampling: SamplingParams | None = None
    """None: greedy."""
    request_id: str | None = None
    """None: the engine assigns one (``LLMEngine.new_request_id``)."""
    traffic_class: str = "default"
    tenant: str | None = None
    traceparent: str | None = None
    tracestate: str | None = None
    operation: str = "text_completion"
    arrival_s: float | None = None
    """When a server received the request (engine clock, seconds), so queue time and TTFT include
    the wait for the step loop; None: when the engine takes it."""
    http: HttpRequestInfo | None = None
    """The HTTP request it came in on; trace context and ``http`` reach ``RequestInfo`` as given."""
