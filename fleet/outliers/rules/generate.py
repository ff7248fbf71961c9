"""The outlier detector as Prometheus recording and alerting rules, plus a promtool test.

Per replica: the p50 of each latency histogram (TTFT, TPOT or ITL, end-to-end) over a window and
its error ratio; per model (the fleet): ``quantile(0.5, …)`` of those across replicas, the MAD,
and a spread floor of 5 % of the median so the score is sound when MAD is 0. A replica alerts
(``FleetReplicaOutlier``, label ``signal``) when its ratio to the fleet median is at least
``min_effect``, its robust z beyond ``z_cutoff`` and, for a latency, its p50 above the top of the
histogram bucket that holds the fleet median (inside one bucket ``histogram_quantile`` only
interpolates: 7.8 ms against 5 ms, both in (0, 10 ms], is no difference it can show), it serves at least ``min_rate_per_s``
requests per second, and its fleet has at least ``min_fleet`` such replicas.

Unlike ``fleetwatch fleet outliers``, PromQL cannot normalise by prompt length or say why: the
alert names the replica and the runbook tells the responder to run the command for the cause.
What it can do is compare like with like: when the profile counts prompt tokens, a replica whose
prompt tokens per request stray more than ``mix_ratio`` (either way) from its fleet's median is
left out of the median and MAD and does not alert (``replica:fleet_requests:rate<w>_peers`` lists
the compared replicas). Without that, a replica sent only long prompts (3-10x the TPOT, 10-15x the
TTFT of its peers on a busy host) is either blamed itself, or, beside a truly slow replica in a
fleet of four, pulls the median and MAD up so far that the slow one's robust z stays near the
cutoff and a noisy series never holds it for the whole ``for``.
Metric names come from ``fleetwatch.core.profiles``; nothing here spells an engine's names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleetwatch.core.duration import format_duration, parse_duration
from fleetwatch.core.profiles import MetricRef, Profile, Signal
from fleetwatch.core.profiles.types import by
from fleetwatch.core.rules import (
    AlertCase,
    AlertingRule,
    ExpectedAlert,
    ExpectedSample,
    ExprCase,
    InputSeries,
    RecordingRule,
    Rule,
    RuleFile,
    RuleGroup,
    RuleTest,
    RuleTestFile,
    render_yaml,
)
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.outliers.rules.cases import same_bucket_case
from fleetwatch.fleet.outliers.rules.parts import (
    alert_annotations,
    kept,
    latency_refs,
    names,
    ok_label,
    peer_records,
    rendered,
    replica_match,
    test_labels,
)
from fleetwatch.fleet.outliers.rules.parts import series_name as _series
from fleetwatch.fleet.outliers.sources.exposition import ref_labels
from fleetwatch.fleet.outliers.sources.histogram import histogram_quantile

__all__ = [
    "ALERT_NAME",
    "RuleOptions",
    "outlier_rules",
    "outlier_rules_test",
    "render_yaml",
]

ALERT_NAME = "FleetReplicaOutlier"


@dataclass(frozen=True, slots=True)
class RuleOptions:
    """Generation settings. ``window``: rate window; ``for_``: how long before firing;
    ``mix_ratio``: how far (either way) a replica's prompt tokens per request may stray from its
    fleet's median before it is compared with nobody (see the module's docstring)."""

    window: str = "5m"
    min_effect: float = 1.25
    z_cutoff: float = 3.5
    rel_floor: float = 0.05
    error_min_diff: float = 0.02
    error_floor: float = 0.005
    min_rate_per_s: float = 0.1
    min_fleet: int = 3
    mix_ratio: float = 1.25
    for_: str = "10m"
    severity: str = "ticket"
    runbook_url: str | None = None
    """Overrides the labels file's ``links.runbooks`` (default: its replica-outlier page)."""


