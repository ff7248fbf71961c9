"""The demo's conclusions over records: one detector call, and the verdicts on planted replicas."""

from __future__ import annotations

import pytest

from fleetwatch.demo.analysis import analyse, verdicts
from fleetwatch.demo.scenario import DemoConfig, roles
from fleetwatch.demo.spec import SPEC_PATH
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet
from fleetwatch.slo.load import read_spec


@pytest.fixture(scope="module")
def masked_fleet():  # type: ignore[no-untyped-def]
    """Four replicas: replica-1 slow, replica-3 sent 8x longer prompts (both stand out on TTFT)."""
    return synthetic_fleet(4, 200, seed=3, slowdown={1: 3.0}, prompt_scale={3: 8.0}, rate_per_s=2.0)


@pytest.fixture(scope="module")
def analysis(masked_fleet):  # type: ignore[no-untyped-def]
    return analyse(masked_fleet, read_spec(SPEC_PATH))


def test_verdicts_blame_the_slow_replica_and_not_the_long_prompt_one(analysis) -> None:  # type: ignore[no-untyped-def]
    found = {v.replica: v for v in verdicts(analysis, roles(DemoConfig()))}
    assert found["replica-1"].side == "replica"
    assert found["replica-3"].side == "workload"
    assert found["replica-3"].cause == "prompt_length_mix"
    assert all(v.correct for v in found.values())


def test_requests_unmask_both_in_the_first_pass(analysis) -> None:  # type: ignore[no-untyped-def]
    # Both stand out on TTFT and would hide each other's medians; each replica's requests
    # against the rest's do not, so the whole-fleet pass finds both, and says how.
    by = {(f.replica, f.signal): f for f in analysis.outliers.findings}
    for r in ("replica-1", "replica-3"):
        f = by[(r, "ttft")]
        assert f.found_in == "fleet"
        assert any("against the rest of the fleet's (Mann–Whitney" in e for e in f.evidence)
        assert "judged against the whole fleet (4 replicas)" in f.evidence[-1]


def test_ratios_are_to_the_fleet_median(analysis) -> None:  # type: ignore[no-untyped-def]
    tpot = analysis.ratios["tpot"]
    assert tpot["replica-1"] > 2.0
    assert sorted(tpot.values())[1] < 1.0 < sorted(tpot.values())[2]
