"""The rules model and its one renderer: what is written reads back as the value, tricky strings
survive, an empty rule file is refused, and promtool accepts what comes out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fleetwatch.core.rules import (
    AlertCase,
    AlertingRule,
    ExpectedAlert,
    ExpectedSample,
    ExprCase,
    InputSeries,
    RecordingRule,
    RuleFile,
    RuleGroup,
    RulesError,
    RuleTest,
    RuleTestFile,
    render_yaml,
    to_document,
)
from fleetwatch.core.rules.unittests import humanize_percentage, rendered
from tests.promtool_run import promtool_test

MULTI_LINE = 'sum(rate(errors_total{job="api"}[5m]))\n/\nsum(rate(requests_total{job="api"}[5m]))'
TRICKY = {
    "colon": "budget: 0.1% left",
    "braces": "{not a template} and {{ $labels.job }} is",
    "template": '{{ $value | printf "%.2f" }}x',
    "hash": "#1 on the list",
    "flow": "[a, b] & *c ! |d >e %f @g `h",
    "bool": "yes",
    "null": "null",
    "number": "0123",
    "float": "1e3",
    "empty": "",
    "quotes": 'it\'s "quoted"',
    "unicode": "p99 ≤ 250 ms — ünïcode",
    "spaces": "  leading and trailing  ",
    "lines": "first line\nsecond: with colon\n  indented {brace}\n",
    "tab": "a\tb",
}
# What promtool's templating leaves as it is.
STATIC = {k: v for k, v in TRICKY.items() if "{{" not in v}


def _rule_file() -> RuleFile:
    ratio = RecordingRule("job:error:ratio_rate5m", MULTI_LINE, {"job": "api", "window": "5m"})
    alert = AlertingRule(
        "ApiErrors",
        "job:error:ratio_rate5m > 0.01",
        "10m",
        {"severity": "page", "team": "a: b"},
        TRICKY,
    )
    return RuleFile(
        (
            RuleGroup("api", (ratio, alert), "30s"),
            RuleGroup("plain", (RecordingRule("job:up:sum", "sum by (job) (up)"),)),
        ),
        ("Generated for a test.", "second comment"),
    )


def _test_file() -> RuleTestFile:
    firing = (ExpectedAlert({"severity": "page", "job": "api"}, {"summary": "a: {b}"}),)
    checks = (AlertCase("5m", "ApiErrors", firing), AlertCase("1m", "ApiErrors"))
    series = (InputSeries('errors_total{job="api"}', "0+10x20"),)
    return RuleTestFile(
        ("api.rules.yaml",),
        "30s",
        (
            RuleTest("30s", series, checks, name="burning: pages"),
            RuleTest("30s", series, checks),
            RuleTest(
                "1m",
                (),
                promql_expr_test=(
                    ExprCase("vector(1)", "0m", (ExpectedSample("{}", 1),)),
                    ExprCase("vector(0.5)", "0m", (ExpectedSample("{}", 0.5),)),
                    ExprCase("absent(up)", "0m"),
                ),
            ),
        ),
        ("skipped: nothing",),
    )


def test_a_rule_file_reads_back_as_its_document() -> None:
    value = _rule_file()
    assert yaml.safe_load(render_yaml(value)) == to_document(value)
    group = to_document(value)["groups"][0]
    assert list(group) == ["name", "interval", "rules"]
    assert list(group["rules"][1]) == ["alert", "expr", "for", "labels", "annotations"]
    assert list(to_document(value)["groups"][1]) == ["name", "rules"]


def test_tricky_annotations_and_labels_come_back_exactly() -> None:
    alert = yaml.safe_load(render_yaml(_rule_file()))["groups"][0]["rules"][1]
    assert alert["annotations"] == TRICKY
    assert alert["labels"] == {"severity": "page", "team": "a: b"}
    assert all(isinstance(v, str) for v in alert["annotations"].values())


def test_a_multi_line_expression_is_a_literal_block() -> None:
    text = render_yaml(_rule_file())
    block = "    expr: |-\n" + "".join(f"      {line}\n" for line in MULTI_LINE.split("\n"))
    assert block in text
    assert "unicode: p99 ≤ 250 ms — ünïcode" in text


def test_a_long_expression_is_not_folded() -> None:
    expr = " or ".join(f'(up{{job="{i}"}} == 0)' for i in range(40))
    assert len(expr) > 500
    text = render_yaml(RuleFile((RuleGroup("g", (AlertingRule("Down", expr),)),)))
    assert f"    expr: {expr}\n" in text


def test_comments_head_the_file_one_hash_per_line() -> None:
    text = render_yaml(RuleFile(_rule_file().groups, ("one\ntwo", "", "three")))
    assert text.startswith("# one\n# two\n#\n# three\ngroups:\n")


@pytest.mark.parametrize(
    "empty",
    [RuleFile(()), RuleFile((RuleGroup("a", ()), RuleGroup("b", ()))), RuleFile((), ("only",))],
)
def test_an_empty_rule_file_is_refused(empty: RuleFile) -> None:
    with pytest.raises(RulesError, match="no rules to write"):
        render_yaml(empty)


def test_a_test_file_reads_back_and_leaves_out_empty_lists() -> None:
    value = _test_file()
    text = render_yaml(value)
    doc = yaml.safe_load(text)
    assert doc == to_document(value)
    assert text.startswith("# skipped: nothing\nrule_files:\n- api.rules.yaml\n")
    first, second, exprs = doc["tests"]
    assert list(first) == ["name", "interval", "input_series", "alert_rule_test"]
    assert "name" not in second and "promql_expr_test" not in second
    assert list(exprs) == ["interval", "input_series", "promql_expr_test"]
    assert exprs["input_series"] == []
    assert first["alert_rule_test"][1]["exp_alerts"] == []
    assert exprs["promql_expr_test"][2]["exp_samples"] == []


def test_an_integer_sample_value_is_written_as_one() -> None:
    text = render_yaml(_test_file())
    assert "  - labels: '{}'\n      value: 1\n" in text
    assert "value: 0.5\n" in text


def test_values_shared_between_tests_are_spelled_out_not_aliased() -> None:
    text = render_yaml(_test_file())
    assert "&id" not in text and "*id" not in text
    assert text.count("alertname: ApiErrors") == 4


def test_a_plain_mapping_is_written_in_the_same_style() -> None:
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"rules": MULTI_LINE}}
    text = render_yaml(manifest)
    assert text.startswith("apiVersion: v1\nkind: ConfigMap\n")
    assert "  rules: |-\n" in text
    assert yaml.safe_load(text) == manifest


def test_importing_the_model_does_not_import_yaml() -> None:
    """The serving image installs fleetwatch.core without PyYAML: only rendering needs it."""
    code = "import sys, fleetwatch.core.rules; print('yaml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.promtool
def test_promtool_checks_the_rules_and_passes_their_test(promtool: Path, tmp_path: Path) -> None:
    rules = RuleFile(
        (
            RuleGroup(
                "api",
                (
                    RecordingRule("job:errors:rate1m", MULTI_LINE.replace("5m", "1m")),
                    AlertingRule(
                        "ApiErrors",
                        "job:errors:rate1m > 0.1",
                        "1m",
                        {"severity": "page"},
                        {**STATIC, "summary": "{{ $labels.job }}: {{ $value }} errors"},
                    ),
                ),
                "30s",
            ),
        ),
        ("tricky strings",),
    )
    (tmp_path / "api.rules.yaml").write_text(render_yaml(rules))
    check = subprocess.run(
        [str(promtool), "check", "rules", "api.rules.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    series = (
        InputSeries('errors_total{job="api"}', "0+30x20"),
        InputSeries('requests_total{job="api"}', "0+60x20"),
    )
    fired = ExpectedAlert({"severity": "page"}, {**STATIC, "summary": ": 0.5 errors"})
    test = RuleTestFile(
        ("api.rules.yaml",),
        "30s",
        (
            RuleTest(
                "30s",
                series,
                (AlertCase("30s", "ApiErrors"), AlertCase("5m", "ApiErrors", (fired,))),
                (ExprCase("job:errors:rate1m", "5m", (ExpectedSample("job:errors:rate1m", 0.5),)),),
                name="half the requests fail",
            ),
        ),
    )
    done = promtool_test(promtool, tmp_path, render_yaml(test), "api.rules.test.yaml")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.promtool
@pytest.mark.parametrize("ratio", [0.25, 1.0, 0.00107194, 1 / 3, 1e-7, 0.0144])
def test_a_value_renders_as_promtool_renders_humanize_percentage(
    promtool: Path, tmp_path: Path, ratio: float
) -> None:
    """``rendered`` writes ``{{ $value | humanizePercentage }}`` exactly as promtool does, so a
    test file can state the description an alert fires with."""
    template = "Now {{ $value | humanizePercentage }} bad ({{ $labels.job }})."
    rule = AlertingRule("Bad", "ratio > 0", annotations={"description": template})
    (tmp_path / "r.rules.yaml").write_text(render_yaml(RuleFile((RuleGroup("g", (rule,)),))))
    labels = {"job": "api"}
    expected = ExpectedAlert(labels, {"description": rendered(template, labels, ratio)})
    case = AlertCase("1m", "Bad", (expected,))
    series = (InputSeries('ratio{job="api"}', f"{ratio!r}x2"),)
    test = RuleTestFile(("r.rules.yaml",), "1m", (RuleTest("1m", series, (case,)),))
    done = promtool_test(promtool, tmp_path, render_yaml(test))
    assert done.returncode == 0, done.stdout + done.stderr
    assert humanize_percentage(ratio) in expected.exp_annotations["description"]


def test_a_template_showing_the_value_needs_one() -> None:
    with pytest.raises(ValueError, match="pass the value"):
        rendered("{{ $value | humanizePercentage }}", {})
    assert humanize_percentage(0.0010719) == "0.1072%"
    assert humanize_percentage(1e-7) == "1e-05%"
