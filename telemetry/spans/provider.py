"""A tracer provider from the standard ``OTEL_*`` environment, or None when tracing is off."""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from telemetry.metrics.drops import DropCounter
from telemetry.spans.jsonl import JsonLinesSpanExporter
from telemetry.spans.processor import BoundedSpanProcessor

__all__ = ["otlp_configured", "tracer_provider"]


def otlp_configured(env: Mapping[str, str]) -> bool:
    """True when ``OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT`` is set and traces are not disabled."""
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    exporters = {e.strip() for e in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",")}
    if "none" in exporters or "otlp" not in exporters:
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def tracer_provider(
    *,
    env: Mapping[str, str] | None = None,
    span_file: str | os.PathLike[str] | None = None,
    drops: DropCounter | None = None,
    service_name: str = "fleetwatch",
    max_queue: int = 8192,
) -> TracerProvider | None:
    """OTLP/HTTP export when the ``OTEL_*`` variables configure it, a JSON-lines file when
    ``span_file`` is given, both behind ``BoundedSpanProcessor``s; None when neither applies
    (then no span is ever built). The OTLP exporter reads its endpoint, headers and timeout from
    the same variables. ``OTEL_SERVICE_NAME``/``OTEL_RESOURCE_ATTRIBUTES`` name the resource."""
    env = os.environ if env is None else env
    use_otlp = otlp_configured(env)
    if not use_otlp and span_file is None:
        return None
    attrs = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": service_name}
    provider = TracerProvider(resource=Resource.create(attrs))
    if use_otlp:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(
            BoundedSpanProcessor(OTLPSpanExporter(), drops=drops, max_queue=max_queue)
        )
    if span_file is not None:
        provider.add_span_processor(
            BoundedSpanProcessor(JsonLinesSpanExporter(span_file), drops=drops, max_queue=max_queue)
        )
    return provider
