"""The demo's conclusions over records: the three outlier passes and the verdicts."""

from __future__ import annotations

import pytest

from engine_probe.demo.analysis import analyse, different_traffic, verdicts
from engine_probe.demo.run import SPEC_PATH
from engine_probe.demo.scenario import DemoConfig, roles
from slo.load import read_spec
from telemetry.analysis.outliers import DetectorConfig, table_from_records
from telemetry.analysis.synthetic import synthetic_fleet


@pytest.fixture(scope="module")
def masked_fleet():  # type: ignore[no-untyped-def]
    """Four replicas: replica-1 slow, replica-3 sent 8x longer prompts (both stand out on TTFT)."""
    return synthetic_fleet(4, 200, seed=3, slowdown={1: 3.0}, prompt_scale={3: 8.0}, rate_per_s=2.0)


def test_different_traffic_names_the_long_prompt_replica(masked_fleet) -> None:  # type: ignore[no-untyped-def]
    table = table_from_records(masked_fleet)
    assert different_traffic(table, DetectorConfig()) == ("replica-3",)


def test_verdicts_blame_the_slow_replica_and_not_the_long_prompt_one(masked_fleet) -> None:  # type: ignore[no-untyped-def]
    analysis = analyse(masked_fleet, read_spec(SPEC_PATH))
    found = {v.replica: v for v in verdicts(analysis, roles(DemoConfig()))}
    assert found["replica-1"].side == "replica"
    assert found["replica-3"].side == "workload"
    assert found["replica-3"].cause == "prompt_length_mix"
    assert all(v.correct for v in found.values())
    assert analysis.peers is not None
    assert {f.replica for f in analysis.peers.findings} == {"replica-1"}


def test_ratios_are_to_the_fleet_median(masked_fleet) -> None:  # type: ignore[no-untyped-def]
    analysis = analyse(masked_fleet, read_spec(SPEC_PATH))
    tpot = analysis.ratios["tpot"]
    assert tpot["replica-1"] > 2.0
    assert sorted(tpot.values())[1] < 1.0 < sorted(tpot.values())[2]
