"""The demo's cold-start summary: slowest replica, per-phase maxima, the printed line, the table."""

from __future__ import annotations

import pandas as pd

from fleetwatch.demo.fleet import FleetRun
from fleetwatch.demo.page import _startup_section
from fleetwatch.demo.summary import _startup


def _run(startups: dict[str, dict[str, float]]) -> FleetRun:
    return FleetRun(
        roles=(),
        addresses={},
        records=pd.DataFrame(),
        client=(),
        start_s=0.0,
        end_s=1.0,
        burst_s=(0.0, 1.0),
        planned=0,
        faults={},
        dropped=0,
        startups=startups,
    )


def test_summary_names_the_slowest_start_and_each_phases_maximum() -> None:
    run = _run(
        {
            "replica-0": {"weights_load": 1.0, "warmup": 0.5},
            "replica-1": {"weights_load": 0.5, "warmup": 2.0},
        }
    )
    got = _startup(run)
    assert got["slowest_replica"] == "replica-1" and got["slowest_total_s"] == 2.5
    assert got["max_phase_s"] == {"weights_load": 1.0, "warmup": 2.0}
    assert got["metric"] == "fleetwatch_engine_startup_seconds"


def test_without_timed_starts_there_is_no_section() -> None:
    assert _startup(_run({}))["slowest_replica"] is None
    assert _startup_section({"replicas": [{"replica": "r", "startup_s": {}}]}) is None
    section = _startup_section(
        {"replicas": [{"replica": "r", "startup_s": {"weights_load": 1.0, "warmup": 0.5}}]}
    )
    assert section is not None and "<td>1.5</td>" in section.body
