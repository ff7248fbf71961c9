"""Where a profile's fleet signals live in Prometheus exposition, for readers and rule writer.

Shared by the two Prometheus readers (``/metrics`` snapshots and the HTTP API) and the rule
generator.

Metric names come from ``fleetwatch.core.profiles``; label matchers are parsed by ``fleetwatch.core.promql``.
"""

from __future__ import annotations

from collections.abc import Mapping

from fleetwatch.core.profiles import MetricRef, Profile, Signal
from fleetwatch.core.promql import MatcherError, parse_matchers
from fleetwatch.fleet.errors import AnalysisError

__all__ = [
    "DEFAULT_FINGERPRINT_METRIC",
    "GPU_GAUGES",
    "LATENCY_SOURCES",
    "NOT_FINGERPRINT",
    "per_request",
    "ref_labels",
    "signal_ref",
]

DEFAULT_FINGERPRINT_METRIC = "fleetwatch_build_info"
"""Info-style gauge (value 1) whose labels (version, model_revision, flags…) fingerprint a replica."""

NOT_FINGERPRINT = frozenset({"instance", "job", "replica", "engine", "gpu", "pod", "node"})
"""Labels of the fingerprint metric that say where a replica runs, not how it is configured."""

LATENCY_SOURCES: tuple[tuple[str, tuple[Signal, ...]], ...] = (
    ("ttft", (Signal.TTFT,)),
    ("tpot", (Signal.TPOT, Signal.ITL)),
    ("e2e", (Signal.E2E,)),
)
"""Latency columns and the profile signals that give them, the first the profile has winning."""


def per_request(profile: Profile) -> frozenset[str]:
    """The latency columns whose histogram ``profile`` observes once per request, so that its
    bucket counts are per-request samples for the rank test: TTFT and e2e, and TPOT where it is
    the per-request mean (vLLM's ``request_time_per_output_token``, TGI's, fleetwatch's), not an
    inter-token latency observed per decode step (SGLang's)."""
    return frozenset(("ttft", "e2e", *(("tpot",) if profile.has(Signal.TPOT) else ())))


GPU_GAUGES: Mapping[str, tuple[Signal, Signal | None]] = {
    "sm_clock_ratio": (Signal.GPU_SM_CLOCK, Signal.GPU_SM_CLOCK_MAX),
    "dram_bw_ratio": (Signal.GPU_DRAM_ACTIVE, None),
    "power_w": (Signal.GPU_POWER, None),
    "clock_event_active": (Signal.GPU_CLOCK_EVENT, None),
}
"""GPU columns: the gauge, and the gauge it is divided by (None: taken as it is)."""


def signal_ref(profile: Profile, *signals: Signal) -> MetricRef | None:
    """The metric of the first of ``signals`` that ``profile`` exports; None when it has none."""
    for s in signals:
        if profile.has(s):
            return profile.metric(s)
    return None


def ref_labels(ref: MetricRef) -> dict[str, str]:
    """The labels ``ref.matchers`` select; ``AnalysisError`` for anything but ``name="value"``."""
    try:
        return parse_matchers(ref.matchers)
    except MatcherError as exc:
        raise AnalysisError(str(exc)) from None
