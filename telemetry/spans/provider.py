"""A tracer provider from the standard ``OTEL_*`` environment, or None when tracing is off.

Whether OTLP export is on is decided here (an endpoint is set and ``OTEL_TRACES_EXPORTER`` allows
it); the OTLP/HTTP exporter reads its own settings: endpoint (``/v1/traces`` appended to the
generic one), headers, timeout, compression and TLS files.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry.environment_variables import OTEL_TRACES_EXPORTER
from opentelemetry.sdk.environment_variables import (
    OTEL_BSP_SCHEDULE_DELAY,
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_HEADERS,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_HEADERS,
    OTEL_SDK_DISABLED,
    OTEL_SERVICE_NAME,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.util.re import parse_env_headers

from fleetwatch.telemetry.metrics.drops import DropCounter
from fleetwatch.telemetry.spans.jsonl import JsonLinesSpanExporter
from fleetwatch.telemetry.spans.processor import BoundedSpanProcessor

__all__ = ["otlp_configured", "otlp_export_interval_s", "span_processors", "tracer_provider"]

OTLP_EXPORT_INTERVAL_S = 5.0
"""Seconds between OTLP exports unless ``OTEL_BSP_SCHEDULE_DELAY`` (milliseconds) says otherwise:
the SDK's batch processor default. Each export is one HTTP request whatever its size, so fewer,
larger batches cost less CPU per span."""


def otlp_configured(env: Mapping[str, str]) -> bool:
    """True when ``OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT`` is set and traces are not disabled."""
    if env.get(OTEL_SDK_DISABLED, "").lower() == "true":
        return False
    exporters = {e.strip() for e in env.get(OTEL_TRACES_EXPORTER, "otlp").split(",")}
    if "none" in exporters or "otlp" not in exporters:
        return False
    return bool(env.get(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or env.get(OTEL_EXPORTER_OTLP_ENDPOINT))


def otlp_export_interval_s(env: Mapping[str, str]) -> float:
    """``OTEL_BSP_SCHEDULE_DELAY`` in seconds; the default for a missing, unparsable or
    non-positive value (as the SDK's batch processor treats it)."""
    raw = env.get(OTEL_BSP_SCHEDULE_DELAY, "").strip()
    try:
        ms = float(raw)
    except ValueError:
        return OTLP_EXPORT_INTERVAL_S
    return ms / 1000.0 if 0 < ms < float("inf") else OTLP_EXPORT_INTERVAL_S


def span_processors(provider: TracerProvider) -> tuple[SpanProcessor, ...]:
    """The span processors added to ``provider``, in the order they were added (the SDK keeps
    them without a public accessor; this is the one place that reads them)."""
    return tuple(provider._active_span_processor._span_processors)


def _otlp_exporter(env: Mapping[str, str]) -> SpanExporter:
    """The OTLP/HTTP span exporter, configured by ``env``.

    The exporter reads only the process environment, so for ``os.environ`` it is built bare and
    reads everything itself. Any other mapping hands over its endpoint and headers, resolved by the
    exporter's rules: the traces endpoint as given, else the generic one with the exporter's own
    traces path; headers parsed by the SDK's ``parse_env_headers``.
    """
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        DEFAULT_TRACES_EXPORT_PATH,
        OTLPSpanExporter,
    )

    if env is os.environ:
        return OTLPSpanExporter()
    endpoint = env.get(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) or (
        f"{env[OTEL_EXPORTER_OTLP_ENDPOINT].removesuffix('/')}/{DEFAULT_TRACES_EXPORT_PATH}"
    )
    headers = env.get(OTEL_EXPORTER_OTLP_TRACES_HEADERS) or env.get(OTEL_EXPORTER_OTLP_HEADERS, "")
    return OTLPSpanExporter(endpoint=endpoint, headers=parse_env_headers(headers, liberal=True))


class _HashedOnce(Resource):
    """A resource hashed once. The OTLP encoder groups every span it exports by resource, and the
    SDK's ``Resource.__hash__`` serialises all attributes to JSON on every call (3.4 µs here:
    14 µs per request of four spans)."""

    def __init__(self, base: Resource) -> None:
        super().__init__(base.attributes, base.schema_url)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash


def tracer_provider(
    *,
    env: Mapping[str, str] | None = None,
    span_file: str | os.PathLike[str] | None = None,
    drops: DropCounter | None = None,
    service_name: str = "fleetwatch",
    max_queue: int = 8192,
    shutdown_timeout_s: float = 5.0,
) -> TracerProvider | None:
    """OTLP/HTTP export when the ``OTEL_*`` variables configure it, a JSON-lines file when
    ``span_file`` is given, both behind ``BoundedSpanProcessor``s; None when neither applies
    (then no span is ever built). Endpoint, headers and ``OTEL_SERVICE_NAME`` come from ``env``
    (``os.environ`` by default); the exporter's other settings (timeout, compression, TLS) and
    ``OTEL_RESOURCE_ATTRIBUTES`` are read from the process environment. OTLP exports go out in
    batches every ``OTEL_BSP_SCHEDULE_DELAY`` ms (5 s by default), a span file every 1 s. Each
    processor's shutdown is bounded by ``shutdown_timeout_s``."""
    env = os.environ if env is None else env
    use_otlp = otlp_configured(env)
    if not use_otlp and span_file is None:
        return None
    attrs = {"service.name": env.get(OTEL_SERVICE_NAME) or service_name}
    provider = TracerProvider(resource=_HashedOnce(Resource.create(attrs)))
    if use_otlp:
        provider.add_span_processor(
            BoundedSpanProcessor(
                _otlp_exporter(env),
                drops=drops,
                interval_s=otlp_export_interval_s(env),
                max_queue=max_queue,
                shutdown_timeout_s=shutdown_timeout_s,
            )
        )
    if span_file is not None:
        provider.add_span_processor(
            BoundedSpanProcessor(
                JsonLinesSpanExporter(span_file),
                drops=drops,
                max_queue=max_queue,
                shutdown_timeout_s=shutdown_timeout_s,
            )
        )
    return provider
