"""The startup span: ``startup <model>`` (INTERNAL) with one child span per phase."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Tracer
from opentelemetry.util.types import AttributeValue

__all__ = ["emit_startup_span"]


def emit_startup_span(
    tracer: Tracer,
    phases: Sequence[tuple[str, float, float]],
    *,
    model: str,
    replica: str,
    offset_s: float,
    attributes: Mapping[str, AttributeValue] | None = None,
) -> None:
    """Create and end the startup span tree; times are clock seconds + ``offset_s`` (epoch).

    The parent runs from the first phase's start to the last one's end and carries the total
    (``fleetwatch.startup_s``); each child is named for its phase and carries its seconds
    (``fleetwatch.phase_s``). Nothing is built without phases."""
    if not phases:
        return
    offset_ns = round(offset_s * 1e9)

    def ns(t: float) -> int:
        return offset_ns + round(t * 1e9)

    start, end = phases[0][1], phases[-1][2]
    attrs: dict[str, AttributeValue] = {
        "gen_ai.request.model": model,
        "fleetwatch.replica": replica,
        "fleetwatch.startup_s": end - start,
        "fleetwatch.phases": tuple(p[0] for p in phases),
    }
    attrs.update(attributes or {})
    root = tracer.start_span(
        f"startup {model}",
        context=Context(),
        kind=SpanKind.INTERNAL,
        attributes=attrs,
        start_time=ns(start),
    )
    ctx = trace.set_span_in_context(root, Context())
    for name, p_start, p_end in phases:
        child = tracer.start_span(
            name,
            context=ctx,
            kind=SpanKind.INTERNAL,
            attributes={"fleetwatch.phase": name, "fleetwatch.phase_s": p_end - p_start},
            start_time=ns(p_start),
        )
        child.end(end_time=ns(p_end))
    root.end(end_time=ns(end))
