"""One label scheme, honoured by every generator: each selector of a profile's metric carries the
scheme's matchers, and each aggregation of a rule keeps the routing label, in the SLO rules, the
outlier rules, the operational alerts, the capacity rules, the KEDA query and the dashboards
(which still validate against Grafana's schema and parse with promtool); the default scheme
leaves every generated file as it was."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.core.profiles import Profile, get_profile
from fleetwatch.core.profiles.labels import LabelScheme, parse_matcher_list
from fleetwatch.dashboards.alerts import rules_document
from fleetwatch.dashboards.build import dashboard_expressions, render_all
from fleetwatch.dashboards.promql import TEMPLATE_VALUES, concrete
from fleetwatch.dashboards.views import views_for
from fleetwatch.fleet.capacity.manifests import capacity_rules
from fleetwatch.fleet.outliers.rules.generate import outlier_rules
from fleetwatch.slo.load import read_spec
from fleetwatch.slo.rules import generate_rules
from tests.dashboards.test_grafana_schema import schema_errors

ROOT = Path(__file__).resolve().parents[2]
MATCHERS = ('job="vllm"', 'namespace=~"llm-.*"')
SCHEME = LabelScheme(
    replica=("namespace", "pod"), routing=("namespace",), matchers=parse_matcher_list(MATCHERS)
)
SPECS = {"vllm": "vllm.yaml", "sglang": "sglang.yaml", "fleetwatch": "chat.yaml"}
_GROUPING = re.compile(r"\bby\s*\(([^()]*)\)")


def _selectors(expr: str, profile: Profile) -> list[str]:
    """The matcher text of each selector of one of the profile's series in ``expr`` ("" for a
    bare name)."""
    out = []
    for name in profile.metric_names():
        for m in re.finditer(re.escape(name) + r"(?![\w:])(\{[^{}]*\})?", expr):
            out.append(m.group(1) or "")
    return out


def _rule_exprs(profile: Profile) -> dict[str, list[str]]:
    spec = read_spec(ROOT / "slo" / "examples" / SPECS[profile.name])
    slo = [r.expr for g in generate_rules(spec, profile).groups for r in g.rules]
    fleet = [r.expr for g in outlier_rules(profile).groups for r in g.rules]
    ops = [r.expr for g in rules_document(profile, resilience=False).groups for r in g.rules]
    from fleetwatch.fleet.capacity.plan import curve_from_probe, plan_capacity
    from tests.fleet.test_capacity import INPUTS, probe_doc

    plan = plan_capacity(curve_from_probe(probe_doc()), INPUTS)
    cap = [r.expr for g in capacity_rules(profile, plan).groups for r in g.rules]
    return {"slo": slo, "fleet": fleet, "ops": ops, "capacity": cap}


@pytest.mark.parametrize("name", ["vllm", "sglang", "fleetwatch"])
def test_every_rule_selects_by_the_matchers_and_keeps_the_routing_label(name):
    profile = SCHEME.apply(get_profile(name))
    seen, bare, dropped = 0, [], []
    for kind, exprs in _rule_exprs(profile).items():
        for expr in exprs:
            for matchers in _selectors(expr, profile):
                seen += 1
                if not all(m in matchers for m in MATCHERS):
                    bare.append(f"{kind}: {expr}")
            dropped += [f"{kind}: {expr}" for g in _GROUPING.findall(expr) if "namespace" not in g]
    assert seen > 40
    assert bare == []
    assert dropped == []


@pytest.mark.parametrize("name", ["vllm", "sglang", "fleetwatch"])
def test_every_dashboard_query_selects_by_the_matchers(name):
    profile = SCHEME.apply(get_profile(name))
    bare = [
        expr
        for view in views_for(profile)
        for expr in dashboard_expressions(profile, view)
        for matchers in _selectors(expr, profile)
        if not all(m in matchers for m in MATCHERS)
    ]
    assert bare == []


def test_dashboards_under_the_scheme_are_valid_grafana_json_and_promql(check_exprs):
    rendered = {n: json.loads(t) for n, t in render_all(scheme=SCHEME).items()}
    assert {n: e for n, doc in rendered.items() if (e := schema_errors(doc))} == {}
    exprs = [
        concrete(expr, {**TEMPLATE_VALUES, "namespace": "llm-prod"})
        for name in ("vllm", "sglang", "fleetwatch")
        for view in views_for(get_profile(name))
        for expr in dashboard_expressions(SCHEME.apply(get_profile(name)), view)
    ]
    result = check_exprs("scheme", exprs)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_keda_query_carries_the_matchers_and_the_deployments_namespace(tmp_path):
    labels = tmp_path / "labels.yaml"
    labels.write_text(
        "replica: [namespace, pod]\nrouting: [namespace]\n"
        "matchers: ['job=\"vllm\"', 'namespace=~\"llm-.*\"']\n"
    )
    from tests.fleet.test_capacity import probe_doc

    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps(probe_doc()))
    out = tmp_path / "k8s"
    argv = ["fleet", "capacity", str(probe), "--labels", str(labels), "--namespace", "llm-a"]
    assert main([*argv, "--model", "llama", "-o", str(out)]) == 0
    keda = (out / "keda.yaml").read_text()
    assert (
        'sum(vllm:num_requests_waiting{job="vllm",namespace=~"llm-.*",model_name="llama",'
        'namespace="llm-a"})'
    ) in keda


GENERATORS = [
    ["fleet", "rules", "--profile", "vllm", "-o", "{out}/fleet.yaml"],
    ["dashboards", "alerts", "--profile", "vllm", "-o", "{out}/ops.yaml"],
    [
        "slo",
        "rules",
        str(ROOT / "slo/examples/vllm.yaml"),
        "--profile",
        "vllm",
        "-o",
        "{out}/s.yaml",
    ],
    ["dashboards", "build", "--out", "{out}/dash"],
]


@pytest.mark.parametrize("argv", GENERATORS, ids=lambda a: " ".join(a[:2]))
def test_an_empty_labels_file_is_the_default_scheme_byte_for_byte(tmp_path, argv):
    labels = tmp_path / "labels.yaml"
    labels.write_text("# the profile's own names\n")
    outs = []
    for extra in ([], ["--labels", str(labels)]):
        out = tmp_path / f"out{len(outs)}"
        out.mkdir()
        assert main([a.replace("{out}", str(out)) for a in argv] + extra) == 0
        outs.append({p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()})
    assert outs[0] == outs[1] and outs[0]


BAD_LABELS = {
    "bad regex": "replica: [pod]\nmatchers: ['job=~\"[\"']\n",
    "links.grafana": "links:\n  grafana: grafana.example.com\n",
}


@pytest.mark.parametrize("problem", sorted(BAD_LABELS))
@pytest.mark.parametrize("argv", GENERATORS, ids=lambda a: " ".join(a[:2]))
def test_a_bad_labels_file_stops_every_generator_before_it_writes(tmp_path, argv, problem, capsys):
    labels = tmp_path / "labels.yaml"
    labels.write_text(BAD_LABELS[problem])
    out = tmp_path / "out"
    out.mkdir()
    assert main([a.replace("{out}", str(out)) for a in argv] + ["--labels", str(labels)]) == 2
    err = capsys.readouterr().err.strip()
    assert "labels.yaml" in err and problem in err and "\n" not in err
    assert list(out.rglob("*")) == []


@pytest.mark.parametrize("name", ["vllm", "fleetwatch"])
def test_each_routing_label_is_a_dashboard_variable_every_engine_selector_reads(name):
    rendered = render_all((name,), scheme=SCHEME)
    profile = SCHEME.apply(get_profile(name))
    for file, text in rendered.items():
        doc = json.loads(text)
        variables = {v["name"] for v in doc["templating"]["list"]}
        if "resilience" in file:
            continue
        assert {"datasource", "model", "replica", "namespace"} <= variables, file
        view = file.removeprefix(f"{name}-").removesuffix(".json")
        for expr in dashboard_expressions(profile, view):
            for matchers in _selectors(expr, profile):
                assert 'namespace=~"$namespace"' in matchers, (file, expr)
