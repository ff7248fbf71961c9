"""The fleet lines: recorded beside the operational alerts, read by the fleet view, and equal in
a real promtool to the histogram sum the view used to compute, one line per model."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.core.profiles import get_profile
from fleetwatch.core.promql import equality_labels, format_le, quote
from fleetwatch.core.rules import (
    ExpectedSample,
    ExprCase,
    InputSeries,
    RecordingRule,
    RuleTest,
    RuleTestFile,
)
from fleetwatch.dashboards.alerts import render_yaml, rules_document
from fleetwatch.dashboards.promql import Scope
from fleetwatch.dashboards.recordings import (
    FLEET_QUANTILES,
    fleet_quantile,
    fleet_recordings,
    recorded,
)
from fleetwatch.dashboards.views.common import LATENCY_SIGNALS
from fleetwatch.dashboards.views.fleet import fleet_rows
from tests.promtool_run import promtool_test

PROFILES = ("fleetwatch", "vllm", "sglang")


@pytest.mark.parametrize("name", PROFILES)
def test_the_fleet_view_reads_its_fleet_lines_from_the_recordings(name: str) -> None:
    profile = get_profile(name)
    group = fleet_recordings(profile)
    assert group is not None
    assert group in rules_document(profile).groups
    records = {r.record for r in group.rules if isinstance(r, RecordingRule)}
    read = {
        q.expr.partition("{")[0]
        for row in fleet_rows(profile)
        for panel in row.panels
        if panel.title.endswith("fleet p50 and p99")
        for q in panel.queries
    }
    expected = {
        recorded(s, q) for s, _ in LATENCY_SIGNALS if profile.has(s) for q in FLEET_QUANTILES
    }
    assert read == records == expected
    text = render_yaml(rules_document(profile))
    assert "_bucket" in text and "$" not in text.split("fleet", 1)[1].split("alert:")[0]


@pytest.mark.promtool
@pytest.mark.parametrize("name", PROFILES)
def test_each_models_recorded_line_is_the_sum_over_its_replicas_buckets(
    promtool: Path, tmp_path: Path, name: str
) -> None:
    """Two models of two replicas each: every recorded quantile has one series per model, with
    the profile's label, equal to the quantile of the buckets summed over that model's
    replicas."""
    profile = get_profile(name)
    scope = Scope(profile)
    (tmp_path / "ops.rules.yaml").write_text(render_yaml(rules_document(profile)))
    series = []
    cases = []
    for signal, _ in LATENCY_SIGNALS:
        if not profile.has(signal):
            continue
        ref = profile.metric(signal)
        fixed = equality_labels(ref.matchers) or {}
        bounds = [format_le(b) for b in ref.buckets[:2]] + ["+Inf"]
        for m, model in enumerate(("a", "b")):
            for r in range(2):
                for k, le in enumerate(bounds):
                    labels = {
                        **fixed,
                        profile.model_label: model,
                        profile.replica_label: f"{model}{r}",
                        "le": le,
                    }
                    text = ",".join(f"{key}={quote(v)}" for key, v in labels.items())
                    step = (k + 1) * (m + 1) * (r + 2)
                    series.append(InputSeries(f"{ref.name}_bucket{{{text}}}", f"0+{step}x10"))
        for q in FLEET_QUANTILES:
            expr = f"{recorded(signal, q)} - ignoring (profile) {fleet_quantile(scope, signal, q)}"
            zero = tuple(
                ExpectedSample(f"{{{profile.model_label}={quote(model)}}}", 0)
                for model in ("a", "b")
            )
            cases.append(ExprCase(expr, "10m", zero))
            kept = f"count by (profile, {profile.model_label}) ({recorded(signal, q)})"
            ones = tuple(
                ExpectedSample(f'{{profile="{name}",{profile.model_label}={quote(model)}}}', 1)
                for model in ("a", "b")
            )
            cases.append(ExprCase(kept, "10m", ones))
    test = RuleTestFile(
        ("ops.rules.yaml",), "1m", (RuleTest("1m", tuple(series), (), tuple(cases)),)
    )
    done = promtool_test(promtool, tmp_path, render_yaml(test))
    assert done.returncode == 0, done.stdout + done.stderr
