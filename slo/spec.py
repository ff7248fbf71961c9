"""The SLO spec as values: what is promised, over which requests, for how long, and how to alert.

Every value here is already validated (see ``fleetwatch.slo.parse``); the rules generator and the offline
evaluator take these dataclasses and never see YAML. Objectives are percentages (``99.9``),
thresholds and windows are seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Final, Literal

__all__ = [
    "LATENCY_SIGNALS",
    "OUTCOMES",
    "SEVERITIES",
    "Alerting",
    "AvailabilitySLI",
    "BurnWindow",
    "GoodputSLI",
    "LatencySLI",
    "RatioSLI",
    "SLIKind",
    "SLOSpec",
    "Selector",
    "ServiceLevelObjective",
    "Severity",
    "budget_fraction",
]

Severity = Literal["page", "ticket"]

SEVERITIES: Final[tuple[Severity, ...]] = ("page", "ticket")
"""Alert severities, in the order their rules and backtest tracks are written."""

OUTCOMES: Final[tuple[str, ...]] = ("error", "rejected", "aborted")
"""Outcomes an availability SLI may count as bad (``fleetwatch.core.records.Status`` minus ``ok``)."""

LATENCY_SIGNALS: Final[tuple[str, ...]] = ("ttft", "tpot", "itl", "e2e")
"""Latency signals an SLI may bound: time to first token, time per output token (per-request
mean), inter-token latency, end-to-end request latency."""


class SLIKind(StrEnum):
    AVAILABILITY = "availability"
    LATENCY = "latency"
    GOODPUT = "goodput"
    RATIO = "ratio"


@dataclass(frozen=True, slots=True)
class AvailabilitySLI:
    """Bad events are finished requests whose outcome is in ``bad`` (e.g. errors and rejections)."""

    bad: tuple[str, ...] = ("error",)
    kind: SLIKind = SLIKind.AVAILABILITY


@dataclass(frozen=True, slots=True)
class LatencySLI:
    """Good events are requests whose ``signal`` is at most ``threshold_s`` seconds."""

    signal: str
    threshold_s: float
    kind: SLIKind = SLIKind.LATENCY


@dataclass(frozen=True, slots=True)
class GoodputSLI:
    """Good events are requests that finished ok with TTFT <= ``ttft_s`` and TPOT <= ``tpot_s``
    (DistServe's goodput). TPOT is undefined for one-token outputs; those count on TTFT alone."""

    ttft_s: float
    tpot_s: float
    kind: SLIKind = SLIKind.GOODPUT


@dataclass(frozen=True, slots=True)
class RatioSLI:
    """Raw PromQL counter selectors (imported from OpenSLO): ``bad`` or ``good`` over ``total``.

    These name metrics directly, so they become Prometheus rules for any profile but cannot be
    evaluated over request records.
    """

    total: str
    bad: str | None = None
    good: str | None = None
    kind: SLIKind = SLIKind.RATIO


SLI = AvailabilitySLI | LatencySLI | GoodputSLI | RatioSLI


@dataclass(frozen=True, slots=True)
class Selector:
    """Which requests an SLO covers; None means all. Maps to the profile's class/model labels."""

    traffic_class: str | None = None
    model: str | None = None


def budget_fraction(burn: float, window_s: float, period_s: float) -> float:
    """Share of a period's error budget that a constant ``burn`` spends in ``window_s``
    (14.4 for 1 hour of 30 days -> 0.02)."""
    return burn * window_s / period_s


@dataclass(frozen=True, slots=True)
class BurnWindow:
    """One multiwindow burn-rate condition: fire when the error ratio over both ``long_s`` and
    ``short_s`` exceeds ``burn`` times the error budget."""

    severity: Severity
    long_s: int
    short_s: int
    burn: float

    def budget_fraction(self, period_s: int) -> float:
        """Share of the period's error budget spent by the time this condition fires."""
        return budget_fraction(self.burn, self.long_s, period_s)


@dataclass(frozen=True, slots=True)
class Alerting:
    """Alert names, labels and annotations. Names default to ``SLO<Kind>FastBurn`` (page) and
    ``SLO<Kind>SlowBurn`` (ticket); ``runbook_url`` defaults to a page under the spec's
    ``runbook_base`` named after the alert (``slo-latency-fast-burn.md``)."""

    page_name: str | None = None
    ticket_name: str | None = None
    page_labels: Mapping[str, str] = field(default_factory=dict)
    ticket_labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    runbook_url: str | None = None
    absent_for_s: int = 600
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class ServiceLevelObjective:
    """One SLO. ``path`` is its YAML path (``slos[1]``), used to name errors found later (for
    example a threshold that is not a bucket of the chosen metric profile)."""

    name: str
    objective: float
    sli: SLI
    period_s: int
    windows: tuple[BurnWindow, ...]
    selector: Selector = Selector()
    alerting: Alerting = Alerting()
    min_events: int = 0
    description: str = ""
    path: str = ""

    @property
    def objective_ratio(self) -> float:
        """The objective as a ratio in (0, 1): 99.9 -> 0.999."""
        return float(Decimal(repr(self.objective)) / 100)

    @property
    def error_budget(self) -> float:
        """Allowed share of bad events: 1 - objective (0.001 for 99.9%), exact to the decimal."""
        return float((100 - Decimal(repr(self.objective))) / 100)

    @property
    def budget_s(self) -> float:
        """The error budget as time: the share of the period that may be spent failing
        (99.9% over 30 days -> 2592 s = 43.2 minutes)."""
        return self.error_budget * self.period_s

    def threshold(self, window: BurnWindow) -> float:
        """Error-ratio threshold of one burn condition: burn x budget (14.4 x 0.001 = 0.0144)."""
        return window.burn * self.error_budget

    def window_seconds(self) -> tuple[int, ...]:
        """Every distinct window length the alerts use, plus the period, ascending."""
        found = {self.period_s}
        for w in self.windows:
            found.update((w.long_s, w.short_s))
        return tuple(sorted(found))


@dataclass(frozen=True, slots=True)
class SLOSpec:
    """A validated spec: one service, its SLOs, labels added to every alert."""

    service: str
    slos: tuple[ServiceLevelObjective, ...]
    labels: Mapping[str, str] = field(default_factory=dict)
    evaluation_interval_s: int = 30
    runbook_base: str | None = None
    """Where default runbook links point; None: the labels file's ``links.runbooks``."""
