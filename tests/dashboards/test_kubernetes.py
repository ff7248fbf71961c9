"""Every generated ``PrometheusRule`` and ``PodMonitor`` is an object the Kubernetes API server
accepts once prometheus-operator's CRDs are installed: each validates against the CRD's own
``openAPIV3Schema`` (vendored in dashboards/schema/kubernetes/, see its README), read the way the
API server reads a structural schema, and each ``PrometheusRule`` carries exactly the groups of
the plain rule file it wraps. Rules come from every generator (SLO, outlier, operational and
capacity rules) on the vllm and fleetwatch profiles, under the default label scheme and under a
scheme naming replicas by ``(namespace, pod)``."""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from jsonschema.exceptions import ValidationError, best_match

from fleetwatch.core.kubernetes import dns_name
from fleetwatch.core.profiles import Profile, get_profile
from fleetwatch.core.profiles.labels import LabelScheme, parse_matcher_list
from fleetwatch.core.rules import RuleFile, prometheus_rule, render_yaml
from fleetwatch.fleet.podmonitor import ENGINES, pod_monitor

ROOT = Path(__file__).resolve().parents[2]
CRD_DIR = ROOT / "dashboards" / "schema" / "kubernetes"
CRDS = {
    "PrometheusRule": "monitoring.coreos.com_prometheusrules.yaml",
    "PodMonitor": "monitoring.coreos.com_podmonitors.yaml",
}
SCHEME = LabelScheme(
    replica=("namespace", "pod"),
    routing=("namespace",),
    matchers=parse_matcher_list(('job="vllm"', 'namespace=~"llm-.*"')),
)
PROFILES = ("vllm", "fleetwatch")
# chat.yaml selects by traffic class, which only the fleetwatch profile has.
SLO_SPECS = {"vllm": ("vllm.yaml",), "fleetwatch": ("vllm.yaml", "chat.yaml")}

# Kubernetes' own expressions for ObjectMeta (k8s.io/apimachinery/pkg/util/validation), written
# out here rather than taken from the code under test.
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
DNS1123_LABEL = re.compile(_DNS1123_LABEL)
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")


# -- the CRDs, read as the API server reads them -----------------------------------------------


@cache
def crd(kind: str) -> dict[str, Any]:
    doc = yaml.safe_load((CRD_DIR / CRDS[kind]).read_text())
    assert doc["kind"] == "CustomResourceDefinition" and doc["spec"]["names"]["kind"] == kind
    return doc


def _v1(kind: str) -> dict[str, Any]:
    [version] = [v for v in crd(kind)["spec"]["versions"] if v["name"] == "v1"]
    assert version["served"] and version["storage"]
    return version