def outlier_rules(profile: Profile, options: RuleOptions | None = None) -> RuleFile:
    """The rule file (one group) for ``profile``."""
    o = options or RuleOptions()
    rs, fs = by(profile.replica_set), by(profile.fleet_labels)
    w = o.window
    volume = f"replica:fleet_requests:rate{w}"
    size = "fleet:fleet_replicas:count"
    records: list[Rule] = [
        RecordingRule(volume, f"sum by ({rs}) (rate({profile.outcomes.total.selector()}[{w}]))"),
    ]
    peers = peer_records(profile, o, records)
    records.append(RecordingRule(size, f"count by ({fs}) ({peers})"))
    alerts: list[Rule] = []
    signals: list[tuple[str, str, float, str]] = []
    bounds: dict[str, list[float]] = {}
    for name, ref in latency_refs(profile):
        expr = (
            f"histogram_quantile(0.5, sum by ({rs}, le) "
            f"(rate({ref.selector(suffix='_bucket')}[{w}])))"
        )
        signals.append((name, expr, o.rel_floor, "ratio"))
        bounds[name] = sorted({float(b) for b in ref.buckets if math.isfinite(b)})
    bad = profile.outcomes.bad.get("error")
    total = f"sum by ({rs}) (rate({profile.outcomes.total.selector()}[{w}]))"
    if bad is not None:
        signals.append(
            (
                "error",
                f"(sum by ({rs}) (rate({bad.selector()}[{w}])) or {total} * 0) / {total}",
                0.0,
                "absolute",
            )
        )
    elif profile.outcomes.good is not None:
        good = f"sum by ({rs}) (rate({profile.outcomes.good.selector()}[{w}]))"
        signals.append(("error", f"1 - {good} / {total}", 0.0, "absolute"))
    if not signals:
        raise AnalysisError(f"profile '{profile.name}' has no latency histogram or error counter")
    for name, expr, floor, gate in signals:
        n = names(name, w)
        floor_expr = (
            f"{floor:g} * {n['median']}"
            if gate == "ratio"
            else f"{n['median']} * 0 + {o.error_floor:g}"
        )
        records += [
            RecordingRule(
                n["replica"], f"({expr}) and on ({rs}) ({volume} >= {o.min_rate_per_s:g})"
            ),
            RecordingRule(
                n["median"], f"quantile by ({fs}) (0.5, {n['replica']} and on ({rs}) ({peers}))"
            ),
            RecordingRule(
                n["mad"],
                f"quantile by ({fs}) (0.5, abs({n['replica']} - on ({fs}) group_left () {n['median']}) and on ({rs}) ({peers}))",
            ),
            RecordingRule(n["scale"], f"(1.4826 * {n['mad']} > {floor_expr}) or ({floor_expr})"),
            RecordingRule(
                n["ratio"], f"{n['replica']} / on ({fs}) group_left () ({n['median']} > 0)"
            ),
            RecordingRule(
                n["z"],
                f"({n['replica']} - on ({fs}) group_left () {n['median']}) / on ({fs}) group_left () ({n['scale']} > 0)",
            ),
        ]
        resolved = ""
        if bounds.get(name):
            # The top of the bucket that holds the fleet median: a replica's p50 at or below it
            # lies in the same bucket, where histogram_quantile only interpolates (no finding).
            top = " or ".join(f"({n['median']} <= {b:g}) * 0 + {b:g}" for b in bounds[name])
            records.append(RecordingRule(n["top"], f"{top} or {n['median']} * 0 + Inf"))
            resolved = f" and on ({rs}) ({n['replica']} > on ({fs}) group_left () {n['top']})"
        if gate == "ratio":
            effect = f"{n['ratio']} >= {o.min_effect:g}"
            shown = '{{ $value | printf "%.2f" }}x'
        else:
            effect = (
                f"{n['replica']} - on ({fs}) group_left () {n['median']} >= {o.error_min_diff:g}"
            )
            shown = "{{ $value | humanizePercentage }} above"
        alerts.append(
            AlertingRule(
                ALERT_NAME,
                f"({effect}) and ({n['z']} > {o.z_cutoff:g}){resolved} and on ({rs}) ({peers}) and on ({fs}) ({size} >= {o.min_fleet})",
                o.for_,
                {"severity": o.severity, "signal": name},
                alert_annotations(profile, o, name, shown),
            )
        )
    group = RuleGroup(f"fleetwatch-fleet-outliers-{profile.name}", (*records, *alerts))
    return RuleFile((group,))


def sample_step_s(options: RuleOptions) -> int:
    """Seconds between samples in the generated promtool test: at most a minute, and at least
    15 samples across the rule's window plus its ``for``."""
    for_s = 0 if options.for_.strip() in ("0", "0s") else parse_duration(options.for_)
    span = parse_duration(options.window) + for_s
    return max(1, min(60, math.ceil(span / 15)))


