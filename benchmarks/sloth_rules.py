"""Sloth's rules for an SLO spec, the baseline the rule-cost benchmarks compare against.

Written by hand in the shape of ``slok/sloth`` ``examples/_gen/getting-started.yml`` (Sloth's
binary cannot be built here): per SLO three groups, the SLI recordings (a ratio of raw rates per
window, and the period as ``sum_over_time / count_over_time`` of the recorded 5-minute ratio),
the metadata recordings (objective, budget, period, current and period burn rates, budget left,
info) and the page and ticket alerts (long AND short window over burn x budget, ``or``-ed). The
SLI queries are fleetwatch's for the profile (``sli_query``), so both rule sets read the same
series. Sloth records a ratio for every window of its catalogue (``CATALOGUE``, the Workbook's
for 30- and 28-day periods) whatever the alerts use; with ``windows=None`` the spec's own windows
are recorded instead (for a spec whose windows are not Sloth's).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from fleetwatch.core.duration import format_duration, parse_duration
from fleetwatch.core.profiles import Profile
from fleetwatch.core.rules import AlertingRule, RecordingRule, Rule, RuleGroup
from fleetwatch.slo.rules.promql import sli_query
from fleetwatch.slo.spec import SEVERITIES, SLOSpec

__all__ = ["CATALOGUE", "sloth_groups", "sloth_raw_exprs"]

CATALOGUE: Final = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")


def _windows(
    spec_windows: Iterable[int], windows: Sequence[str] | None, period_s: int
) -> list[str]:
    """The windows Sloth records a raw ratio for, shortest first (5m always: the period is
    recorded from it)."""
    seconds = set(spec_windows) if windows is None else {parse_duration(w) for w in windows}
    return [format_duration(s) for s in sorted(seconds | {300}) if s != period_s]


def sloth_groups(
    spec: SLOSpec, profile: Profile, windows: Sequence[str] | None = CATALOGUE
) -> tuple[RuleGroup, ...]:
    """Sloth's three rule groups per SLO of ``spec`` on ``profile``."""
    groups: list[RuleGroup] = []
    interval = format_duration(spec.evaluation_interval_s)
    for slo in spec.slos:
        query = sli_query(slo, profile)
        ident = {
            "sloth_id": f"{spec.service}-{slo.name}",
            "sloth_service": spec.service,
            "sloth_slo": slo.name,
        }
        match = ", ".join(f'{k}="{v}"' for k, v in ident.items())
        spec_windows = {s for w in slo.windows for s in (w.long_s, w.short_s)}
        period = format_duration(slo.period_s)
        five = f"slo:sli_error:ratio_rate5m{{{match}}}"
        sli: list[Rule] = [
            RecordingRule(
                f"slo:sli_error:ratio_rate{w}", query.error_ratio(w), {**ident, "sloth_window": w}
            )
            for w in _windows(spec_windows, windows, slo.period_s)
        ]
        sli.append(
            RecordingRule(
                f"slo:sli_error:ratio_rate{period}",
                f"sum_over_time({five}[{period}])\n/ ignoring (sloth_window)\n"
                f"count_over_time({five}[{period}])",
                {"sloth_window": period},
            )
        )
        budget = f"slo:error_budget:ratio{{{match}}}"
        on = "/ on(sloth_id, sloth_slo, sloth_service) group_left\n"
        meta: list[Rule] = [
            RecordingRule("slo:objective:ratio", f"vector({slo.objective_ratio!r})", ident),
            RecordingRule("slo:error_budget:ratio", f"vector(1-{slo.objective_ratio!r})", ident),
            RecordingRule("slo:time_period:days", f"vector({slo.period_s // 86400})", ident),
            RecordingRule("slo:current_burn_rate:ratio", f"{five}\n{on}{budget}", ident),
            RecordingRule(
                "slo:period_burn_rate:ratio",
                f"slo:sli_error:ratio_rate{period}{{{match}}}\n{on}{budget}",
                ident,
            ),
            RecordingRule(
                "slo:period_error_budget_remaining:ratio",
                f"1 - slo:period_burn_rate:ratio{{{match}}}",
                ident,
            ),
            RecordingRule("sloth_slo_info", "vector(1)", ident),
        ]
        alerts: list[Rule] = []
        for sev in SEVERITIES:
            conds = []
            for w in (w for w in slo.windows if w.severity == sev):
                thr = f"({w.burn:g} * {slo.error_budget!r})"
                short, long = format_duration(w.short_s), format_duration(w.long_s)
                conds.append(
                    f"(\n    (slo:sli_error:ratio_rate{short}{{{match}}} > {thr})\n"
                    f"    and ignoring (sloth_window)\n"
                    f"    (slo:sli_error:ratio_rate{long}{{{match}}} > {thr})\n)"
                )
            if conds:
                alerts.append(
                    AlertingRule(
                        f"SLOSloth{slo.name.capitalize()}",
                        "\nor ignoring (sloth_window)\n".join(conds),
                        labels={"sloth_severity": sev},
                    )
                )
        name = f"{spec.service}-{slo.name}"
        groups += [
            RuleGroup(f"sloth-slo-sli-recordings-{name}", tuple(sli), interval),
            RuleGroup(f"sloth-slo-meta-recordings-{name}", tuple(meta), interval),
        ]
        if alerts:
            groups.append(RuleGroup(f"sloth-slo-alerts-{name}", tuple(alerts), interval))
    return tuple(groups)


def sloth_raw_exprs(
    spec: SLOSpec, profile: Profile, windows: Sequence[str] | None = CATALOGUE
) -> list[str]:
    """The expressions of ``sloth_groups`` that read raw series (every window's ratio) and the
    period's, in order."""
    return [
        r.expr
        for g in sloth_groups(spec, profile, windows)
        if "-sli-recordings-" in g.name
        for r in g.rules
    ]
