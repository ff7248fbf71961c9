"""OpenTelemetry spans for finished requests, and exporters that never stall the engine."""

from fleetwatch.telemetry.spans.builder import SpanBuilder
from fleetwatch.telemetry.spans.jsonl import JsonLinesSpanExporter, read_spans
from fleetwatch.telemetry.spans.processor import BoundedSpanProcessor
from fleetwatch.telemetry.spans.provider import otlp_configured, tracer_provider

__all__ = [
    "BoundedSpanProcessor",
    "JsonLinesSpanExporter",
    "SpanBuilder",
    "otlp_configured",
    "read_spans",
    "tracer_provider",
]
