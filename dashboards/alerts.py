"""Operational (non-SLO) alert rules and their promtool unit tests, generated from a profile.

The SLO burn-rate alerts come from ``slo``; the outlier alerts from ``fleet``. These
are the rest: KV-cache pressure, preemption storm, GPU throttling, breaker open, retry budget
exhausted and telemetry drops. An alert whose signal the profile lacks is left out, never written
against a metric the engine does not export. The breaker and retry-budget alerts read series of
fleetwatch's resilience library in the user's client code, not the engine's: they are written for
profiles that include them (``RESILIENCE_PROFILES``) or when asked (``resilience=True``), and
their descriptions say where the series come from. Every alert carries a ``runbook_url`` to its
page in ``runbooks/``.

``rules_document`` and ``alert_tests`` are pure (values of ``fleetwatch.core.rules``);
``render_yaml``, the one renderer, gives the file text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from fleetwatch.core.duration import parse_duration
from fleetwatch.core.links import Links
from fleetwatch.core.profiles import MetricRef, Profile, Signal
from fleetwatch.core.profiles.types import by as _by
from fleetwatch.core.promql import format_matchers, quote
from fleetwatch.core.rules import (
    AlertCase,
    AlertingRule,
    ExpectedAlert,
    InputSeries,
    RuleFile,
    RuleGroup,
    RuleTest,
    RuleTestFile,
    render_yaml,
)
from fleetwatch.core.rules.unittests import rendered
from fleetwatch.dashboards.errors import DashboardError
from fleetwatch.dashboards.names import (
    BREAKER_LABEL,
    BREAKER_OPEN_STATES,
    BREAKER_STATE_LABEL,
    RESILIENCE,
    RESILIENCE_SOURCE,
    RETRY_BUDGET_LABEL,
    Resilience,
    has_resilience,
)
from fleetwatch.dashboards.recordings import fleet_recordings
from fleetwatch.dashboards.views.replica import CLOCK_EVENT_LABEL, GPU_LABEL

__all__ = [
    "ALERT_PAGES",
    "AlertRule",
    "Thresholds",
    "alert_rules",
    "alert_tests",
    "render_yaml",
    "rules_document",
]

# Alert name -> runbook page (file name under runbooks/).
ALERT_PAGES: Final[Mapping[str, str]] = {
    "FleetwatchKVCachePressure": "kv-cache-pressure.md",
    "FleetwatchPreemptionStorm": "preemption-storm.md",
    "FleetwatchGPUThrottling": "gpu-throttling.md",
    "FleetwatchBreakerOpen": "breaker-open.md",
    "FleetwatchRetryBudgetExhausted": "retry-budget-exhausted.md",
    "FleetwatchTelemetryDrops": "telemetry-drops.md",
    "FleetwatchReplicaDown": "replica-down.md",
    "FleetwatchQueueGrowing": "queue-growing.md",
}

# NVML clock-event reasons that are not throttling (the GPU idles or runs at set clocks).
BENIGN_CLOCK_REASONS: Final = "gpu_idle|applications_clocks_setting"


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Alert thresholds. Ratios are 0..1; rates are per second; durations Prometheus strings."""

    kv_usage: float = 0.95
    kv_for: str = "10m"
    preemptions_per_request: float = 0.1
    preemption_for: str = "10m"
    sm_clock_ratio: float = 0.9
    throttle_for: str = "5m"
    breaker_open_for: str = "1m"
    retry_refused_share: float = 0.01
    retry_for: str = "5m"
    telemetry_drops_per_s: float = 0.0
    telemetry_for: str = "10m"
    down_for: str = "5m"
    served_within: str = "1h"
    queue_waiting: float = 5
    queue_window: str = "10m"
    queue_for: str = "5m"
    window: str = "5m"


@dataclass(frozen=True, slots=True)
class Example:
    """Input series for the generated promtool test: values when firing and when healthy
    (promtool expanding notation, one sample per minute)."""

    series: str
    firing: str
    healthy: str


