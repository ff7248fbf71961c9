"""Spec validation: good specs load; every bad input is one line naming its YAML path, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.load import load_spec
from fleetwatch.slo.spec import AvailabilitySLI, GoodputSLI, LatencySLI

EXAMPLES = Path(__file__).resolve().parents[2] / "slo" / "examples"

_PROFILE_CHECK = "profile"

BAD = [
    (
        "objective out of range",
        "service: s\nslos:\n- {name: a, objective: 99, sli: {kind: availability}}\n"
        "- {name: b, objective: 99, sli: {kind: availability}}\n"
        "- {name: c, objective: 100.5, sli: {kind: availability}}",
        "slos[2].objective: must be between 0 and 100 (exclusive), got 100.5",
    ),
    (
        "unknown SLI kind",
        "service: s\nslos:\n- {name: a, objective: 99, sli: {kind: throughput}}",
        "slos[0].sli.kind: unknown SLI kind 'throughput'",
    ),
    (
        "threshold not a bucket",
        "service: s\nslos:\n- {name: a, objective: 99, sli: {kind: latency, signal: ttft, threshold: 0.3}}",
        "slos[0].sli.threshold: threshold 0.3 s is not a bucket boundary",
    ),
    (
        "window longer than the period",
        "service: s\nslos:\n- {name: a, objective: 99, period: 1d, sli: {kind: availability},"
        " windows: [{severity: page, long: 1h, short: 5m, burn: 14.4}, {severity: ticket, long: 3d, short: 6h, burn: 1}]}",
        "slos[0].windows[1].long: window 3d is longer than the period",
    ),
    ("empty spec", "", "(root): spec is empty"),
    ("no SLOs", "service: s\nslos: []", "slos: spec has no SLOs"),
    (
        "duplicate names",
        "service: s\nslos:\n- {name: a, objective: 99, sli: {kind: availability}}\n"
        "- {name: a, objective: 99.9, sli: {kind: availability}}",
        "slos[1].name: duplicate SLO name 'a' (first at slos[0])",
    ),
    (
        "unknown field",
        "service: s\nslos:\n- {name: a, objectve: 99, sli: {kind: availability}}",
        "slos[0].objectve: unknown field",
    ),
    (
        "bad duration",
        "service: s\nslos:\n- {name: a, objective: 99, period: 30 days, sli: {kind: availability}}",
        "slos[0].period: must be a duration",
    ),
    (
        "unknown outcome",
        "service: s\nslos:\n- {name: a, objective: 99, sli: {kind: availability, bad: [error, timeout]}}",
        "slos[0].sli.bad[1]: unknown outcome 'timeout'",
    ),
    (
        "templated annotation",
        "service: s\nslos:\n- {name: a, objective: 99, sli: {kind: availability},"
        " alerting: {annotations: {summary: '{{ $value }}'}}}",
        "slos[0].alerting.annotations.summary: templates are not supported",
    ),
    (
        "window not a whole number of intervals",
        "service: s\nevaluation_interval: 1m\nslos:\n- {name: a, objective: 99, sli: {kind: availability},"
        " windows: [{severity: page, long: 1h, short: 90s, burn: 14.4}]}",
        "slos[0].windows[0].short: must be a whole number of evaluation intervals",
    ),
]


@pytest.mark.parametrize(("case", "text", "expected"), BAD, ids=[b[0] for b in BAD])
def test_bad_spec_is_one_line_naming_the_yaml_path_with_exit_2(
    case: str, text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    args = ["slo", "validate", str(spec)]
    if "bucket" in case:
        args += ["--profile", "vllm"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert expected in err, err


def test_examples_validate_and_parse_into_values() -> None:
    spec = load_spec((EXAMPLES / "chat.yaml").read_text())
    assert spec.service == "chat-api" and spec.labels == {"team": "inference"}
    kinds = [type(s.sli) for s in spec.slos]
    assert kinds == [AvailabilitySLI, LatencySLI, GoodputSLI, LatencySLI]
    avail = spec.slos[0]
    assert avail.sli == AvailabilitySLI(("error", "rejected"))
    assert avail.selector.traffic_class == "chat" and avail.min_events == 20
    assert avail.path == "slos[0]"
    for name in ("chat", "vllm", "sglang", "tgi"):
        profile = "fleetwatch" if name == "chat" else name
        goodput = ["--goodput", "0.5,0.05"] if name == "chat" else []
        args = ["slo", "validate", str(EXAMPLES / f"{name}.yaml"), "--profile", profile]
        assert main(args + goodput) == 0


def test_invalid_yaml_names_the_line() -> None:
    with pytest.raises(SLOSpecError, match="line 3"):
        load_spec("service: s\nslos: [\n  - {name: a")


OPENSLO = """
apiVersion: openslo/v1
kind: Service
metadata: {name: checkout}
spec: {description: the checkout API}
---
apiVersion: openslo/v1
kind: SLO
metadata: {name: checkout-availability}
spec:
  service: checkout
  budgetingMethod: Occurrences
  timeWindow: [{duration: 28d, isRolling: true}]
  objectives: [{displayName: good, target: 0.995}]
  indicator:
    metadata: {name: errors}
    spec:
      ratioMetric:
        counter: true
        bad:
          metricSource: {type: Prometheus, spec: {query: 'http_requests_total{code="500"}'}}
        total:
          metricSource: {type: Prometheus, spec: {query: 'http_requests_total'}}
"""


def test_openslo_ratio_slo_imports_and_generates_rules() -> None:
    from fleetwatch.core.profiles import get_profile
    from fleetwatch.slo.rules import generate_rules
    from fleetwatch.slo.spec import RatioSLI

    spec = load_spec(OPENSLO)
    slo = spec.slos[0]
    assert spec.service == "checkout" and slo.name == "checkout-availability"
    assert slo.objective == pytest.approx(99.5) and slo.period_s == 28 * 86400
    assert slo.sli == RatioSLI(total="http_requests_total", bad='http_requests_total{code="500"}')
    rules = generate_rules(spec, get_profile("vllm"))
    exprs = "\n".join(r.expr for g in rules.groups for r in g.rules)
    assert 'increase(http_requests_total{code="500"}[56m])' in exprs


def test_openslo_calendar_window_is_refused_with_its_path() -> None:
    with pytest.raises(SLOSpecError) as info:
        load_spec(OPENSLO.replace("isRolling: true", "isRolling: false"))
    assert info.value.path == "documents[1].spec.timeWindow[0].isRolling"
