"""The burst simulator: queue depth with a warm pool meets the SLO where GPU utilisation does
not; seeded and repeatable."""

from __future__ import annotations

import json

import pytest

from fleetwatch.cli import main
from fleetwatch.fleet.capacity.simulate import (
    ScaleConfig,
    Scaler,
    simulate_scaler,
    simulate_scaling,
)
from fleetwatch.fleet.errors import AnalysisError


@pytest.fixture(scope="module")
def result():
    return simulate_scaling(ScaleConfig(seed=7))


def test_queue_depth_with_a_warm_pool_meets_the_slo_where_gpu_utilisation_does_not(result):
    rows = {r.scaler: r for r in result.rows}
    assert rows[Scaler.QUEUE_WARM].attainment >= 0.99
    assert rows[Scaler.GPU_UTIL].attainment < 0.6
    assert rows[Scaler.QUEUE].attainment < 0.6  # the burst is over before a cold start ends
    # utilisation stays at 100 % under any load: that scaler never gives replicas back
    assert rows[Scaler.GPU_UTIL].final_replicas == result.config.max_replicas
    assert rows[Scaler.QUEUE].final_replicas == result.config.replicas
    assert rows[Scaler.QUEUE_WARM].replica_seconds < rows[Scaler.GPU_UTIL].replica_seconds


def test_the_numbers_are_repeatable(result):
    again = simulate_scaling(ScaleConfig(seed=7))
    assert again.as_dict() == result.as_dict()
    assert {r.scaler for r in result.rows} == set(Scaler)
    assert len({r.requests for r in result.rows}) == 1  # every scaler sees the same arrivals


def test_without_a_burst_every_scaler_meets_the_slo():
    cfg = ScaleConfig(peak_rate_per_s=10, duration_s=120, seed=3)
    assert simulate_scaler(cfg, Scaler.QUEUE).attainment == 1.0


@pytest.mark.parametrize(
    "bad", [{"tick_s": 0}, {"peak_rate_per_s": 1}, {"max_replicas": 5}, {"replicas": 0}]
)
def test_bad_configs_are_refused(bad):
    with pytest.raises(AnalysisError):
        ScaleConfig(**bad)


def test_cli_prints_the_table(capsys):
    assert main(["fleet", "capacity", "--simulate", "--seed", "7", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["scaler"] for r in doc["simulation"]["rows"]] == ["gpu-util", "queue", "queue+warm"]
    assert main(["fleet", "capacity", "--simulate"]) == 0
    assert "queue+warm" in capsys.readouterr().out


def test_the_simulation_without_a_probe_takes_its_flags(capsys, tmp_path):
    """Without a probe the scenario is the flags': the defaults give the built-in scenario, and
    --rate/--peak-rate/--burst/--ttft/--cold-start change it (replicas and warm pool sized for
    them); -o has nothing to write without a plan and says so (exit 2, nothing created)."""
    assert main(["fleet", "capacity", "--simulate", "--seed", "7", "--json"]) == 0
    default = json.loads(capsys.readouterr().out)["simulation"]
    assert default == simulate_scaling(ScaleConfig(seed=7)).as_dict()
    argv = ["--rate", "40", "--peak-rate", "100", "--burst", "60", "--ttft", "2"]
    assert main(["fleet", "capacity", "--simulate", *argv, "--cold-start", "30", "--json"]) == 0
    cfg = json.loads(capsys.readouterr().out)["simulation"]["config"]
    assert (cfg["rate_per_s"], cfg["peak_rate_per_s"], cfg["burst_s"]) == (40.0, 100.0, 60.0)
    assert (cfg["ttft_s"], cfg["cold_start_s"]) == (2.0, 30.0)
    usable = ScaleConfig().per_replica_rate * 0.8
    assert cfg["replicas"] * usable >= 40 > (cfg["replicas"] - 1) * usable
    assert (cfg["replicas"] + cfg["warm_pool"]) * usable >= 100
    out = tmp_path / "manifests"
    assert main(["fleet", "capacity", "--simulate", "-o", str(out)]) == 2
    assert "need a probe run JSON" in capsys.readouterr().err
    assert not out.exists()
    assert main(["fleet", "capacity", "--simulate", "--rate", "10", "--peak-rate", "5"]) == 2
    assert "peak_rate_per_s must be at least rate_per_s" in capsys.readouterr().err
