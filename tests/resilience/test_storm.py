"""The retry-storm simulator: deterministic, the budget tames the storm, and the CLI speaks JSON."""

from __future__ import annotations

import json

import pytest

from fleetwatch.cli import main
from fleetwatch.resilience.retry import Jitter
from fleetwatch.resilience.storm import StormConfig, simulate, simulate_storm

SMALL = StormConfig(clients=200, duration_s=30.0, outage_start_s=5.0, outage_s=5.0, seed=3)


def test_same_seed_same_table() -> None:
    assert simulate_storm(SMALL) == simulate_storm(SMALL)


def test_budget_bounds_amplification_and_drain() -> None:
    result = simulate_storm(SMALL)
    for jitter in Jitter:
        without = next(r for r in result.rows if r.jitter is jitter and not r.budget)
        with_budget = next(r for r in result.rows if r.jitter is jitter and r.budget)
        assert without.amplification > with_budget.amplification
        assert with_budget.peak_arrivals_per_s < without.peak_arrivals_per_s
        assert with_budget.drain_s <= without.drain_s
        retries = with_budget.attempts - with_budget.requests
        bound = SMALL.budget_ratio * with_budget.requests + SMALL.budget_min_retries_per_s * (
            SMALL.duration_s + SMALL.budget_ttl_s
        )
        assert retries <= bound


def test_jitter_flattens_the_peak() -> None:
    rows = {(r.jitter, r.budget): r for r in simulate_storm(SMALL).rows}
    assert (
        rows[(Jitter.FULL, False)].peak_arrivals_per_s
        < rows[(Jitter.NONE, False)].peak_arrivals_per_s
    )


def test_no_outage_no_retries() -> None:
    row = simulate(
        StormConfig(clients=50, outage_s=0.0, outage_start_s=1.0, duration_s=10.0),
        Jitter.FULL,
        False,
    )
    assert row.attempts == row.requests and row.gave_up == 0 and row.drain_s == 0.0


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "resilience",
                "storm",
                "--clients",
                "100",
                "--duration-s",
                "20",
                "--outage-start-s",
                "2",
                "--outage-s",
                "3",
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert len(data["rows"]) == 6
    assert {r["jitter"] for r in data["rows"]} == {"none", "full", "decorrelated"}
    assert data["config"]["clients"] == 100


def test_cli_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "resilience",
                "storm",
                "--clients",
                "50",
                "--duration-s",
                "15",
                "--outage-start-s",
                "1",
                "--outage-s",
                "2",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "| decorrelated | yes |" in out and "amplification" in out


def test_cli_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["resilience", "storm", "--outage-s", "100"]) == 2
    err = capsys.readouterr().err.strip()
    assert "storm config" in err and "duration_s" in err and "\n" not in err
