"""Generate Prometheus rules for an SLO spec on a metric profile: a pure function, spec in,
rule groups out (Sloth's pipeline: SLI recording rules -> metadata -> alerts).

Naming scheme (every series labelled ``service`` and ``slo``; per-window series also ``window``):

- ``slo:sli_error:ratio_rate<window>``: bad events / all events over the window (traffic-weighted:
  a ratio of ``increase()``, for long windows too), one per alert window and for the period.
  The period's, and every burn window at least 288 base windows long (``summed_windows``: the
  tickets' 1d and 3d at a 30-day period), is built from the
  shortest window's recorded counts, not raw (Sloth's period trick, kept traffic-weighted):
  ``sum_over_time(slo:sli_bad:increase5m[3d]) / sum_over_time(slo:sli_events:increase5m[3d])``.
  Each event is in every recorded 5-minute count whose window covers it, as many in the
  numerator as in the denominator, so the ratio is the raw one but for the edges of one 5-minute
  window (the newest minutes weigh less: the ratio follows a change up to half a base window
  later) and ``increase()``'s extrapolation; it counts only what the rules have recorded (a
  window's worth after they are first loaded, but a value from their first evaluation). Raw
  where the period is itself a burn window.
- ``slo:sli_bad:increase<window>``, ``slo:sli_events:increase<window>``: bad and all events in the
  shortest window (what the long windows sum), and all events in the long windows (with
  ``min_events``; a summed window's count is its sum over the evaluations one base window
  spans).
- ``slo:objective:ratio``, ``slo:error_budget:ratio``: the objective and 1 - objective.
- ``slo:period_error_budget_remaining:ratio``: 1 - (period error ratio / budget); negative once
  the budget is spent.
- ``slo:current_burn_rate:ratio``: error ratio over the shortest alert window / budget.

Alerts: a page alert and a ticket alert per SLO, each the ``or`` of its burn conditions from the
window table (long AND short window above burn x budget, no ``for:``), and an absent-metrics
alert. One group per SLO, rules in dependency order, so an alert reads the recording rules of
the same evaluation.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from fleetwatch.core.duration import format_duration
from fleetwatch.core.profiles import Profile
from fleetwatch.core.promql import format_le, quote
from fleetwatch.core.rules import AlertingRule, RecordingRule, Rule, RuleGroup
from fleetwatch.core.rules.unittests import rendered
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.rules.promql import SLIQuery, sli_query
from fleetwatch.slo.spec import (
    SEVERITIES,
    AvailabilitySLI,
    BurnWindow,
    GoodputSLI,
    LatencySLI,
    RatioSLI,
    ServiceLevelObjective,
    Severity,
    SLOSpec,
)

__all__ = [
    "ABSENT_ALERT",
    "AlertInfo",
    "RuleSet",
    "alert_name",
    "error_ratio_name",
    "generate_rules",
    "runbook_file",
    "summed_windows",
]

ABSENT_ALERT = "SLOMetricsAbsent"


@dataclass(frozen=True, slots=True)
class AlertInfo:
    """One alert the rules emit, for tests and runbooks: its name, severity, the labels and
    annotations it fires with, and the burn conditions behind it."""

    slo: ServiceLevelObjective
    name: str
    severity: Severity
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    windows: tuple[BurnWindow, ...]
    runbook: str
    for_s: int = 0

    def annotations_at(self, value: float | None = None) -> dict[str, str]:
        """The annotations as promtool renders them for this alert firing with ``value`` (a
        burn alert's value: the long window's error ratio of the first condition met)."""
        return {k: rendered(v, self.labels, value) for k, v in self.annotations.items()}


@dataclass(frozen=True, slots=True)
class RuleSet:
    """Everything generated for one spec on one profile: one rule group per SLO, and what the
    promtool tests and runbooks need to know of its alerts and queries."""

    spec: SLOSpec
    profile: str
    groups: tuple[RuleGroup, ...]
    alerts: tuple[AlertInfo, ...]
    queries: Mapping[str, SLIQuery]


def error_ratio_name(window_s: int) -> str:
    return f"slo:sli_error:ratio_rate{format_duration(window_s)}"


def events_name(window_s: int) -> str:
    return f"slo:sli_events:increase{format_duration(window_s)}"


def bad_name(window_s: int) -> str:
    return f"slo:sli_bad:increase{format_duration(window_s)}"


SUMMED_FROM: Final = 288


def _base(slo: ServiceLevelObjective) -> int | None:
    """The window whose recorded counts long windows are summed from (the shortest burn
    window), or None when there are no windows or it is not shorter than the period."""
    if not slo.windows:
        return None
    base = min(w.short_s for w in slo.windows)
    return base if base < slo.period_s else None


def summed_windows(slo: ServiceLevelObjective, evaluation_interval_s: int) -> frozenset[int]:
    """The windows (seconds) whose error ratio is summed from the base window's recorded counts
    instead of read raw: the period, unless it is itself a burn window; and every burn window at
    least ``SUMMED_FROM`` base windows long (a day over 5 minutes), whose edges (where an event
    is in fewer recorded counts than in the middle) then weigh at most 1/288 of it, when the
    base window is whole evaluation intervals (so each event is in as many counts)."""
    base = _base(slo)
    if base is None:
        return frozenset()
    burn = {s for w in slo.windows for s in (w.long_s, w.short_s)}
    out = set()
    if base % evaluation_interval_s == 0:
        out = {w for w in burn if w >= SUMMED_FROM * base}
    if slo.period_s not in burn:
        out.add(slo.period_s)
    return frozenset(out)


def _kind_word(slo: ServiceLevelObjective) -> str:
    return slo.sli.kind.value


def alert_name(slo: ServiceLevelObjective, severity: Severity) -> str:
    """``SLO<Kind>FastBurn`` for pages, ``SLO<Kind>SlowBurn`` for tickets, unless the spec
    names them."""
    custom = slo.alerting.page_name if severity == "page" else slo.alerting.ticket_name
    if custom:
        return custom
    speed = "Fast" if severity == "page" else "Slow"
    return f"SLO{_kind_word(slo).capitalize()}{speed}Burn"


def runbook_file(slo: ServiceLevelObjective, severity: Severity | None) -> str:
    """Runbook page name: ``slo-<kind>-fast-burn.md``, ``slo-<kind>-slow-burn.md``,
    ``slo-metrics-absent.md``. Latency SLOs get one page per signal (``slo-ttft-fast-burn.md``):
    a slow first token and slow decoding have different causes."""
    if severity is None:
        return "slo-metrics-absent.md"
    speed = "fast" if severity == "page" else "slow"
    word = slo.sli.signal if isinstance(slo.sli, LatencySLI) else _kind_word(slo)
    return f"slo-{word}-{speed}-burn.md"


def _pct(x: float) -> str:
    return f"{x * 100:.4g}%"


def _describe_sli(slo: ServiceLevelObjective) -> str:
    sli = slo.sli
    if isinstance(sli, AvailabilitySLI):
        text = f"requests ending in {'/'.join(sli.bad)} are bad"
    elif isinstance(sli, LatencySLI):
        text = f"{sli.signal.upper()} <= {format_le(sli.threshold_s)} s"
    elif isinstance(sli, GoodputSLI):
        text = f"TTFT <= {format_le(sli.ttft_s)} s and TPOT <= {format_le(sli.tpot_s)} s"
    else:
        assert isinstance(sli, RatioSLI)
        text = f"ratio of {sli.bad or sli.good} to {sli.total}"
    sel = slo.selector
    scope = [
        f"{k}={v}" for k, v in (("traffic_class", sel.traffic_class), ("model", sel.model)) if v
    ]
    return text + (f" ({', '.join(scope)})" if scope else "")


def _condition(slo: ServiceLevelObjective, w: BurnWindow, match: str) -> str:
    thr = repr(slo.threshold(w))
    parts = [
        f"max without (window) ({error_ratio_name(w.long_s)}{{{match}}} > {thr})",
        f"max without (window) ({error_ratio_name(w.short_s)}{{{match}}} > {thr})",
    ]
    if slo.min_events > 0:
        parts.append(
            f"max without (window) ({events_name(w.long_s)}{{{match}}} >= {slo.min_events})"
        )
    return "(\n  " + "\nand\n  ".join(parts) + "\n)"


def _annotations(
    spec: SLOSpec,
    slo: ServiceLevelObjective,
    severity: Severity,
    windows: tuple[BurnWindow, ...],
    runbook: str,
    dashboard: str,
) -> dict[str, str]:
    period = format_duration(slo.period_s)
    budget_min = slo.budget_s / 60
    conds = "; or ".join(
        f"{w.burn:g}x over {format_duration(w.long_s)} and {format_duration(w.short_s)} "
        f"({_pct(w.budget_fraction(slo.period_s))} of the budget spent)"
        for w in windows
    )
    speed = "fast" if severity == "page" else "slowly"
    over = (
        format_duration(windows[0].long_s)
        if len({w.long_s for w in windows}) == 1
        else "the long window of the first condition met"
    )
    out = {
        "summary": f"{spec.service} SLO {slo.name}: error budget burning {speed}",
        "description": (
            f"Objective {slo.objective:g}% over {period} (error budget {_pct(slo.error_budget)}, "
            f"{budget_min:.1f} minutes). SLI: {_describe_sli(slo)}. Burning at more than {conds}. "
            f"Error ratio now {{{{ $value | humanizePercentage }}}} over {over}."
        ),
        "runbook_url": runbook,
        "dashboard_url": dashboard,
    }
    out.update(slo.alerting.annotations)
    return out


def _runbook_url(
    spec: SLOSpec, slo: ServiceLevelObjective, severity: Severity | None, profile: Profile
) -> str:
    """The SLO's own ``runbook_url``, else its page under the spec's ``runbook_base`` (kept
    for old specs), else under the labels file's ``links.runbooks``."""
    if slo.alerting.runbook_url:
        return slo.alerting.runbook_url
    if spec.runbook_base is None:
        return profile.links.runbook(runbook_file(slo, severity))
    return f"{spec.runbook_base.rstrip('/')}/{runbook_file(slo, severity)}"


