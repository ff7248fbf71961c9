"""A process's cold start as telemetry: one span with a child per phase, and a gauge per phase.

Engine-neutral: phases are (name, start, end) on a clock whose epoch offset the caller gives, so
any engine (the reference one, an adapter timing vLLM's load) can report its cold start.
"""

from fleetwatch.telemetry.startup.metrics import STARTUP_SECONDS, StartupMetrics
from fleetwatch.telemetry.startup.spans import emit_startup_span

__all__ = ["STARTUP_SECONDS", "StartupMetrics", "emit_startup_span"]
