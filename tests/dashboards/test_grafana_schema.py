"""Every generated dashboard validates against Grafana's published JSON schema for the version it
targets: the dashboard kind (panels, rows, grid positions, field config, variables) and, per panel,
the plugin's own ``options`` / ``fieldConfig.defaults.custom`` schema and the Prometheus query
schema for each target. The schemas are vendored in dashboards/schema/ (see its README)."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from jsonschema.exceptions import best_match

from fleetwatch.dashboards.build import render_all

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "dashboards" / "schema"

# Panel plugin id -> vendored schema file stem.
PLUGIN_SCHEMAS = {
    "timeseries": "timeseries",
    "heatmap": "heatmap",
    "stat": "stat",
    "state-timeline": "statetimeline",
}
# Keys of Grafana's export envelope, consumed by the import dialog; not part of the model.
EXPORT_ENVELOPE = ("__inputs", "__requires")


def _load(stem: str) -> dict[str, Any]:
    return json.loads((SCHEMA_DIR / f"{stem}.jsonschema.json").read_text())


@cache
def _validator(stem: str, definition: str | None = None) -> jsonschema.Draft7Validator:
    """A validator for the whole file, or for one of its definitions (same ``definitions``)."""
    schema = _load(stem)
    if stem == "dashboard":
        # The schema's own description: "Nulls currently appear here when serializing
        # -Infinity to JSON" (Grafana writes every base threshold step as null).
        schema["definitions"]["Threshold"]["properties"]["value"]["type"] = ["number", "null"]
    if definition is not None:
        schema = {**schema, "$ref": f"#/definitions/{definition}"}
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def _errors(validator: jsonschema.Draft7Validator, instance: object, where: str) -> list[str]:
    found = list(validator.iter_errors(instance))
    if not found:
        return []
    # A oneOf/anyOf failure carries the real reasons in its context: report the closest one.
    return [
        f"{where}{err.json_path.removeprefix('$')}: {err.message[:200]}"
        for err in (best_match([e]) if e.context else e for e in found)
    ]


def _panels(dashboard: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for i, panel in enumerate(dashboard.get("panels", [])):
        yield f"panels[{i}]", panel
        for j, inner in enumerate(panel.get("panels", []) if panel.get("type") == "row" else []):
            yield f"panels[{i}].panels[{j}]", inner


def _threshold_nulls(where: str, panel: dict[str, Any]) -> list[str]:
    steps = panel.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {}).get("steps", [])
    return [
        f"{where}.fieldConfig.defaults.thresholds.steps[{k}].value: null is only the base step"
        for k, step in enumerate(steps)
        if k > 0 and isinstance(step, dict) and step.get("value") is None
    ]


def _plugin_errors(where: str, panel: dict[str, Any]) -> list[str]:
    kind = panel.get("type")
    if kind == "row":
        return []
    stem = PLUGIN_SCHEMAS.get(str(kind))
    if stem is None:
        return [f"{where}.type: no Grafana schema vendored for panel type {kind!r}"]
    errors = _errors(_validator(stem, "Options"), panel.get("options", {}), f"{where}.options")
    custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom")
    if "FieldConfig" in _load(stem)["definitions"]:
        where_custom = f"{where}.fieldConfig.defaults.custom"
        errors += _errors(_validator(stem, "FieldConfig"), custom or {}, where_custom)
    elif custom:
        errors.append(f"{where}.fieldConfig.defaults.custom: {kind} has no custom field config")
    for k, target in enumerate(panel.get("targets", [])):
        errors += _errors(_validator("prometheus"), target, f"{where}.targets[{k}]")
    return errors


def schema_errors(document: dict[str, Any]) -> list[str]:
    """Every way ``document`` departs from Grafana's schema, one line each ([] when valid)."""
    dashboard = {k: v for k, v in document.items() if k not in EXPORT_ENVELOPE}
    errors = _errors(_validator("dashboard"), {**dashboard, "panels": []}, "")
    for where, panel in _panels(dashboard):
        definition = "RowPanel" if panel.get("type") == "row" else "Panel"
        inner = {**panel, "panels": []} if definition == "RowPanel" else panel
        errors += _errors(_validator("dashboard", definition), inner, where)
        errors += _threshold_nulls(where, panel)
        errors += _plugin_errors(where, panel)
    if not errors:  # the split above must agree with the schema applied whole
        errors = _errors(_validator("dashboard"), dashboard, "")
    return errors


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, Any]]:
    return {name: json.loads(text) for name, text in render_all().items()}


