"""Build one request's span tree from its finished state: SERVER span + queue/prefill/decode.

Spans are built after the request finished, when every timestamp is known, so the step loop only
stores floats. Engine-clock seconds become epoch nanoseconds through ``offset_s`` (epoch minus
engine clock, captured once when instrumenting).

Attributes follow the OpenTelemetry GenAI semantic conventions (``gen_ai.*``, ``error.type``,
request parameters as ``gen_ai.request.temperature``/``top_p``/``seed``/``max_tokens``) and, for a
request served over HTTP, the HTTP server conventions (``http.request.method``, ``http.route``,
``http.response.status_code``, ``server.address``, ``server.port``); fleetwatch's own live under
``fleetwatch.*``. An incoming ``traceparent`` is continued together with its ``tracestate``. No prompt or output text is ever set unless the
caller opted in and supplied it (``gen_ai.input.messages`` / ``gen_ai.output.messages``).
"""

from __future__ import annotations

from typing import Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from fleetwatch.telemetry.request_state import RequestState

__all__ = ["ERROR_STATUSES", "SpanBuilder"]

ERROR_STATUSES: Final = frozenset({"error", "rejected"})
"""Statuses that mark the request span as an error (an abort is the caller's choice, not ours)."""

_PROPAGATOR: Final = TraceContextTextMapPropagator()


class SpanBuilder:
    """Turns finished ``RequestState``s into spans on ``tracer``.

    >>> from opentelemetry.sdk.trace import TracerProvider
    >>> b = SpanBuilder(TracerProvider().get_tracer("t"), model="m", replica="r0", offset_s=0.0)
    """

    def __init__(
        self,
        tracer: Tracer,
        *,
        model: str,
        replica: str,
        offset_s: float,
        provider_name: str = "fleetwatch",
        capture_text: bool = False,
    ) -> None:
        self.tracer = tracer
        self.model = model
        self.replica = replica
        self.offset_s = offset_s
        self._offset_ns = round(offset_s * 1e9)
        self.provider_name = provider_name
        self.capture_text = capture_text

    def _ns(self, t: float) -> int:
        # Integer offset + small engine time: exact to the nanosecond, unlike float epoch ns.
        return self._offset_ns + round(t * 1e9)

    def attributes(self, s: RequestState) -> dict[str, AttributeValue]:
        info = s.info
        attrs: dict[str, AttributeValue] = {
            "gen_ai.operation.name": info.operation,
            "gen_ai.provider.name": self.provider_name,
            "gen_ai.request.model": self.model,
            "gen_ai.response.model": self.model,
            "gen_ai.response.id": info.request_id,
            "gen_ai.request.max_tokens": info.max_tokens,
            "gen_ai.usage.input_tokens": info.prompt_tokens,
            "gen_ai.usage.output_tokens": s.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": s.cached_tokens,
            "fleetwatch.replica": self.replica,
            "fleetwatch.traffic_class": info.traffic_class,
            "fleetwatch.status": s.status,
            "fleetwatch.preemptions": s.preemptions,
            "fleetwatch.preemption_stall_s": s.stall,
        }
        for key, value in (
            ("gen_ai.request.temperature", info.temperature),
            ("gen_ai.request.top_p", info.top_p),
            ("gen_ai.request.seed", info.seed),
        ):
            if value is not None:
                attrs[key] = value
        http = info.http
        if http is not None:
            attrs["http.request.method"] = http.method
            attrs["http.route"] = http.route
            if http.server_address is not None:
                attrs["server.address"] = http.server_address
            if http.server_port is not None:
                attrs["server.port"] = http.server_port
            if http.status_code is not None:
                produced = s.first_token is not None
                attrs["http.response.status_code"] = http.status_code(s.status, produced)
        if s.finish_reason is not None:
            attrs["gen_ai.response.finish_reasons"] = (s.finish_reason,)
        if s.status in ERROR_STATUSES:
            attrs["error.type"] = s.error_type or s.status
        elif s.error_type is not None:
            attrs["error.type"] = s.error_type
        if info.tenant is not None:
            attrs["fleetwatch.tenant"] = info.tenant
        if s.scheduled is not None:
            if s.batch_size:  # 0: the engine did not say (an adapter's engine)
                attrs["fleetwatch.batch_size_at_admission"] = s.batch_size
            attrs["fleetwatch.queue_s"] = s.scheduled - s.arrival
        ttft = s.ttft_s
        if ttft is not None:
            attrs["fleetwatch.ttft_s"] = ttft
        tpot = s.tpot_s
        if tpot is not None:
            attrs["fleetwatch.tpot_s"] = tpot
        if s.max_itl is not None:
            attrs["fleetwatch.max_itl_s"] = s.max_itl
        if self.capture_text and s.text:
            if "input" in s.text:
                attrs["gen_ai.input.messages"] = s.text["input"]
            if "output" in s.text:
                attrs["gen_ai.output.messages"] = s.text["output"]
        return attrs

    def emit(self, s: RequestState) -> str | None:
        """Create and end the request's spans (the processor decides when they are exported);
        return the trace id (32 hex digits) when the span is sampled, else None."""
        info = s.info
        parent: Context = Context()
        if info.traceparent:
            carrier = {"traceparent": info.traceparent}
            if info.tracestate:
                carrier["tracestate"] = info.tracestate
            parent = _PROPAGATOR.extract(carrier, context=Context())
        root = self.tracer.start_span(
            f"{info.operation} {self.model}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes=self.attributes(s),
            start_time=self._ns(s.arrival),
        )
        for name, t in s.events or ():
            root.add_event(name, timestamp=self._ns(t))
        ctx = trace.set_span_in_context(root, Context())
        end = s.finished
        queue_end = s.scheduled if s.scheduled is not None else end
        self._child("queue", ctx, s.arrival, queue_end)
        if s.scheduled is not None:
            prefill_end = s.first_token if s.first_token is not None else end
            self._child(
                "prefill",
                ctx,
                s.scheduled,
                prefill_end,
                {"fleetwatch.prefill_tokens": s.prefill_tokens},
            )
        if s.first_token is not None:
            self._child(
                "decode", ctx, s.first_token, end, {"gen_ai.usage.output_tokens": s.output_tokens}
            )
        if s.status in ERROR_STATUSES:
            root.set_status(Status(StatusCode.ERROR, s.error_type or s.status))
        root.end(end_time=self._ns(end))
        context = root.get_span_context()
        if not (context.is_valid and context.trace_flags.sampled):
            return None
        return trace.format_trace_id(context.trace_id)

    def _child(
        self,
        name: str,
        ctx: Context,
        start: float,
        end: float,
        attributes: dict[str, AttributeValue] | None = None,
    ) -> None:
        span = self.tracer.start_span(
            name,
            context=ctx,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=self._ns(start),
        )
        span.end(end_time=self._ns(end))
