"""Outlier rules under a fleet's own label scheme, judged by promtool: replicas named by
``namespace,pod``, alerts routed by ``namespace``, and only ``job="vllm"`` series in
``namespace="llm-prod"`` read.

The fleet serves two models, five replicas of ``small`` and three of ``big``, whose every
latency is about three times ``small``'s and healthy: pooled, every ``big`` replica would stand
out from a median the five ``small`` ones set; compared within its model, none does. A slow
replica planted in either model alerts, on every latency signal. Series outside the scheme's
matchers (a ``job="batch"`` pod of ``small`` in ``llm-prod``, and a fleet of ``small`` in
``llm-dev``, each with a slow replica) would alert if any selector lacked the matchers; they
must not.
"""

from __future__ import annotations

import pytest

from fleetwatch.core.profiles import Profile, Signal, get_profile
from fleetwatch.core.profiles.labels import (
    LabelScheme,
    LabelSchemeError,
    load_scheme,
    parse_matcher_list,
    with_labels,
)
from fleetwatch.core.rules import ExpectedSample, ExprCase, InputSeries, RuleTest, RuleTestFile
from fleetwatch.fleet.outliers.rules.generate import (
    ALERT_NAME,
    RuleOptions,
    outlier_rules,
    render_yaml,
)
from fleetwatch.fleet.outliers.rules.parts import latency_refs, ok_label, series_name
from fleetwatch.fleet.outliers.sources.exposition import ref_labels
from tests.promtool_run import promtool_test

SCHEME = LabelScheme(
    replica=("namespace", "pod"),
    routing=("namespace",),
    matchers=parse_matcher_list(['job="vllm"', 'namespace="llm-prod"']),
)
STEP_S = 60
STEPS = 40
PER_STEP = 600  # requests a replica finishes per step: 10 a second


def _mid(bounds: list[float], i: int) -> float:
    return (bounds[i - 1] + bounds[i]) / 2


def _bucket_of(ref) -> tuple[list[float], int, int]:
    """Bounds, the bucket holding ``small``'s requests and the one holding ``big``'s (its
    midpoint at least three times ``small``'s)."""
    bounds = [b for b in ref.buckets if b > 0]
    i = len(bounds) // 2 - 2
    j = next(k for k in range(i + 1, len(bounds)) if _mid(bounds, k) >= 3 * _mid(bounds, i))
    return bounds, i, j


def _replica(profile: Profile, labels: dict[str, str], model: str, slow: bool) -> list[InputSeries]:
    out = []
    for _name, ref in latency_refs(profile):
        bounds, i, j = _bucket_of(ref)
        at = (j if model == "big" else i) + (1 if slow else 0)
        for k in range(max(1, i - 1), min(len(bounds), j + 3)):
            n = PER_STEP if k >= at else 0
            le = f"{bounds[k]:g}"
            out.append(
                InputSeries(
                    series_name(ref.name + "_bucket", {**labels, "le": le}), f"0+{n}x{STEPS}"
                )
            )
        out.append(
            InputSeries(
                series_name(ref.name + "_bucket", {**labels, "le": "+Inf"}),
                f"0+{PER_STEP}x{STEPS}",
            )
        )
    total, bad = profile.outcomes.total, profile.outcomes.bad["error"]
    out.append(
        InputSeries(series_name(total.name, {**labels, **ok_label(bad)}), f"0+{PER_STEP}x{STEPS}")
    )
    tokens = profile.metric(Signal.PROMPT_TOKENS)
    out.append(
        InputSeries(
            series_name(tokens.name, {**labels, **ref_labels(tokens)}),
            f"0+{PER_STEP * 40}x{STEPS}",
        )
    )
    return out


def _fleet(profile: Profile, planted: bool) -> tuple[InputSeries, ...]:
    m = profile.model_label
    series: list[InputSeries] = []
    members = [("small", f"small-{i}") for i in range(5)] + [("big", f"big-{i}") for i in range(3)]
    for model, pod in members:
        slow = planted and pod in ("small-2", "big-1")
        labels = {m: model, "namespace": "llm-prod", "pod": pod, "job": "vllm"}
        series += _replica(profile, labels, model, slow)
    # Outside the matchers: each would alert if its series were read.
    batch = {m: "small", "namespace": "llm-prod", "pod": "batch-0", "job": "batch"}
    series += _replica(profile, batch, "small", slow=True)
    for i in range(4):
        dev = {m: "small", "namespace": "llm-dev", "pod": f"dev-{i}", "job": "vllm"}
        series += _replica(profile, dev, "small", slow=i == 0)
    return tuple(series)


def _firing(profile: Profile, planted: bool) -> ExprCase:
    m = profile.model_label
    expr = (
        f"count by ({m}, namespace, pod, signal) "
        f'(ALERTS{{alertname="{ALERT_NAME}",alertstate="firing"}})'
    )
    expected = []
    if planted:
        for model, pod in (("small", "small-2"), ("big", "big-1")):
            for name, _ref in latency_refs(profile):
                labels = {m: model, "namespace": "llm-prod", "pod": pod, "signal": name}
                expected.append(ExpectedSample(series_name("", labels), 1))
    return ExprCase(expr, f"{(STEPS - 8) * STEP_S}s", tuple(expected))