def _dashboard_url(slo: ServiceLevelObjective, profile: Profile) -> str:
    """The profile's SLO dashboard with this SLO chosen."""
    uid = f"fleetwatch-{profile.name}-slo"
    return profile.links.dashboard(uid, {"slo": urllib.parse.quote_plus(slo.name)})


def _for(seconds: int) -> str | None:
    """An alert's ``for``: None (fire at once) for 0 seconds."""
    return format_duration(seconds) if seconds else None


def _slo_group(
    spec: SLOSpec, slo: ServiceLevelObjective, profile: Profile
) -> tuple[RuleGroup, list[AlertInfo], SLIQuery]:
    query = sli_query(slo, profile)
    ident = {"service": spec.service, "slo": slo.name}
    match = ",".join(f"{k}={quote(v)}" for k, v in ident.items())
    rules: list[Rule] = []
    summed = summed_windows(slo, spec.evaluation_interval_s)
    base = _base(slo)
    if summed:
        # Every event is counted once per evaluation its base window covers, above and below
        # alike, so a sum of the recorded counts stays traffic-weighted and reads two recorded
        # series, not every replica's raw samples over the window.
        assert base is not None
        b = format_duration(base)
        rules.append(RecordingRule(bad_name(base), query.bad_events(b), {**ident, "window": b}))
        rules.append(RecordingRule(events_name(base), query.events(b), {**ident, "window": b}))

    def summed_over(name: str, window: str) -> str:
        assert base is not None
        return f"sum_over_time({name}{{{match}}}[{window}])"

    for w_s in slo.window_seconds():
        window = format_duration(w_s)
        expr = (
            f"{summed_over(bad_name(base), window)}\n/\n{summed_over(events_name(base), window)}"
            if w_s in summed and base is not None
            else query.error_ratio(window)
        )
        rules.append(RecordingRule(error_ratio_name(w_s), expr, {**ident, "window": window}))
    if slo.min_events > 0:
        for w_s in sorted({w.long_s for w in slo.windows}):
            if summed and w_s == base:
                continue
            window = format_duration(w_s)
            expr = (
                f"{summed_over(events_name(base), window)} / {base // spec.evaluation_interval_s}"
                if w_s in summed and base is not None
                else query.events(window)
            )
            rules.append(RecordingRule(events_name(w_s), expr, {**ident, "window": window}))
    budget = repr(slo.error_budget)
    period_ratio = f"{error_ratio_name(slo.period_s)}{{{match}}}"
    shortest = min((w.short_s for w in slo.windows), default=slo.period_s)
    rules += [
        RecordingRule("slo:objective:ratio", f"vector({slo.objective_ratio!r})", ident),
        RecordingRule("slo:error_budget:ratio", f"vector({budget})", ident),
        RecordingRule(
            "slo:period_error_budget_remaining:ratio",
            f"1 - (sum without (window) ({period_ratio}) / {budget})",
            ident,
        ),
        RecordingRule(
            "slo:current_burn_rate:ratio",
            f"sum without (window) ({error_ratio_name(shortest)}{{{match}}}) / {budget}",
            ident,
        ),
    ]
    alerts: list[AlertInfo] = []
    dashboard = _dashboard_url(slo, profile)
    if slo.alerting.enabled:
        for sev in SEVERITIES:
            windows = tuple(w for w in slo.windows if w.severity == sev)
            if not windows:
                continue
            name = alert_name(slo, sev)
            extra = slo.alerting.page_labels if sev == "page" else slo.alerting.ticket_labels
            labels = {**spec.labels, **extra, **ident, "severity": sev}
            runbook = _runbook_url(spec, slo, sev, profile)
            annotations = _annotations(spec, slo, sev, windows, runbook, dashboard)
            expr = "\nor\n".join(_condition(slo, w, match) for w in windows)
            rules.append(AlertingRule(name, expr, labels=labels, annotations=annotations))
            alerts.append(AlertInfo(slo, name, sev, labels, annotations, windows, runbook))
        absent_labels = {**spec.labels, **slo.alerting.page_labels, **ident, "severity": "page"}
        runbook = _runbook_url(spec, slo, None, profile)
        absent_ann = {
            "summary": f"{spec.service} SLO {slo.name}: its metrics are missing",
            "description": (
                f"No series matches {query.absent} for {format_duration(slo.alerting.absent_for_s)}: "
                "the burn-rate alerts of this SLO cannot fire. Check the scrape target and the "
                "metric names of the profile."
            ),
            "runbook_url": runbook,
            "dashboard_url": dashboard,
            **slo.alerting.annotations,
        }
        rules.append(
            AlertingRule(
                ABSENT_ALERT,
                f"absent({query.absent})",
                _for(slo.alerting.absent_for_s),
                absent_labels,
                absent_ann,
            )
        )
        alerts.append(
            AlertInfo(
                slo,
                ABSENT_ALERT,
                "page",
                {**query.absent_labels, **absent_labels},
                absent_ann,
                (),
                runbook,
                slo.alerting.absent_for_s,
            )
        )
    interval = format_duration(spec.evaluation_interval_s)
    group = RuleGroup(f"slo:{spec.service}:{slo.name}", tuple(rules), interval)
    return group, alerts, query


def generate_rules(spec: SLOSpec, profile: Profile) -> RuleSet:
    """All rule groups for ``spec`` on ``profile``. Raises ``SLOSpecError`` naming the YAML path
    of the first SLO the profile cannot express, and when nothing would be generated."""
    groups: list[RuleGroup] = []
    alerts: list[AlertInfo] = []
    queries: dict[str, SLIQuery] = {}
    for slo in spec.slos:
        group, slo_alerts, query = _slo_group(spec, slo, profile)
        groups.append(group)
        alerts.extend(slo_alerts)
        queries[slo.name] = query
    if not any(g.rules for g in groups):
        raise SLOSpecError("no rules to write: the spec produced an empty rules file", path="slos")
    return RuleSet(spec, profile.name, tuple(groups), tuple(alerts), queries)
