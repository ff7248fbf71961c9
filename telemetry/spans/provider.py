"""A tracer provider from the standard ``OTEL_*`` environment, or None when tracing is off."""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import unquote

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


def _traces_endpoint(env: Mapping[str, str]) -> str:
    """The OTLP/HTTP traces URL: the signal-specific variable as given, else the base + path."""
    specific = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if specific:
        return specific
    return env["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces"


def _headers(env: Mapping[str, str]) -> dict[str, str] | None:
    """``key=value,key2=value2`` (values URL-encoded), signal-specific variable first."""
    raw = env.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or env.get("OTEL_EXPORTER_OTLP_HEADERS")
    if not raw:
        return None
    pairs = (item.split("=", 1) for item in raw.split(",") if "=" in item)
    return {unquote(k.strip()): unquote(v.strip()) for k, v in pairs}


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
    (then no span is ever built). Endpoint, headers and ``OTEL_SERVICE_NAME`` come from ``env``
    (``os.environ`` by default); ``OTEL_RESOURCE_ATTRIBUTES`` is read from the process environment."""
    env = os.environ if env is None else env
    use_otlp = otlp_configured(env)
    if not use_otlp and span_file is None:
        return None
    attrs = {"service.name": env.get("OTEL_SERVICE_NAME") or service_name}
    provider = TracerProvider(resource=Resource.create(attrs))
    if use_otlp:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=_traces_endpoint(env), headers=_headers(env))
        provider.add_span_processor(
            BoundedSpanProcessor(exporter, drops=drops, max_queue=max_queue)
        )
    if span_file is not None:
        provider.add_span_processor(
            BoundedSpanProcessor(JsonLinesSpanExporter(span_file), drops=drops, max_queue=max_queue)
        )
    return provider