@pytest.mark.promtool
def test_two_model_fleet_under_a_label_scheme(tmp_path, promtool):
    profile = SCHEME.apply(get_profile("vllm"))
    (tmp_path / "rules.yaml").write_text(render_yaml(outlier_rules(profile, RuleOptions())))
    test = RuleTestFile(
        ("rules.yaml",),
        f"{STEP_S}s",
        tuple(
            RuleTest(
                f"{STEP_S}s",
                _fleet(profile, planted),
                promql_expr_test=(_firing(profile, planted),),
                name="planted" if planted else "healthy",
            )
            for planted in (False, True)
        ),
    )
    run = promtool_test(promtool, tmp_path, render_yaml(test))
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_selector_carries_the_matchers_and_every_aggregation_the_labels():
    profile = SCHEME.apply(get_profile("vllm"))
    names = profile.metric_names()
    rules = outlier_rules(profile, RuleOptions()).groups[0].rules
    seen = 0
    for rule in rules:
        for name in names:
            for at in _find(rule.expr, name):
                seen += 1
                tail = rule.expr[at + len(name) :]
                assert tail.startswith("{") and 'job="vllm"' in tail.split("}")[0], rule.expr
                assert 'namespace="llm-prod"' in tail.split("}")[0], rule.expr
        for grouping in _groupings(rule.expr):
            assert "namespace" in grouping, (grouping, rule.expr)
    assert seen >= 8


def _find(expr: str, name: str) -> list[int]:
    out, start = [], 0
    while (at := expr.find(name, start)) >= 0:
        end = at + len(name)
        if not (end < len(expr) and (expr[end].isalnum() or expr[end] in "_:")):
            out.append(at)
        start = end
    return out


def _groupings(expr: str) -> list[str]:
    import re

    return re.findall(r"\b(?:by|on)\s*\(([^()]*)\)", expr)


def test_the_default_scheme_changes_no_profile():
    for name in ("fleetwatch", "vllm", "sglang", "tgi"):
        assert LabelScheme().apply(get_profile(name)) is get_profile(name)
        assert with_labels(get_profile(name), None) is get_profile(name)


def test_a_labels_file_is_read(tmp_path):
    path = tmp_path / "labels.yaml"
    path.write_text(
        "replica: namespace,pod\nmodel: served_model\nrouting: [namespace, team]\n"
        'matchers:\n  - job="vllm"\n  - namespace=~"llm-.*"\n  - env!="dev"\n'
    )
    profile = with_labels(get_profile("vllm"), path)
    assert profile.replica_set == ("served_model", "namespace", "team", "pod")
    assert profile.fleet_labels == ("served_model", "namespace", "team")
    assert profile.metric(Signal.TTFT).selector("", "_count") == (
        'vllm:time_to_first_token_seconds_count{job="vllm",namespace=~"llm-.*",env!="dev"}'
    )
    labels = profile.series_labels("m", "r0")
    assert labels["pod"] == "r0" and labels["job"] == "vllm" and "env" not in labels
    assert labels["namespace"].startswith("llm-")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("replica: [pod]\nfoo: 1\n", "unknown key 'foo'"),
        ("replica: 'a,,b'\n", "replica: '' is not a label name"),
        ("replica: [le]\n", "'le' is a label fleetwatch's rules set themselves"),
        ("model: pod\nreplica: [pod]\n", "also a replica label"),
        ("matchers: ['job~\"x\"']\n", "is not a label matcher"),
        ("matchers: ['job=~\"(\"']\n", "bad regex"),
        ("matchers: ['__name__=\"x\"']\n", "reserved label name"),
        ("matchers: ['a=\"x\"', 'a!=\"x\"']\n", "no value of a without quotes"),
        ("replica: [pod]\nmatchers: ['pod=\"x\"']\n", "fixed by a matcher"),
        ("[1, 2]\n", "expected a mapping"),
        ("replica: [\n", "not YAML"),
    ],
)
def test_a_bad_labels_file_is_one_line_naming_it(tmp_path, text, message):
    path = tmp_path / "labels.yaml"
    path.write_text(text)
    with pytest.raises(LabelSchemeError, match=r"labels\.yaml") as info:
        with_labels(get_profile("vllm"), path)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_bad_labels_file_exits_2_and_writes_nothing(tmp_path, capsys):
    from fleetwatch.cli import main

    path = tmp_path / "labels.yaml"
    path.write_text("matchers: ['job=~\"(\"']\n")
    out = tmp_path / "rules.yaml"
    assert main(["fleet", "rules", "--profile", "vllm", "--labels", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fleetwatch: error:") and "bad regex" in err and "\n" not in err
    assert not out.exists()
    assert load_scheme(None) == LabelScheme()
