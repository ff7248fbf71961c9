"""Generated rule files and their promtool tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from fleetwatch.demo.artifacts import write_dashboards, write_rules
from fleetwatch.demo.spec import SPEC_PATH
from fleetwatch.slo.load import read_spec


def test_demo_spec_scales_the_page_windows_to_seconds() -> None:
    spec = read_spec(SPEC_PATH)
    availability = next(s for s in spec.slos if s.name == "availability")
    fast = max((w for w in availability.windows if w.severity == "page"), key=lambda w: w.burn)
    assert (fast.long_s, fast.short_s, fast.burn) == (60, 5, 14.4)
    assert spec.evaluation_interval_s == 1


@pytest.mark.promtool
def test_written_rules_check_and_fast_tests_pass(tmp_path: Path, promtool: Path) -> None:
    files = write_rules(tmp_path, read_spec(SPEC_PATH))
    assert {"SLOAvailabilityFastBurn", "FleetReplicaOutlier"} <= set(files.alert_names)
    names = [p.name for p in files.rules]
    done = subprocess.run(
        [str(promtool), "check", "rules", *names], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The outlier and operational tests are quick; the SLO test runs in the end-to-end test.
    quick = [p.name for p in files.tests if not p.name.startswith("slo")]
    done = subprocess.run(
        [str(promtool), "test", "rules", *quick], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    outliers = yaml.safe_load((tmp_path / "outliers.rules.yaml").read_text())
    assert "[30s]" in outliers["groups"][0]["rules"][0]["expr"]


def test_dashboards_are_the_fleetwatch_views(tmp_path: Path) -> None:
    written = write_dashboards(tmp_path)
    assert sorted(p.name for p in written) == [
        "fleetwatch-fleet.json",
        "fleetwatch-replica.json",
        "fleetwatch-resilience.json",
        "fleetwatch-slo.json",
    ]