def _walk(schema: Any) -> Iterator[dict[str, Any]]:
    if isinstance(schema, dict):
        yield schema
        for value in schema.values():
            yield from _walk(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _walk(item)


def structural(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with what the API server enforces beyond JSON Schema made explicit: an object
    that declares ``properties`` allows no other field (the server prunes unknown fields and
    ``kubectl apply`` refuses them); a pattern Python reads differently from Go is rewritten."""
    out = dict(schema)
    if "properties" in schema:
        out["properties"] = {k: structural(v) for k, v in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            out["additionalProperties"] = False
    for key in ("items", "additionalProperties", "not"):
        if isinstance(schema.get(key), dict):
            out[key] = structural(schema[key])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in schema:
            out[key] = [structural(s) for s in schema[key]]
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and pattern.startswith("^(?i)"):
        out["pattern"] = "(?i)^" + pattern.removeprefix("^(?i)")  # RE2 takes flags anywhere
    return out


def _list_type(validator: Any, kind: str, instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
    """``x-kubernetes-list-type``: a ``map`` list's entries unique by their keys, a ``set``'s
    whole; ``atomic`` only says how the list merges."""
    if not isinstance(instance, list) or kind == "atomic":
        return
    keys = schema.get("x-kubernetes-list-map-keys", [])
    seen: set[str] = set()
    for item in instance:
        if kind == "map" and isinstance(item, dict):
            key = repr(tuple(item.get(k) for k in keys))
        else:
            key = repr(item)
        if key in seen:
            what = f"keys {keys}" if kind == "map" else "value"
            yield ValidationError(f"duplicate {what} {key} in a list of type {kind}")
        seen.add(key)


_FORMATS = jsonschema.FormatChecker()


@_FORMATS.checks("int32")
def _int32(value: object) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


@_FORMATS.checks("int64")
def _int64(value: object) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


Validator = jsonschema.validators.extend(
    jsonschema.Draft7Validator, {"x-kubernetes-list-type": _list_type}
)


@cache
def validator(kind: str) -> Any:
    schema = structural(_v1(kind)["schema"]["openAPIV3Schema"])
    jsonschema.Draft7Validator.check_schema(schema)
    return Validator(schema, format_checker=_FORMATS)


def _metadata_errors(metadata: Any) -> list[str]:
    if not isinstance(metadata, dict):
        return [".metadata: not an object"]
    errors = []
    name = metadata.get("name")
    if not (isinstance(name, str) and len(name) <= 253 and DNS1123_SUBDOMAIN.fullmatch(name)):
        errors.append(f".metadata.name: {name!r} is not a DNS-1123 subdomain")
    namespace = metadata.get("namespace")
    if namespace is not None and not (
        isinstance(namespace, str) and len(namespace) <= 63 and DNS1123_LABEL.fullmatch(namespace)
    ):
        errors.append(f".metadata.namespace: {namespace!r} is not a DNS-1123 label")
    for key, value in (metadata.get("labels") or {}).items():
        prefix, _, label = key.rpartition("/")
        bad_prefix = bool(prefix) and not DNS1123_SUBDOMAIN.fullmatch(prefix)
        if bad_prefix or not (len(label) <= 63 and QUALIFIED_NAME.fullmatch(label)):
            errors.append(f".metadata.labels: {key!r} is not a label key")
        if value and not (len(value) <= 63 and QUALIFIED_NAME.fullmatch(value)):
            errors.append(f".metadata.labels.{key}: {value!r} is not a label value")
    unknown = set(metadata) - {"name", "namespace", "labels", "annotations"}
    errors += [f".metadata.{k}: not written by a generator" for k in sorted(unknown)]
    return errors


def schema_errors(document: dict[str, Any]) -> list[str]:
    """Every way ``document`` departs from its CRD, one line each ([] when valid)."""
    kind = document.get("kind")
    if kind not in CRDS:
        return [f".kind: {kind!r} is not a vendored CRD"]
    errors = []
    expected = f"{crd(kind)['spec']['group']}/v1"
    if document.get("apiVersion") != expected:
        errors.append(f".apiVersion: {document.get('apiVersion')!r}, the CRD serves {expected!r}")
    for err in validator(kind).iter_errors(document):
        err = best_match([err]) if err.context else err
        errors.append(f"{err.json_path.removeprefix('$')}: {err.message[:200]}")
    return errors + _metadata_errors(document.get("metadata"))


# -- what the toolkit generates ----------------------------------------------------------------


def _profile(name: str, scheme: str) -> Profile:
    profile = get_profile(name)
    return SCHEME.apply(profile) if scheme == "scheme" else profile


def _capacity_plan() -> Any:
    from fleetwatch.fleet.capacity.plan import curve_from_probe, plan_capacity
    from tests.fleet.test_capacity import INPUTS, probe_doc

    return plan_capacity(curve_from_probe(probe_doc()), INPUTS)


def _slo(spec: str) -> Callable[[Profile], RuleFile]:
    def make(profile: Profile) -> RuleFile:
        from fleetwatch.slo.load import read_spec
        from fleetwatch.slo.rules import generate_rules, rule_file

        return rule_file(generate_rules(read_spec(ROOT / "slo" / "examples" / spec), profile))

    return make


def _outliers(profile: Profile) -> RuleFile:
    from fleetwatch.fleet.outliers.rules.generate import outlier_rules

    return outlier_rules(profile)


def _ops(resilience: bool) -> Callable[[Profile], RuleFile]:
    def make(profile: Profile) -> RuleFile:
        from fleetwatch.dashboards.alerts import rules_document

        return rules_document(profile, resilience=resilience)

    return make


def _capacity(profile: Profile) -> RuleFile:
    from fleetwatch.fleet.capacity.manifests import capacity_rules

    return capacity_rules(profile, _capacity_plan())


def _generators(profile: str) -> dict[str, Callable[[Profile], RuleFile]]:
    slo = {f"slo-{Path(spec).stem}": _slo(spec) for spec in SLO_SPECS[profile]}
    return slo | {
        "outliers": _outliers,
        "ops": _ops(False),
        "ops-resilience": _ops(True),
        "capacity": _capacity,
    }


CASES = [
    (profile, scheme, generator)
    for profile in PROFILES
    for scheme in ("default", "scheme")
    for generator in _generators(profile)
]


@pytest.mark.parametrize(("profile", "scheme", "generator"), CASES)
def test_every_generated_rule_file_is_a_valid_prometheus_rule_with_its_groups(
    profile: str, scheme: str, generator: str
) -> None:
    rules = _generators(profile)[generator](_profile(profile, scheme))
    assert rules.rule_count > 0
    name = dns_name(f"fleetwatch-{generator}-{profile}")
    manifest = prometheus_rule(
        rules, name, namespace="monitoring", labels={"release": "prometheus"}
    )
    text = render_yaml(manifest)
    document = yaml.safe_load(text)
    assert schema_errors(document) == []
    assert document["metadata"] == {
        "name": name,
        "namespace": "monitoring",
        "labels": {"release": "prometheus"},
    }
    assert document["spec"]["groups"] == yaml.safe_load(render_yaml(rules))["groups"]
    # every group and rule keeps its fields: nothing the generators emit is pruned or renamed
    assert [len(g["rules"]) for g in document["spec"]["groups"]] == [
        len(g.rules) for g in rules.groups
    ]


def test_the_cases_cover_every_generator_on_both_schemes() -> None:
    assert len(CASES) == 2 * (5 + 6)
    # the matchers of the label scheme reach the manifests
    rules = _outliers(_profile("vllm", "scheme"))
    text = render_yaml(prometheus_rule(rules, "outliers"))
    assert 'job="vllm"' in text and 'namespace=~"llm-.*"' in text


def _pod_monitors() -> Iterator[tuple[str, dict[str, Any]]]:
    for engine in sorted(ENGINES):
        pods = {"app.kubernetes.io/name": engine}
        yield (
            f"{engine}-plain",
            pod_monitor(engine, engine, namespace="llm-a", match_labels=pods, port="http"),
        )
        yield (
            f"{engine}-everything",
            pod_monitor(
                engine,
                f"{engine}.fleet",
                namespace="llm-a",
                match_labels=pods,
                port="metrics",
                interval="30s",
                namespaces=("llm-a", "llm-b"),
                job="vllm",
                labels={"release": "prometheus"},
            ),
        )
        yield (
            f"{engine}-any-namespace",
            pod_monitor(
                engine,
                engine,
                namespace="llm-a",
                match_labels=pods,
                port="http",
                any_namespace=True,
            ),
        )


@pytest.mark.parametrize(("case", "manifest"), list(_pod_monitors()))
def test_every_pod_monitor_is_valid(case: str, manifest: dict[str, Any]) -> None:
    document = yaml.safe_load(render_yaml(manifest))
    assert schema_errors(document) == []
    assert document["spec"]["podMetricsEndpoints"][0]["path"] == "/metrics"


# -- the validation itself catches what the API server refuses ---------------------------------


@pytest.fixture(scope="module")
def rule_sample() -> dict[str, Any]:
    rules = _ops(False)(_profile("vllm", "default"))
    return prometheus_rule(rules, "ops", namespace="monitoring", labels={"release": "p"})


def _first_alert(manifest: dict[str, Any]) -> tuple[int, int]:
    for i, group in enumerate(manifest["spec"]["groups"]):
        for j, rule in enumerate(group["rules"]):
            if "alert" in rule and "for" in rule:
                return i, j
    raise AssertionError("no alert with a for duration")


def _broken_rule(sample: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> list[str]:
    doc = copy.deepcopy(sample)
    change(doc)
    return schema_errors(doc)


@pytest.mark.parametrize(
    ("what", "change", "expected"),
    [
        ("a renamed field", lambda r: r.update({"for_": r.pop("for")}), r"'for_' was unexpected"),
        (
            "a prose duration",
            lambda r: r.update({"for": "5 minutes"}),
            r"\.for: '5 minutes' does not match",
        ),
        ("no expression", lambda r: r.pop("expr"), r"'expr' is a required property"),
        (
            "a number label",
            lambda r: r["labels"].update({"x": 1}),
            r"labels\.x: 1 is not of type 'string'",
        ),
        (
            "a list expression",
            lambda r: r.update({"expr": ["up"]}),
            r"\.expr: \['up'\] is not valid",
        ),
    ],
)
def test_a_broken_rule_is_named(
    rule_sample: dict[str, Any],
    what: str,
    change: Callable[[dict[str, Any]], None],
    expected: str,
) -> None:
    i, j = _first_alert(rule_sample)
    errors = _broken_rule(rule_sample, lambda d: change(d["spec"]["groups"][i]["rules"][j]))
    assert errors and all(e.startswith(f".spec.groups[{i}].rules[{j}]") for e in errors), errors
    assert any(re.search(expected, e) for e in errors), errors


def test_broken_groups_and_objects_are_named(rule_sample: dict[str, Any]) -> None:
    def twice(d: dict[str, Any]) -> None:
        d["spec"]["groups"].append(copy.deepcopy(d["spec"]["groups"][0]))

    assert any("duplicate keys ['name']" in e for e in _broken_rule(rule_sample, twice))
    errors = _broken_rule(rule_sample, lambda d: d["spec"]["groups"][0].pop("name"))
    assert errors == [".spec.groups[0]: 'name' is a required property"]
    errors = _broken_rule(rule_sample, lambda d: d["spec"]["groups"][0].update(interval="30 s"))
    assert len(errors) == 1 and errors[0].startswith(".spec.groups[0].interval: '30 s'")
    errors = _broken_rule(rule_sample, lambda d: d["spec"].update(group=d["spec"].pop("groups")))
    assert errors == [".spec: Additional properties are not allowed ('group' was unexpected)"]
    errors = _broken_rule(rule_sample, lambda d: d.update(apiVersion="monitoring.coreos.com/v2"))
    assert errors == [
        ".apiVersion: 'monitoring.coreos.com/v2', the CRD serves 'monitoring.coreos.com/v1'"
    ]
    errors = _broken_rule(rule_sample, lambda d: d["metadata"].update(name="Ops_Rules"))
    assert errors == [".metadata.name: 'Ops_Rules' is not a DNS-1123 subdomain"]
    errors = _broken_rule(rule_sample, lambda d: d["metadata"]["labels"].update({"a b": "c"}))
    assert errors == [".metadata.labels: 'a b' is not a label key"]
    assert _broken_rule(rule_sample, lambda d: d.pop("spec")) == [": 'spec' is a required property"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda e: e.update(port=8000), r"\.port: 8000 is not of type 'string'"),
        (lambda e: e.update(portNumber=70000), r"\.portNumber: 70000 is greater than the maximum"),
        (lambda e: e.update(interval="15 s"), r"\.interval: '15 s' does not match"),
        (lambda e: e.update(scheme="ftp"), r"\.scheme: 'ftp' is not one of"),
        (
            lambda e: e.update(relabelings=[{"action": "rename", "targetLabel": "x"}]),
            r"\.relabelings\[0\]\.action: 'rename' is not one of",
        ),
        (lambda e: e.update(metricsPath="/metrics"), r"'metricsPath' was unexpected"),
    ],
)
def test_a_broken_pod_monitor_endpoint_is_named(
    change: Callable[[dict[str, Any]], None], expected: str
) -> None:
    manifest = pod_monitor("vllm", "vllm", namespace="llm", match_labels={"app": "v"}, port="http")
    change(manifest["spec"]["podMetricsEndpoints"][0])
    errors = schema_errors(manifest)
    assert errors and all(e.startswith(".spec.podMetricsEndpoints[0]") for e in errors), errors
    assert any(re.search(expected, e) for e in errors), errors


def test_a_broken_pod_monitor_selector_is_named() -> None:
    manifest = pod_monitor("vllm", "vllm", namespace="llm", match_labels={"app": "v"}, port="http")
    manifest["spec"]["selector"]["matchLabels"]["app"] = 3
    assert schema_errors(manifest) == [".spec.selector.matchLabels.app: 3 is not of type 'string'"]
    manifest["spec"]["selector"] = {"matchLabels": {}, "matchExpressions": [{"key": "a"}]}
    assert schema_errors(manifest) == [
        ".spec.selector.matchExpressions[0]: 'operator' is a required property"
    ]


# -- the schemas are upstream's, and read whole --------------------------------------------------


def test_vendored_crds_are_the_upstream_files_the_readme_names() -> None:
    readme = (CRD_DIR / "README.md").read_text()
    listed = dict(
        re.findall(
            r"\| `(monitoring\.coreos\.com_[a-z]+\.yaml)` \|[^|]*\| `([0-9a-f]{64})` \|", readme
        )
    )
    on_disk = {p.name for p in CRD_DIR.glob("*.yaml")}
    assert set(listed) == on_disk == set(CRDS.values())
    for name, digest in listed.items():
        assert hashlib.sha256((CRD_DIR / name).read_bytes()).hexdigest() == digest, name
    version = re.search(r"tag `(v[0-9.]+)`", readme)
    assert version is not None
    for kind in CRDS:
        annotations = crd(kind)["metadata"]["annotations"]
        assert f"v{annotations['operator.prometheus.io/version']}" == version.group(1)


def test_the_schemas_hold_nothing_this_validation_leaves_unchecked() -> None:
    for kind in CRDS:
        nodes = list(_walk(_v1(kind)["schema"]["openAPIV3Schema"]))
        assert not [n for n in nodes if "x-kubernetes-validations" in n], "CEL rules: check them"
        assert not [n for n in nodes if n.get("x-kubernetes-preserve-unknown-fields")], kind
        assert not [n for n in nodes if "nullable" in n], kind
        formats = {n["format"] for n in nodes if isinstance(n.get("format"), str)}
        assert formats <= {"int32", "int64", "date-time"}, formats
        lists = {n["x-kubernetes-list-type"] for n in nodes if "x-kubernetes-list-type" in n}
        assert lists <= {"map", "set", "atomic"}, lists
        inline_flags = [
            n["pattern"]
            for n in nodes
            if "(?" in str(n.get("pattern", "")) and not str(n["pattern"]).startswith("^(?i)")
        ]
        assert inline_flags == [], kind
