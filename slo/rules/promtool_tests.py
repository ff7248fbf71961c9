"""Generate a ``promtool test rules`` file for a rule set: three scenarios per SLO, one for all.

- healthy: errors at half the budget rate (or less) for 30 minutes: no burn alert fires;
- fast burn: healthy, then every request bad: the page alert fires by the time the Workbook
  arithmetic says it must (the first page condition whose long and short windows both exceed
  burn x budget), and resets once the short window has seen the recovery;
- slow burn: errors between the ticket and the page burn factors: a ticket, no page;
- absent (one test for the whole spec): no series at all: every SLO's ``SLOMetricsAbsent``
  fires after its ``for:``.

Counts are 1,000,000 requests per evaluation step, so any budget down to 1e-6 has whole bad
counts. A burn scenario is left out (and named in the file's ``skipped`` comment) when its
alert cannot be told apart: another SLO reads the same metric under the same alert name, the
SLI names raw regex selectors, or the burn factors cannot be reached (burn x budget >= 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fleetwatch.slo.rules.generate import ABSENT_ALERT, AlertInfo, RuleSet
from fleetwatch.slo.rules.series import slo_series
from fleetwatch.slo.spec import ServiceLevelObjective
from fleetwatch.telemetry.duration import format_duration
from fleetwatch.telemetry.profiles import Profile

__all__ = ["generate_promtool_tests"]

_N = 1_000_000
_BASELINE_S = 900


def _fmt(seconds: int) -> str:
    return format_duration(seconds) if seconds > 0 else "0s"


def _alert_test(at_s: int, alert: AlertInfo, firing: bool) -> dict[str, Any]:
    exp = (
        [{"exp_labels": dict(alert.labels), "exp_annotations": dict(alert.annotations)}]
        if firing
        else []
    )
    return {"eval_time": _fmt(at_s), "alertname": alert.name, "exp_alerts": exp}


def _first_firing(
    slo: ServiceLevelObjective,
    alert: AlertInfo,
    baseline: int,
    h_bad: int,
    e_bad: int,
    limit: int,
    step: int,
) -> int | None:
    """Steps after onset at which ``alert`` first fires, for ``baseline`` steps of ``h_bad`` bad
    per step then ``e_bad`` bad per step (``_N`` requests per step, series starting at 0): the
    window arithmetic of the rules, in whole events (None: not within ``limit`` steps)."""
    for k in range(1, limit + 1):
        for w in alert.windows:
            thr = slo.threshold(w)
            ok = True
            for win in (w.long_s // step, w.short_s // step):
                in_burn = min(k, win)
                in_base = max(0, min(baseline, win - k))
                total = _N * (in_burn + in_base)
                bad = e_bad * in_burn + h_bad * in_base
                ok = ok and total > 0 and bad / total > thr
            if ok and slo.min_events > 0:
                ok = _N * min(baseline + k, w.long_s // step) >= slo.min_events
            if ok:
                return k
    return None


def _tests_for(
    slo: ServiceLevelObjective,
    alerts: Sequence[AlertInfo],
    profile: Profile,
    step: int,
    skipped: list[str],
) -> list[dict[str, Any]]:
    page = next((a for a in alerts if a.severity == "page" and a.windows), None)
    ticket = next((a for a in alerts if a.severity == "ticket" and a.windows), None)
    burns = [w.burn for w in slo.windows]
    budget = slo.error_budget
    h_bad = max(0, math.floor(min(0.5, min(burns) / 2) * budget * _N))
    tests: list[dict[str, Any]] = []

    def series(phases: Sequence[tuple[int, int]]) -> list[dict[str, str]] | None:
        good: list[int] = []
        bad: list[int] = []
        for n_steps, n_bad in phases:
            good += [_N - n_bad] * n_steps
            bad += [n_bad] * n_steps
        return slo_series(slo, profile, good, bad)

    burn_alerts = [a for a in (page, ticket) if a is not None]
    healthy_steps = max(2, 1800 // step)
    s = series([(healthy_steps, h_bad)])
    if s is None:
        skipped.append(f"{slo.name}: SLI selectors cannot be synthesised")
        return tests
    checks = [
        _alert_test(t * step, a, False)
        for t in range(0, healthy_steps + 1, max(1, 300 // step))
        for a in burn_alerts
    ]
    tests.append({"name": f"{slo.name}: healthy traffic fires nothing", "interval": _fmt(step),
                  "input_series": s, "alert_rule_test": checks})  # fmt: skip

    onset = _BASELINE_S // step
    limit = 3 * 86400 // step
    if page is not None:
        fire = _first_firing(slo, page, onset, h_bad, _N, limit, step)
        if fire is None:
            skipped.append(f"{slo.name}: fast burn (no page condition reachable at 100% errors)")
        else:
            short = max(w.short_s for w in page.windows) // step + 1
            outage = fire + 3
            s = series([(onset, h_bad), (outage, _N), (short + 3, h_bad)])
            assert s is not None
            recovered = onset + outage + short
            checks = [_alert_test(onset * step, page, False)]
            if fire > 1:
                checks.append(_alert_test((onset + fire - 1) * step, page, False))
            checks += [
                _alert_test((onset + fire) * step, page, True),
                _alert_test(recovered * step, page, False),
            ]
            tests.append({
                "name": f"{slo.name}: a total outage pages after {_fmt(fire * step)} and resets after recovery",
                "interval": _fmt(step),
                "input_series": s,
                "alert_rule_test": checks,
            })  # fmt: skip
    if ticket is not None:
        page_burns = [w.burn for w in slo.windows if w.severity == "page"]
        lowest_page = min(page_burns, default=math.inf)
        below = [w.burn for w in ticket.windows if w.burn < lowest_page]
        rate = (max(below) + lowest_page) / 2 if below and page_burns else max(burns) * 1.5
        n_bad = math.ceil(rate * budget * _N)
        fire = (
            _first_firing(slo, ticket, onset, h_bad, n_bad, limit, step)
            if below and n_bad < _N
            else None
        )
        if fire is None:
            skipped.append(f"{slo.name}: slow burn (no ticket condition below the page factors)")
        else:
            s = series([(onset, h_bad), (fire + 2, n_bad)])
            assert s is not None
            checks = [_alert_test(onset * step, ticket, False)]
            if fire > 1:
                checks.append(_alert_test((onset + fire - 1) * step, ticket, False))
            checks.append(_alert_test((onset + fire) * step, ticket, True))
            if page is not None:
                checks.append(_alert_test((onset + fire + 1) * step, page, False))
            tests.append({
                "name": f"{slo.name}: a slow burn ({rate:g}x) opens a ticket after {_fmt(fire * step)}, no page",
                "interval": _fmt(step),
                "input_series": s,
                "alert_rule_test": checks,
            })  # fmt: skip
    return tests


def generate_promtool_tests(
    rules: RuleSet, profile: Profile, rules_file: str | Path
) -> dict[str, Any]:
    """The test document for ``rules`` (read from ``rules_file``, a path relative to the test
    file)."""
    step = rules.spec.evaluation_interval_s
    tests: list[dict[str, Any]] = []
    skipped: list[str] = []
    names_by_metric: dict[tuple[str, str], list[str]] = {}
    for slo in rules.spec.slos:
        q = rules.queries[slo.name]
        metric = q.absent.partition("{")[0]
        for a in rules.alerts:
            if a.slo is slo and a.windows:
                names_by_metric.setdefault((metric, a.name), []).append(slo.name)
    for slo in rules.spec.slos:
        alerts = [a for a in rules.alerts if a.slo is slo]
        if not alerts:
            continue
        metric = rules.queries[slo.name].absent.partition("{")[0]
        shared = [
            n
            for a in alerts
            if a.windows
            for n in names_by_metric[(metric, a.name)]
            if n != slo.name
        ]
        if shared:
            skipped.append(
                f"{slo.name}: burn scenarios (shares metric and alert name with {', '.join(sorted(set(shared)))})"
            )
            continue
        tests.extend(_tests_for(slo, alerts, profile, step, skipped))
    absent = [a for a in rules.alerts if a.name == ABSENT_ALERT]
    if absent:
        longest = max(a.for_s for a in absent)
        shortest = min(a.for_s for a in absent)
        checks = [{"eval_time": _fmt(longest + step), "alertname": ABSENT_ALERT,
                   "exp_alerts": [{"exp_labels": dict(a.labels), "exp_annotations": dict(a.annotations)}
                                  for a in absent]}]  # fmt: skip
        if shortest > step:
            checks.insert(
                0, {"eval_time": _fmt(shortest - step), "alertname": ABSENT_ALERT, "exp_alerts": []}
            )
        tests.append({"name": "no metrics at all: every SLO's absent alert fires after its for:",
                      "interval": _fmt(step), "input_series": [], "alert_rule_test": checks})  # fmt: skip
    doc: dict[str, Any] = {
        "rule_files": [str(rules_file)],
        "evaluation_interval": _fmt(step),
        "tests": tests,
    }
    if skipped:
        doc = {"skipped": skipped, **doc}
    return doc
