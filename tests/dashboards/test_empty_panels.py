"""A panel that can legitimately be empty says when, and the GPU row says whether there is a GPU."""

from __future__ import annotations

import json

from fleetwatch.core.profiles import get_profile
from fleetwatch.dashboards.build import render_all
from fleetwatch.dashboards.panels import Kind, PanelSpec, Query
from fleetwatch.dashboards.views.replica import replica_rows


def test_the_gpu_row_opens_with_a_gpu_available_stat_naming_a_host_without_one() -> None:
    rows = {r.title: r for r in replica_rows(get_profile("fleetwatch"))}
    gpu = rows["GPU"].panels
    stat = gpu[0]
    assert stat.title == "GPU available" and stat.kind is Kind.STAT
    assert "fleetwatch_gpu_available" in stat.queries[0].expr
    assert dict(stat.value_names) == {0: "no GPU on this host", 1: "GPU available"}
    assert not stat.empty_when  # it always has a value: 1, or 0 with the reason
    for panel in gpu[1:]:
        assert panel.empty_when.startswith("on a replica without a GPU"), panel.title
    efficiency = {p.title: p for p in rows["GPU efficiency"].panels}
    assert "peak" in efficiency["Model bandwidth utilization (MBU)"].empty_when


def test_the_empty_sentence_ends_the_rendered_description() -> None:
    panel = PanelSpec("p", "What it shows.", (Query("up"),), "short", empty_when="until x")
    assert panel.full_description == "What it shows. Empty until x."
    dashboard = json.loads(render_all(["fleetwatch"])["fleetwatch-replica.json"])
    by_title = {p["title"]: p for p in dashboard["panels"]}
    assert by_title["SM activity"]["description"].endswith(
        "Empty on a replica without a GPU ('GPU available' says why)."
    )
    mappings = by_title["GPU available"]["fieldConfig"]["defaults"]["mappings"]
    assert mappings[0]["options"]["0"]["text"] == ("no GPU on this host")