@pytest.fixture(scope="module")
def sample(rendered: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return rendered["fleetwatch-slo.json"]


def test_every_generated_dashboard_is_valid_grafana_json(
    rendered: dict[str, dict[str, Any]],
) -> None:
    assert len(rendered) >= 10
    problems = {name: schema_errors(doc) for name, doc in rendered.items()}
    assert {name: errs for name, errs in problems.items() if errs} == {}


def test_every_panel_type_emitted_has_a_vendored_plugin_schema(
    rendered: dict[str, dict[str, Any]],
) -> None:
    kinds = {p["type"] for doc in rendered.values() for _, p in _panels(doc)} - {"row"}
    assert kinds and kinds <= set(PLUGIN_SCHEMAS)


def test_emitted_schema_version_is_the_vendored_schemas(
    rendered: dict[str, dict[str, Any]],
) -> None:
    declared = _load("dashboard")["definitions"]["Dashboard"]["properties"]["schemaVersion"]
    assert {doc["schemaVersion"] for doc in rendered.values()} == {declared["default"]}


def _broken(sample: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    """``sample`` with the item at dotted ``path`` (list indexes as numbers) set to ``value``."""
    doc = copy.deepcopy(sample)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node: Any = doc
    for part in parents:
        node = node[part]
    node[last] = value
    return doc


def _first(sample: dict[str, Any], kind: str) -> int:
    return next(i for i, p in enumerate(sample["panels"]) if p["type"] == kind)


@pytest.mark.parametrize(
    ("where", "value", "expected"),
    [
        ("gridPos.x", "left", r"panels\[\d+\]\.gridPos\.x: 'left' is not of type 'integer'"),
        ("gridPos.w", 30, r"gridPos\.w: 30 is greater than the maximum of 24"),
        ("options.legend.displayMode", "huge", r"options\.legend\.displayMode: 'huge'"),
        ("options.tooltip", {"mode": "multi"}, r"options\.tooltip: 'sort' is a required"),
        ("fieldConfig.defaults.custom.lineWidth", "2px", r"custom\.lineWidth: '2px'"),
        ("targets.0.expr", 42, r"targets\[0\]\.expr: 42 is not of type 'string'"),
        ("targets.0.refId", None, r"targets\[0\]\.refId: None is not of type 'string'"),
        ("transparent", "no", r"transparent: 'no' is not of type 'boolean'"),
        ("colour", "red", r"Additional properties are not allowed \('colour'"),
        ("type", "gauge-2000", r"no Grafana schema vendored for panel type 'gauge-2000'"),
    ],
)
def test_a_broken_timeseries_panel_is_named(
    sample: dict[str, Any], where: str, value: object, expected: str
) -> None:
    i = _first(sample, "timeseries")
    errors = schema_errors(_broken(sample, f"panels.{i}.{where}", value))
    assert any(re.search(expected, e) for e in errors), errors
    assert all(e.startswith(f"panels[{i}]") for e in errors), errors


def test_broken_stat_and_dashboard_fields_are_named(sample: dict[str, Any]) -> None:
    i = _first(sample, "stat")
    steps = f"panels.{i}.fieldConfig.defaults.thresholds.steps"
    assert schema_errors(_broken(sample, f"{steps}.1.value", None)) == [
        f"panels[{i}].fieldConfig.defaults.thresholds.steps[1].value: null is only the base step"
    ]
    errors = schema_errors(_broken(sample, f"panels.{i}.options.colorMode", "rainbow"))
    assert any(e.startswith(f"panels[{i}].options.colorMode: 'rainbow'") for e in errors)
    errors = schema_errors(_broken(sample, f"panels.{i}.fieldConfig.defaults.custom", {"a": 1}))
    assert errors == [f"panels[{i}].fieldConfig.defaults.custom: stat has no custom field config"]
    assert schema_errors(_broken(sample, "graphTooltip", 7)) == [
        ".graphTooltip: 7 is not one of [0, 1, 2]"
    ]
    assert any("'editable' is a required" in e for e in schema_errors(_drop(sample, "editable")))


def _drop(sample: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in sample.items() if k != key}


def test_a_broken_heatmap_and_row_are_named(rendered: dict[str, dict[str, Any]]) -> None:
    doc = next(d for d in rendered.values() if any(p["type"] == "heatmap" for p in d["panels"]))
    i = _first(doc, "heatmap")
    errors = schema_errors(_broken(doc, f"panels.{i}.options.color.mode", "neon"))
    assert any(e.startswith(f"panels[{i}].options.color.mode: 'neon'") for e in errors), errors
    r = _first(doc, "row")
    errors = schema_errors(_broken(doc, f"panels.{r}.collapsed", "yes"))
    assert errors == [f"panels[{r}].collapsed: 'yes' is not of type 'boolean'"]
    # A collapsed row carries its panels inside it: those are checked the same way.
    inner = {**doc["panels"][i], "gridPos": {"h": 8, "w": 12, "x": "12", "y": 0}}
    errors = schema_errors(_broken(doc, f"panels.{r}.panels", [inner]))
    assert errors == [f"panels[{r}].panels[0].gridPos.x: '12' is not of type 'integer'"]


def test_vendored_schemas_are_the_upstream_files_the_readme_names() -> None:
    readme = (SCHEMA_DIR / "README.md").read_text()
    listed = dict(
        re.findall(r"\| `([a-z]+\.jsonschema\.json)` \|[^|]*\| `([0-9a-f]{64})` \|", readme)
    )
    on_disk = {p.name for p in SCHEMA_DIR.glob("*.jsonschema.json")}
    needed = {"dashboard", "prometheus", *PLUGIN_SCHEMAS.values()}
    assert set(listed) == on_disk == {f"{stem}.jsonschema.json" for stem in needed}
    for name, digest in listed.items():
        assert hashlib.sha256((SCHEMA_DIR / name).read_bytes()).hexdigest() == digest, name