@dataclass(frozen=True, slots=True)
class AlertRule:
    """One alerting rule plus the example traffic that proves it. ``value`` is the sentence
    ending the description that shows the alert's ``$value``; ``example_value`` the same
    sentence as promtool renders it on the firing example; ``view`` the dashboard it links."""

    name: str
    expr: str
    duration: str
    severity: str
    summary: str
    description: str
    labels: tuple[str, ...]
    examples: tuple[Example, ...]
    example_labels: Mapping[str, str] = field(default_factory=dict)
    value: str = ""
    example_value: str = ""
    view: str = "replica"

    def runbook(self, links: Links, base: str | None = None) -> str:
        if base is not None:
            return f"{base.rstrip('/')}/{ALERT_PAGES[self.name]}"
        return links.runbook(ALERT_PAGES[self.name])

    def dashboard(self, profile: Profile) -> str:
        """The link to the dashboard of this alert's view, its model and replica variables
        set from the alert's labels where it has them."""
        owner = "fleetwatch" if self.view == "resilience" else profile.name
        variables = {
            var: "{{ $labels." + label + " | urlquery }}"
            for var, label in (("model", profile.model_label), ("replica", profile.replica_label))
            if label in self.labels
        }
        return profile.links.dashboard(f"fleetwatch-{owner}-{self.view}", variables)

    def annotations(self, profile: Profile, base: str | None = None) -> dict[str, str]:
        return {
            "summary": self.summary,
            "description": f"{self.description} {self.value}".strip(),
            "runbook_url": self.runbook(profile.links, base),
            "dashboard_url": self.dashboard(profile),
        }


def _ref(label: str) -> str:
    """Prometheus template reference to a label of the alert."""
    return "{{ $labels." + label + " }}"


def _series(ref: MetricRef, labels: Mapping[str, str]) -> str:
    """An example input series of ``ref`` with ``labels`` (its own matchers first)."""
    return f"{ref.name}{{{','.join(p for p in (ref.matchers, format_matchers(labels)) if p)}}}"


