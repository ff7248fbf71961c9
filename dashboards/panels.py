"""Panel specifications (plain values) and their rendering with grafana-foundation-sdk.

A view is a table of ``RowSpec``s; each ``PanelSpec`` says what to show (queries, unit, kind) and
nothing about layout or SDK calls, so views stay declarative and the SDK is touched in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from grafana_foundation_sdk.builders import (
    common as common_builders,
)
from grafana_foundation_sdk.builders import (
    dashboard as dashboard_builders,
)
from grafana_foundation_sdk.builders import (
    heatmap,
    prometheus,
    stat,
    statetimeline,
    timeseries,
)
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dashboard_models
from grafana_foundation_sdk.models import heatmap as heatmap_models
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

__all__ = ["Kind", "PanelSpec", "Query", "RowSpec", "Threshold", "legend_of", "render_panel"]

DATASOURCE: Final = dashboard_models.DataSourceRef(type_val="prometheus", uid="${datasource}")

# Grafana's own heatmap defaults (panelcfg of the heatmap panel): the SDK leaves steps, exponent
# and fill at zero values, with which Grafana paints every cell the same colour.
HEATMAP_SCHEME: Final = "Oranges"
HEATMAP_FILL: Final = "dark-orange"
HEATMAP_STEPS: Final = 64
HEATMAP_EXPONENT: Final = 0.5


class Kind(StrEnum):
    """Panel visualisations fleetwatch uses."""

    TIMESERIES = "timeseries"
    STAT = "stat"
    HEATMAP = "heatmap"
    STATE = "state-timeline"


def legend_of(label: str) -> str:
    """Grafana legend text that shows the value of ``label`` (``{{label}}``)."""
    return "{{" + label + "}}"


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL target and its legend (Grafana ``{{label}}`` templating)."""

    expr: str
    legend: str = ""


@dataclass(frozen=True, slots=True)
class Threshold:
    """A colour step: from ``value`` upwards (``None`` = from minus infinity)."""

    value: float | None
    color: str


@dataclass(frozen=True, slots=True)
class PanelSpec:
    """What one panel shows. ``unit`` is a Grafana unit id from ``models.units``;
    ``value_names`` maps a value to the text shown for it, ``value_colors`` to its colour.
    ``empty_when`` says when the panel legitimately shows no data (hardware the host lacks, an
    event that has not happened); it ends the description as "Empty <empty_when>." so a blank
    panel is never a mystery."""

    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str
    kind: Kind = Kind.TIMESERIES
    width: int = 12
    height: int = 8
    thresholds: tuple[Threshold, ...] = ()
    value_names: tuple[tuple[int, str], ...] = ()
    value_colors: tuple[tuple[int, str], ...] = ()
    min: float | None = None
    max: float | None = None
    empty_when: str = ""

    @property
    def full_description(self) -> str:
        """The description as shown: with the ``empty_when`` sentence when there is one."""
        if not self.empty_when:
            return self.description
        return f"{self.description} Empty {self.empty_when}."


@dataclass(frozen=True, slots=True)
class RowSpec:
    """A titled row of panels."""

    title: str
    panels: tuple[PanelSpec, ...]


Builder = (
    timeseries.Panel | stat.Panel | heatmap.Panel | statetimeline.Panel
)  # every panel builder fleetwatch emits


def _targets(spec: PanelSpec) -> list[cogbuilder.Builder[object]]:
    targets: list[cogbuilder.Builder[object]] = []
    for index, query in enumerate(spec.queries):
        target = (
            prometheus.Dataquery()
            .expr(query.expr)
            .ref_id(chr(ord("A") + index))
            .datasource(DATASOURCE)
        )
        if query.legend:
            target.legend_format(query.legend)
        if spec.kind is Kind.HEATMAP:
            target.format(PromQueryFormat.HEATMAP).legend_format("{{le}}")
        if spec.kind is Kind.STAT:
            target.instant()
        targets.append(target)  # type: ignore[arg-type]
    return targets


def _new(spec: PanelSpec) -> Builder:
    if spec.kind is Kind.STAT:
        return (
            stat.Panel()
            .color_mode(common.BigValueColorMode.BACKGROUND)
            .graph_mode(common.BigValueGraphMode.NONE)
            .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]))
        )
    if spec.kind is Kind.HEATMAP:
        return (
            heatmap.Panel()
            .calculate(False)
            .y_axis(heatmap.YAxisConfig().unit(spec.unit))
            .color(
                heatmap.HeatmapColorOptions()
                .mode(heatmap_models.HeatmapColorMode.SCHEME)
                .scheme(HEATMAP_SCHEME)
                .fill(HEATMAP_FILL)
                .scale(heatmap_models.HeatmapColorScale.EXPONENTIAL)
                .exponent(HEATMAP_EXPONENT)
                .steps(HEATMAP_STEPS)
            )
            .show_legend()
            .show_tooltip()
        )
    if spec.kind is Kind.STATE:
        return statetimeline.Panel().merge_values(True).show_value(common.VisibilityMode.AUTO)
    return (
        timeseries.Panel()
        .line_width(1)
        .fill_opacity(10)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["mean", "max", "lastNotNull"])
        )
    )


def render_panel(spec: PanelSpec, panel_id: int) -> Builder:
    """The SDK builder for ``spec``, with a dashboard-unique ``panel_id``."""
    panel = (
        _new(spec)
        .id(panel_id)
        .title(spec.title)
        .description(spec.full_description)
        .datasource(DATASOURCE)
        .unit(spec.unit)
        .span(spec.width)
        .height(spec.height)
    )
    for target in _targets(spec):
        panel.with_target(target)  # type: ignore[arg-type]
    if spec.min is not None:
        panel.min(spec.min)
    if spec.max is not None:
        panel.max(spec.max)
    if spec.thresholds:
        steps = [dashboard_models.Threshold(value=t.value, color=t.color) for t in spec.thresholds]
        panel.thresholds(
            dashboard_builders.ThresholdsConfig()
            .mode(dashboard_models.ThresholdsMode.ABSOLUTE)
            .steps(steps)
        )
    if spec.value_names:
        colors = dict(spec.value_colors)
        panel.mappings(
            [
                dashboard_models.ValueMap(
                    options={
                        str(value): dashboard_models.ValueMappingResult(
                            text=name, color=colors.get(value)
                        )
                        for value, name in spec.value_names
                    }
                )
            ]
        )
    return panel
