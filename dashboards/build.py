"""Dashboards from views: JSON text per (profile, view), writing and drift checking.

``render_all`` is pure (profiles in, file name to JSON text out); ``write_dashboards`` and
``drifted`` are the only functions that touch files. The JSON is encoded with sorted keys and a
fixed layout so the committed files change only when a view or a profile does.

Data source, for both ways a dashboard reaches Grafana:

* Import (Dashboards -> Import, or the grafana.com dashboard API): the JSON carries ``__inputs``
  with one ``DS_PROMETHEUS`` data-source input and ``__requires`` (Grafana, the Prometheus plugin,
  the panel plugins used), as Grafana's "Export for sharing externally" writes them. The import
  dialog asks for a Prometheus data source and replaces every ``${DS_PROMETHEUS}`` with its uid.
* Provisioning (files read by Grafana's dashboard provider): nothing replaces ``${DS_PROMETHEUS}``
  and ``__inputs`` is ignored.

So panels, targets and the model/replica/SLO queries do not name ``${DS_PROMETHEUS}`` themselves:
they read the ``datasource`` template variable (``${datasource}``, of type ``prometheus``), and
``${DS_PROMETHEUS}`` appears only as that variable's current value. An import sets the variable
to the data source picked in the dialog; a provisioned file leaves a value that matches no data
source, which Grafana treats like any stale selection: the variable takes the first Prometheus
data source it lists. Either way the variable stays switchable on the dashboard.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from grafana_foundation_sdk.builders.dashboard import (
    CustomVariable,
    Dashboard,
    DatasourceVariable,
    QueryVariable,
    Row,
)
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    VariableOption,
    VariableRefresh,
    VariableSort,
)

from fleetwatch.core.atomic import atomic_write_text
from fleetwatch.core.profiles import PROFILES, Profile
from fleetwatch.core.profiles.labels import DEFAULT_SCHEME, LabelScheme
from fleetwatch.dashboards.errors import DashboardError
from fleetwatch.dashboards.names import (
    RESILIENCE_PROFILES,
    RESILIENCE_SOURCE,
    SLO_RULES,
    unknown_names,
)
from fleetwatch.dashboards.panels import DATASOURCE, PanelSpec, RowSpec, render_panel
from fleetwatch.dashboards.promql import Scope, metric_names
from fleetwatch.dashboards.views import VIEWS, views_for

__all__ = [
    "DASHBOARD_PROFILES",
    "DATASOURCE_INPUT",
    "build_dashboard",
    "check_names",
    "dashboard_expressions",
    "dashboard_tags",
    "drifted",
    "file_name",
    "render_all",
    "write_dashboards",
]

# TGI is left out: without TTFT and with router-only metrics there is little to drill into.
DASHBOARD_PROFILES: Final = ("fleetwatch", "vllm", "sglang")

# The import input Grafana's exporter names after a data source called "Prometheus".
DATASOURCE_INPUT: Final = "DS_PROMETHEUS"
# The Grafana release grafana-foundation-sdk's schema follows (the SDK version after its "!").
GRAFANA_VERSION: Final = "10.1.0"
# Panel plugin id -> the name Grafana's exporter writes in ``__requires``.
_PANEL_PLUGINS: Final[Mapping[str, str]] = {
    "heatmap": "Heatmap",
    "stat": "Stat",
    "state-timeline": "State timeline",
    "timeseries": "Time series",
}


def file_name(profile: str, view: str) -> str:
    return f"{profile}-{view}.json"


def dashboard_tags(profile: str, view: str) -> list[str]:
    """``fleetwatch``, the profile and the view, each once (the fleetwatch profile shares its
    name with the project tag)."""
    return list(dict.fromkeys(("fleetwatch", profile, view)))


def _query_variable(name: str, label: str, query: str) -> QueryVariable:
    """A multi-value variable with an "All" option matching everything."""
    return (
        QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )


def _variables(
    profile: Profile, view: str
) -> list[QueryVariable | DatasourceVariable | CustomVariable]:
    outcomes = profile.outcomes.total
    total = outcomes.selector()
    model, replica = profile.model_label, profile.replica_label
    chosen = f'{model}=~"$model"'
    variables: list[QueryVariable | DatasourceVariable | CustomVariable] = [
        DatasourceVariable("datasource")
        .label("Data source")
        .type("prometheus")
        .current(
            VariableOption(
                selected=True, text=f"${{{DATASOURCE_INPUT}}}", value=f"${{{DATASOURCE_INPUT}}}"
            )
        ),
        _query_variable("model", f"model ({model})", f"label_values({total}, {model})"),
        _query_variable(
            "replica",
            f"replica ({replica})",
            f"label_values({outcomes.selector(chosen)}, {replica})",
        ),
    ]
    # The scheme's routing labels (a namespace, a team): each a variable every selector reads.
    variables[2:2] = [
        _query_variable(n, n, f"label_values({total}, {n})") for n in Scope(profile).routing
    ]
    if view == "fleet":
        variables.append(
            CustomVariable("topk")
            .label("Replicas shown")
            .description("How many replicas the per-replica panels show: the worst ones.")
            .values("5,10,20,50")
            .current(VariableOption(selected=True, text="10", value="10"))
        )
    if view == "slo":
        variables.append(
            _query_variable(
                "slo", "SLO", f"label_values({SLO_RULES.objective}, {SLO_RULES.slo_label})"
            )
        )
    return variables


def _rows(profile: Profile, view: str) -> tuple[str, tuple[RowSpec, ...]]:
    try:
        title, rows = VIEWS[view]
    except KeyError:
        raise DashboardError(
            f"unknown dashboard view '{view}' (known: {', '.join(VIEWS)})"
        ) from None
    if view not in views_for(profile):
        raise DashboardError(
            f"profile '{profile.name}' gets no {view} dashboard: its series come from "
            f"{RESILIENCE_SOURCE}, which only profile(s) {', '.join(sorted(RESILIENCE_PROFILES))} "
            "describe; use fleetwatch-resilience.json beside this profile's dashboards"
        )
    return title, rows(profile)


def check_names(profile: Profile, where: str, panels: Iterable[PanelSpec]) -> None:
    """``DashboardError`` naming the panel if any expression reads a series that neither the
    profile nor the documented rule and resilience tables define."""
    for panel in panels:
        for query in panel.queries:
            unknown = unknown_names(profile, metric_names(query.expr))
            if unknown:
                raise DashboardError(
                    f"{where} panel '{panel.title}': metric(s) "
                    f"{', '.join(sorted(unknown))} not exported by profile '{profile.name}'"
                )


def build_dashboard(profile: Profile, view: str) -> Dashboard:
    """The SDK builder of one dashboard; ``DashboardError`` if an expression strays from the profile."""
    title, rows = _rows(profile, view)
    check_names(profile, file_name(profile.name, view), (p for row in rows for p in row.panels))
    source = (
        f"series from {RESILIENCE_SOURCE}, whatever engine serves"
        if view == "resilience"
        else profile.description
    )
    dashboard = (
        Dashboard(f"fleetwatch / {profile.name} / {title}")
        .uid(f"fleetwatch-{profile.name}-{view}")
        .description(f"{title} for {source}. Generated by fleetwatch; do not edit.")
        .tags(dashboard_tags(profile.name, view))
        .editable()
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .time("now-6h", "now")
        .refresh("30s")
        .timezone("browser")
    )
    for variable in _variables(profile, view):
        dashboard.with_variable(variable)
    panel_id = 1
    for row in rows:
        dashboard.with_row(Row(row.title).id(panel_id))
        panel_id += 1
        for spec in row.panels:
            dashboard.with_panel(render_panel(spec, panel_id))
            panel_id += 1
    return dashboard


def _import_header(panel_types: Iterable[str]) -> dict[str, object]:
    """``__inputs`` and ``__requires`` as Grafana's "Export for sharing externally" writes them."""
    requires: list[dict[str, str]] = [
        {"type": "grafana", "id": "grafana", "name": "Grafana", "version": GRAFANA_VERSION},
        {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
    ]
    requires += [
        {"type": "panel", "id": kind, "name": _PANEL_PLUGINS[kind], "version": ""}
        for kind in sorted(set(panel_types))
    ]
    return {
        "__inputs": [
            {
                "name": DATASOURCE_INPUT,
                "label": "Prometheus",
                "description": "",
                "type": "datasource",
                "pluginId": "prometheus",
                "pluginName": "Prometheus",
            }
        ],
        "__requires": requires,
    }


def _encode(dashboard: Dashboard) -> str:
    document = json.loads(JSONEncoder().encode(dashboard.build()))
    kinds = (p["type"] for p in document["panels"] if p["type"] != "row")
    document.update(_import_header(kinds))
    return json.dumps(document, sort_keys=True, indent=2) + "\n"


def render_all(
    profiles: Iterable[str] = DASHBOARD_PROFILES, *, scheme: LabelScheme = DEFAULT_SCHEME
) -> Mapping[str, str]:
    """File name to JSON text for every view of every profile, in a stable order, each profile
    under the label ``scheme`` of the fleet's Prometheus."""
    files: dict[str, str] = {}
    for name in profiles:
        known = PROFILES.get(name)
        if known is None:
            raise DashboardError(f"unknown metric profile '{name}' (known: {', '.join(PROFILES)})")
        profile = scheme.apply(known)
        for view in views_for(profile):
            files[file_name(name, view)] = _encode(build_dashboard(profile, view))
    return files


def dashboard_expressions(profile: Profile, view: str) -> tuple[str, ...]:
    """Every PromQL expression of one dashboard (panel targets and variable queries excluded)."""
    _, rows = _rows(profile, view)
    return tuple(q.expr for row in rows for p in row.panels for q in p.queries)


def write_dashboards(out: Path, files: Mapping[str, str]) -> tuple[Path, ...]:
    """Write each file atomically under ``out``; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files.items():
        path = out / name
        atomic_write_text(path, text)
        written.append(path)
    return tuple(written)


def drifted(out: Path, files: Mapping[str, str]) -> tuple[str, ...]:
    """Names under ``out`` that differ from ``files``, are missing, or are stale extras."""
    problems = []
    for name, text in files.items():
        path = out / name
        if not path.is_file():
            problems.append(f"{name} (missing)")
        elif path.read_text(encoding="utf-8") != text:
            problems.append(f"{name} (differs)")
    if out.is_dir():
        problems.extend(
            f"{p.name} (not generated)" for p in sorted(out.glob("*.json")) if p.name not in files
        )
    return tuple(problems)