def _keep(labels: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    return {k: labels[k] for k in names if k in labels}


def _engine_alerts(profile: Profile, t: Thresholds) -> list[AlertRule]:
    r, m = profile.replica_ref(), profile.model_label
    replica = tuple(dict.fromkeys((*profile.replica_labels, *profile.routing)))
    keep = tuple(dict.fromkeys((*profile.replica_labels, m, *profile.routing)))
    by = _by(keep)
    example = profile.series_labels("m", "r0")
    # Device and telemetry series name the replica but not necessarily the model.
    device = {k: v for k, v in example.items() if k != m or m in profile.scope_labels}
    rules: list[AlertRule] = []
    if profile.has(Signal.KV_USAGE):
        kv = profile.metric(Signal.KV_USAGE)
        rules.append(
            AlertRule(
                "FleetwatchKVCachePressure",
                f"max by ({by}) ({kv.selector()}) > {t.kv_usage:g}",
                t.kv_for,
                "ticket",
                f"KV cache of {r} above {t.kv_usage * 100:g}% for {t.kv_for}",
                "KV-cache usage stayed above the threshold: new requests queue and running "
                "ones get preempted.",
                keep,
                (Example(_series(kv, example), "0.99x40", "0.5x40"),),
                _keep(example, keep),
                "Usage now {{ $value | humanizePercentage }}.",
                "Usage now 99%.",
            )
        )
    if profile.has(Signal.PREEMPTIONS):
        pre = profile.metric(Signal.PREEMPTIONS)
        total = profile.outcomes.total
        rules.append(
            AlertRule(
                "FleetwatchPreemptionStorm",
                f"sum by ({by}) (rate({pre.selector()}[{t.window}])) / sum by ({by}) "
                f"(rate({total.selector()}[{t.window}])) > {t.preemptions_per_request:g}",
                t.preemption_for,
                "ticket",
                f"{r} preempts more than {t.preemptions_per_request:g} times per request",
                "Preemptions per finished request above the threshold: the KV cache is "
                "oversubscribed and requests recompute their prefill.",
                keep,
                (
                    Example(_series(pre, example), "0+120x40", "0+6x40"),
                    Example(_series(total, example), "0+600x40", "0+600x40"),
                ),
                _keep(example, keep),
                'Now {{ $value | printf "%.2f" }} preemptions per request.',
                "Now 0.20 preemptions per request.",
            )
        )
    gpu = (Signal.GPU_SM_CLOCK, Signal.GPU_SM_CLOCK_MAX, Signal.GPU_CLOCK_EVENT)
    if all(profile.has(s) for s in gpu):
        clock, peak, event = (profile.metric(s) for s in gpu)
        dev_labels = (*replica, GPU_LABEL)
        dev = _by(dev_labels)
        dex = {**device, GPU_LABEL: "0"}
        rules.append(
            AlertRule(
                "FleetwatchGPUThrottling",
                f"(max by ({dev}) ({clock.selector()}) / max by ({dev}) ({peak.selector()}) "
                f"< {t.sm_clock_ratio:g}) and on ({dev}) max by ({dev}) "
                f"({event.selector(f'{CLOCK_EVENT_LABEL}!~{quote(BENIGN_CLOCK_REASONS)}')}) > 0",
                t.throttle_for,
                "ticket",
                f"GPU {_ref(GPU_LABEL)} of {r} throttled",
                f"SM clock below {t.sm_clock_ratio * 100:g}% of max with a throttle reason active "
                "(power cap, thermal or hardware slowdown): a replica-side slowdown.",
                dev_labels,
                (
                    Example(_series(clock, dex), "1.2e9x40", "1.98e9x40"),
                    Example(_series(peak, dex), "1.98e9x40", "1.98e9x40"),
                    Example(
                        _series(event, {**dex, CLOCK_EVENT_LABEL: "hw_slowdown"}), "1x40", "0x40"
                    ),
                ),
                _keep(dex, dev_labels),
                "SM clock now {{ $value | humanizePercentage }} of max.",
                "SM clock now 60.61% of max.",
            )
        )
    # `up` carries only target labels: join it to the replica's labels through the scrape
    # target (job, instance), so the alert names the replica whether its labels are target
    # labels (pod, under Kubernetes discovery) or the engine's own (copied from the counter).
    total = profile.outcomes.total
    up = "up{" + total.scope + "}" if total.scope else "up"
    target = ("job", "instance")
    carried = tuple(n for n in replica if n not in target)
    tb, full = _by(target), _by(tuple(dict.fromkeys((*target, *replica))))
    tgt = {"job": example.get("job", "fleet"), "instance": example.get("instance", "r0:8000")}
    up_labels = {**profile.scope_labels, **tgt}
    rules.append(
        AlertRule(
            "FleetwatchReplicaDown",
            f"({up} == 0) + on ({tb}) group_left ({_by(carried)}) "
            f"(0 * max by ({full}) (max_over_time({total.selector()}[{t.served_within}])))",
            t.down_for,
            "ticket",
            f"{r} is not being scraped",
            f"Prometheus cannot scrape this replica, which served requests within the last "
            f"{t.served_within}: it crashed, hangs, or its pod is gone without being scaled "
            "down. Every panel and SLO under-counts it.",
            (*up_labels, *carried),
            (
                Example(_series(MetricRef("up", "gauge"), up_labels), "1x2 0x38", "1x40"),
                Example(_series(total, {**example, **tgt}), "0+60x2 _x38", "0+60x40"),
            ),
            {**up_labels, **_keep(example, carried)},
            "Its scrape's up is {{ $value }}.",
            "Its scrape's up is 0.",
        )
    )
    if profile.has(Signal.WAITING):
        waiting = profile.metric(Signal.WAITING)
        w = waiting.selector()
        qw = t.queue_window
        rules.append(
            AlertRule(
                "FleetwatchQueueGrowing",
                f"max by ({by}) ({w}) >= {t.queue_waiting:g} and on ({by}) "
                f"min by ({by}) (min_over_time({w}[{qw}])) >= {t.queue_waiting:g} "
                f"and on ({by}) sum by ({by}) (deriv({w}[{qw}])) > 0",
                t.queue_for,
                "ticket",
                f"Waiting queue of {r} is growing",
                f"At least {t.queue_waiting:g} requests have waited for {qw} and the queue is "
                "still growing: the replica admits less than it is sent (KV cache full, long "
                "prompts, or too little capacity).",
                keep,
                (Example(_series(waiting, example), "10+1x40", "8x40"),),
                _keep(example, keep),
                'Now {{ $value | printf "%.0f" }} requests waiting.',
                "Now 25 requests waiting.",
            )
        )
    if profile.has(Signal.TELEMETRY_DROPS):
        drops = profile.metric(Signal.TELEMETRY_DROPS)
        rules.append(
            AlertRule(
                "FleetwatchTelemetryDrops",
                f"sum by ({_by(replica)}) (rate({drops.selector()}[{t.window}])) "
                f"> {t.telemetry_drops_per_s:g}",
                t.telemetry_for,
                "ticket",
                f"{r} is dropping telemetry",
                "Spans, records or samples are being dropped by bounded export queues: "
                "dashboards and SLOs under-count this replica.",
                replica,
                (Example(_series(drops, device), "0+60x40", "0x40"),),
                _keep(device, replica),
                'Now {{ $value | printf "%.3g" }} items dropped per second.',
                "Now 1 items dropped per second.",
            )
        )
    return rules


def _resilience_alerts(t: Thresholds) -> list[AlertRule]:
    state = RESILIENCE[Resilience.BREAKER_STATE]
    refused = RESILIENCE[Resilience.RETRY_BUDGET_REFUSALS]
    attempts = RESILIENCE[Resilience.RETRY_ATTEMPTS]
    b, s, budget = BREAKER_LABEL, BREAKER_STATE_LABEL, RETRY_BUDGET_LABEL
    open_states = state.selector(f'{s}=~"{"|".join(BREAKER_OPEN_STATES)}"')
    w = t.window
    # Refusals carry ``budget`` and attempts ``policy``, so no per-budget ratio exists: the
    # fleet-wide share gates the alert (a budget refusing the odd retry is doing its job) and
    # each budget refusing retries while it holds is named.
    share = f"sum (rate({refused.name}[{w}])) / sum (rate({attempts.name}[{w}]))"
    return [
        AlertRule(
            "FleetwatchBreakerOpen",
            f"max by ({b}) ({open_states}) == 1",
            t.breaker_open_for,
            "ticket",
            f"Circuit breaker {_ref(b)} is open",
            "Calls through this breaker fail fast without reaching the backend; the backend "
            "failed or was slow often enough to trip it, or an operator forced it open. "
            f"{state.name} comes from {RESILIENCE_SOURCE}.",
            (b,),
            # One-hot: firing moves from forced_open to open without a closed gap; healthy
            # probes half_open after closed, which must not fire.
            (
                Example(state.selector(f'{b}="r0",{s}="forced_open"'), "1x5 0x35", "0x40"),
                Example(state.selector(f'{b}="r0",{s}="open"'), "0x5 1x35", "0x40"),
                Example(state.selector(f'{b}="r0",{s}="half_open"'), "0x40", "0x5 1x35"),
                Example(state.selector(f'{b}="r0",{s}="closed"'), "0x40", "1x5 0x35"),
            ),
            {b: "r0"},
            "Its open-state gauge is {{ $value }}.",
            "Its open-state gauge is 1.",
            "resilience",
        ),
        AlertRule(
            "FleetwatchRetryBudgetExhausted",
            f"sum by ({budget}) (rate({refused.name}[{w}])) > 0 "
            f"and on () ({share} > {t.retry_refused_share:g})",
            t.retry_for,
            "ticket",
            f"Retry budget {_ref(budget)} exhausted",
            f"More than {t.retry_refused_share * 100:g}% of attempts had a retry refused, this "
            "budget among the refusers: failures are reaching callers instead of being retried. "
            f"{refused.name} and {attempts.name} come from {RESILIENCE_SOURCE}.",
            (budget,),
            (
                Example(refused.selector(f'{budget}="b0"'), "0+60x40", "0+3x40"),
                Example(refused.selector(f'{budget}="b1"'), "0x40", "0x40"),
                Example(attempts.selector('policy="p0"'), "0+600x40", "0+600x40"),
            ),
            {budget: "b0"},
            'This budget refuses {{ $value | printf "%.3g" }} retries per second.',
            "This budget refuses 1 retries per second.",
            "resilience",
        ),
    ]


def alert_rules(
    profile: Profile, thresholds: Thresholds = Thresholds(), *, resilience: bool | None = None
) -> tuple[AlertRule, ...]:
    """Every operational alert ``profile`` supports, engine alerts first; the resilience alerts
    when ``resilience`` (default: where the profile includes the library's series)."""
    with_resilience = has_resilience(profile) if resilience is None else resilience
    extra = _resilience_alerts(thresholds) if with_resilience else []
    return (*_engine_alerts(profile, thresholds), *extra)


def rules_document(
    profile: Profile,
    runbook_base: str | None = None,
    thresholds: Thresholds = Thresholds(),
    *,
    resilience: bool | None = None,
) -> RuleFile:
    """The Prometheus rules file as a value: the operational alerts, then the fleet lines the
    fleet view reads (``fleetwatch.dashboards.recordings``)."""
    rules = alert_rules(profile, thresholds, resilience=resilience)
    if not rules:
        raise DashboardError(f"profile '{profile.name}' supports no operational alerts")
    group = RuleGroup(
        f"fleetwatch-{profile.name}-operational",
        tuple(
            AlertingRule(
                a.name,
                a.expr,
                a.duration,
                {"severity": a.severity, "profile": profile.name},
                a.annotations(profile, runbook_base),
            )
            for a in rules
        ),
    )
    fleet = fleet_recordings(profile)
    return RuleFile((group,) if fleet is None else (group, fleet))


def _eval_after(duration: str) -> str:
    """Evaluation time by which an alert with ``for: duration`` must fire: ten minutes after the
    ``for`` duration (whole minutes) has elapsed."""
    try:
        seconds = parse_duration(duration)
    except ValueError as exc:
        raise DashboardError(f"alert duration: {exc}") from None
    return f"{seconds // 60 + 10}m"


def alert_tests(
    profile: Profile,
    rules_file: str,
    runbook_base: str | None = None,
    thresholds: Thresholds = Thresholds(),
    *,
    resilience: bool | None = None,
) -> RuleTestFile:
    """A promtool unit-test file for ``rules_file``: each alert fires on its example traffic
    and stays silent on healthy traffic."""
    tests = []
    for a in alert_rules(profile, thresholds, resilience=resilience):
        at = _eval_after(a.duration)
        expected = {"severity": a.severity, "profile": profile.name, **a.example_labels}
        annotations = a.annotations(profile, runbook_base)
        annotations["description"] = f"{a.description} {a.example_value}".strip()
        notes = {k: rendered(v, a.example_labels) for k, v in annotations.items()}
        firing = (ExpectedAlert(expected, notes),)
        for case, values, alerts in (
            ("firing", [(e.series, e.firing) for e in a.examples], firing),
            ("healthy", [(e.series, e.healthy) for e in a.examples], ()),
        ):
            tests.append(
                RuleTest(
                    "1m",
                    tuple(InputSeries(s, v) for s, v in values),
                    (AlertCase(at, a.name, alerts),),
                    name=f"{a.name} {case}",
                )
            )
    return RuleTestFile((rules_file,), "1m", tuple(tests))
