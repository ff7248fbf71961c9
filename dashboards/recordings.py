"""The recording rules the fleet view draws its fleet lines from: each model's p50 and p99 of
every latency histogram, over all its replicas.

Computed at every refresh, one such line sums every replica's buckets (200 replicas × ~20 ``le``
series) for each panel and viewer; recorded, Prometheus does it once per evaluation and the
dashboard reads one series per model. They are grouped like the scheme's fleets (the model and
the routing labels), keep the labels the scheme's equality matchers fix (``job="vllm"``,
``namespace="llm-prod"``) and are labelled with the profile, so two engines' rules, or one
engine's under two schemes (prod and staging), can share a Prometheus without writing the same
series; ``Scope.recorded`` reads back one scheme's. ``dashboards alerts`` writes them in the
operational rules file, beside the alerts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from fleetwatch.core.profiles import Profile, Signal
from fleetwatch.core.rules import RecordingRule, RuleGroup
from fleetwatch.dashboards.promql import Scope

__all__ = [
    "FLEET_QUANTILES",
    "FLEET_WINDOW",
    "fleet_quantile",
    "fleet_recording_names",
    "fleet_recordings",
    "recorded",
]

FLEET_WINDOW: Final = "5m"
"""The rate window of the recorded fleet lines (fixed: a recording cannot follow Grafana's
``$__rate_interval``)."""

FLEET_QUANTILES: Final = (0.5, 0.99)

_LATENCY: Final = (Signal.TTFT, Signal.TPOT, Signal.ITL, Signal.E2E)


def recorded(signal: Signal, q: float) -> str:
    """The recorded series' name, e.g. ``fleet:ttft_seconds:p99_rate5m``."""
    return f"fleet:{signal.value}_seconds:p{q * 100:g}_rate{FLEET_WINDOW}"


def fleet_quantile(scope: Scope, signal: Signal, q: float) -> str:
    """The ``q`` quantile of ``signal`` over each model's fleet, from its buckets, keeping the
    scheme's fixed labels (``Scope.recorded_by``)."""
    ref = scope.profile.metric(signal)
    return (
        f"histogram_quantile({q:g}, sum by (le, {scope.recorded_by}) "
        f"(rate({ref.selector('', '_bucket')}[{FLEET_WINDOW}])))"
    )


def _lines(profile: Profile) -> Iterator[tuple[Signal, float]]:
    """Each (signal, quantile) ``profile`` has a fleet line for."""
    return ((s, q) for s in _LATENCY if profile.has(s) for q in FLEET_QUANTILES)


def fleet_recordings(profile: Profile) -> RuleGroup | None:
    """The group of fleet lines for ``profile`` (None: it exports no latency histogram)."""
    scope = Scope(profile)
    rules = tuple(
        RecordingRule(recorded(s, q), fleet_quantile(scope, s, q), {"profile": profile.name})
        for s, q in _lines(profile)
    )
    return RuleGroup(f"fleetwatch-{profile.name}-fleet", rules) if rules else None


def fleet_recording_names(profile: Profile) -> frozenset[str]:
    """The series ``fleet_recordings`` writes for ``profile``."""
    return frozenset(recorded(s, q) for s, q in _lines(profile))
