"""The demo's planted problems and its traffic plan."""

from __future__ import annotations

import pytest

from fleetwatch.cli import main
from fleetwatch.demo.scenario import DemoConfig, roles, traffic_plan
from fleetwatch.engine_probe.probe.errors import ProbeError


def test_one_slowed_and_one_long_prompt_replica() -> None:
    fleet = roles(DemoConfig())
    assert [r.name for r in fleet] == ["replica-0", "replica-1", "replica-2", "replica-3"]
    assert [r.planted for r in fleet] == ["none", "replica", "none", "workload"]
    assert fleet[1].slowdown > 1 and all(r.slowdown == 1 for r in fleet if r.planted != "replica")
    assert fleet[3].prompt_tokens[0] > fleet[0].prompt_tokens[1]


def test_plan_is_seeded_and_inside_the_duration() -> None:
    config = DemoConfig(duration_s=30, seed=7)
    a, b = traffic_plan(config), traffic_plan(config)
    assert a == b
    assert traffic_plan(DemoConfig(duration_s=30, seed=8)) != a
    for i, per in enumerate(a):
        assert per and all(0 <= p.offset_s < 30 and p.replica == i for p in per)
        offsets = [p.offset_s for p in per]
        assert offsets == sorted(offsets)
    long = a[3]
    lo, hi = config.long_prompt_tokens
    assert all(lo <= p.prompt_tokens <= hi for p in long)


def test_burst_window_is_seconds_into_the_traffic() -> None:
    assert DemoConfig(duration_s=60, burst_start=0.3, burst_end=0.45).burst_window_s == (18, 27)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"duration_s": 5},
        {"replicas": 2},
        {"slow_replica": 3, "long_replica": 3},
        {"slow_replica": 9},
        {"burst_start": 0.6, "burst_end": 0.5},
    ],
)
def test_bad_config_is_one_probe_error(kwargs: dict[str, object]) -> None:
    with pytest.raises(ProbeError):
        DemoConfig(**kwargs)  # type: ignore[arg-type]


def test_cli_refuses_a_too_short_run() -> None:
    assert main(["demo", "--duration", "3", "--quiet"]) == 2


def test_cli_without_prometheus_binary_is_one_line_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert main(["demo", "--prometheus", "--quiet", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "fleetwatch: error: demo --prometheus: prometheus not found on PATH (apt-get install prometheus)"
    ]