def outlier_rules_test(
    profile: Profile, rule_file: str, options: RuleOptions | None = None
) -> RuleTestFile:
    """A promtool test: five replicas, one twice as slow on every latency signal and one with
    10 % errors; the slow one alerts per latency signal, the failing one on ``error``, the
    rest stay quiet. A second case, a healthy fleet, expects no alert. When the profile counts
    prompt tokens, a third case adds a sixth replica sent eight times the fleet's prompt tokens
    per request and slower than the slow one on every latency signal: its prompt mix leaves it
    compared with nobody, so it does not alert and the same two replicas do. A last case puts one
    replica's p50 1.82x the fleet's, robust z far beyond the cutoff, inside the bucket that holds
    the fleet median: no alert."""
    o = options or RuleOptions()
    replicas = [f"replica-{i}" for i in range(5)]
    slow, failing = replicas[3], replicas[1]
    # The sample grid scales with the rule's window and ``for``, so a 30 s window is tested with
    # several samples per window and a 5 m one on the usual one-minute grid; the alert is checked
    # 30 samples in, well past window + for.
    step_s = sample_step_s(o)
    minutes = 40  # samples
    per_min = 10 * step_s  # 10 requests per second
    at = format_duration(30 * step_s)
    interval = format_duration(step_s)

    long_rep = "replica-5"

    def fleet_series(bad: bool, long: bool = False) -> tuple[InputSeries, ...]:
        series: list[InputSeries] = []
        for rep in [*replicas, *([long_rep] if long else [])]:
            base = test_labels(profile, "m", rep)
            if profile.has(Signal.PROMPT_TOKENS):
                tokens = profile.metric(Signal.PROMPT_TOKENS)
                per_request = 320 if rep == long_rep else 40
                series.append(
                    InputSeries(
                        _series(tokens.name, {**base, **ref_labels(tokens)}),
                        f"0+{per_min * per_request}x{minutes}",
                    )
                )
            for _name, ref in latency_refs(profile):
                bounds = [b for b in ref.buckets if b > 0]
                i = len(bounds) // 2
                lo_i = i + 2 if rep == long_rep else i + 1 if bad and rep == slow else i
                for le in [*bounds[max(0, i - 2) : i + 3], float("inf")]:
                    in_bucket = le >= bounds[lo_i]
                    le_s = "+Inf" if le == float("inf") else f"{le:g}"
                    series.append(
                        InputSeries(
                            _series(ref.name + "_bucket", {**base, "le": le_s}),
                            f"0+{per_min if in_bucket else 0}x{minutes}",
                        )
                    )
            errors = per_min // 10 if bad and rep == failing else 0
            total = profile.outcomes.total
            total_labels = {**base, **ref_labels(total)}
            bad_ref = profile.outcomes.bad.get("error")
            if bad_ref is not None and bad_ref.name == total.name:
                series.append(
                    InputSeries(
                        _series(total.name, {**total_labels, **ok_label(bad_ref)}),
                        f"0+{per_min - errors}x{minutes}",
                    )
                )
                series.append(
                    InputSeries(
                        _series(bad_ref.name, {**base, **ref_labels(bad_ref)}),
                        f"0+{errors}x{minutes}",
                    )
                )
            else:
                series.append(
                    InputSeries(_series(total.name, total_labels), f"0+{per_min}x{minutes}")
                )
                if bad_ref is not None:
                    series.append(
                        InputSeries(
                            _series(bad_ref.name, {**base, **ref_labels(bad_ref)}),
                            f"0+{errors}x{minutes}",
                        )
                    )
                if profile.outcomes.good is not None:
                    g = profile.outcomes.good
                    series.append(
                        InputSeries(
                            _series(g.name, {**base, **ref_labels(g)}),
                            f"0+{per_min - errors}x{minutes}",
                        )
                    )
        return tuple(series)

    def quantile_of(ref: MetricRef, slow_replica: bool) -> float:
        bounds = [b for b in ref.buckets if b > 0]
        i = len(bounds) // 2 + (1 if slow_replica else 0)
        return histogram_quantile(0.5, [(bounds[i], 1.0), (bounds[i - 1], 0.0)])

    slow_labels, failing_labels = (test_labels(profile, "m", rep) for rep in (slow, failing))
    expected = [
        ExpectedAlert(
            {"severity": o.severity, "signal": name, **kept(profile, slow_labels)},
            rendered(
                profile,
                o,
                name,
                f"{quantile_of(ref, True) / quantile_of(ref, False):.2f}x",
                slow_labels,
            ),
        )
        for name, ref in latency_refs(profile)
    ]
    if "error" in profile.outcomes.bad or profile.outcomes.good is not None:
        expected.append(
            ExpectedAlert(
                {"severity": o.severity, "signal": "error", **kept(profile, failing_labels)},
                rendered(profile, o, "error", "10% above", failing_labels),
            )
        )
    alerts = (AlertCase(at, ALERT_NAME, tuple(expected)),)
    ratio_rule = (
        names(latency_refs(profile)[0][0], o.window)["ratio"] if latency_refs(profile) else None
    )
    expr_tests = []
    if ratio_rule is not None:
        ref = latency_refs(profile)[0][1]
        healthy, slow_v = quantile_of(ref, False), quantile_of(ref, True)
        sample = ExpectedSample(_series(ratio_rule, kept(profile, slow_labels)), slow_v / healthy)
        expr_tests.append(
            ExprCase(f"{ratio_rule}{replica_match(profile, slow_labels)}", at, (sample,))
        )
    tests = [
        RuleTest(interval, fleet_series(True), alerts, tuple(expr_tests)),
        RuleTest(interval, fleet_series(False), (AlertCase(at, ALERT_NAME),)),
    ]
    if profile.has(Signal.PROMPT_TOKENS):
        tests.append(RuleTest(interval, fleet_series(True, long=True), alerts))
    tests += same_bucket_case(
        profile,
        o,
        replicas,
        alert=ALERT_NAME,
        interval=interval,
        at=at,
        per_min=per_min,
        minutes=minutes,
    )
    return RuleTestFile((rule_file,), interval, tuple(tests))
