"""`fleetwatch telemetry gpu`: live counters, or 'unavailable: <reason>'."""

from __future__ import annotations

import json
from pathlib import Path

import pynvml
import pytest

from fleetwatch.cli import main
from fleetwatch.telemetry.gpu import GpuSampler
from fleetwatch.telemetry.gpu.recorded import RecordedNvml
from fleetwatch.telemetry_cli import render_snapshot


def _has_driver() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_has_driver(), reason="a GPU driver is present")
def test_gpu_without_driver_says_unavailable(capsys):
    assert main(["telemetry", "gpu", "--once"]) == 1
    assert capsys.readouterr().out.strip() == (
        "unavailable: library_not_found (NVML Shared Library Not Found)"
    )
    assert main(["telemetry", "gpu", "--once", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["reason"] == "library_not_found"


def test_the_production_command_has_no_test_double(capsys):
    """Recorded H100 readings are for tests through the Python API, never printed by the
    command as if this machine had measured them."""
    assert main(["telemetry", "gpu", "--once", "--test-double"]) == 2
    assert "No such option: --test-double" in capsys.readouterr().err
    source = (Path(__file__).resolve().parents[2] / "fleetwatch" / "telemetry_cli.py").read_text()
    assert "recorded" not in source.lower()


def test_a_snapshot_is_rendered_as_text_and_json():
    sampler = GpuSampler(nvml=RecordedNvml())
    try:
        sampler.sample_once()
        snap = sampler.sample_once()  # GPM reports from the second sample on
    finally:
        sampler.stop()
    text = render_snapshot(snap, as_json=False)
    assert "sm_active 41.0%" in text and "utilization.gpu 100.0%" in text
    assert "clock events none" in text
    data = json.loads(render_snapshot(snap, as_json=True))
    assert data["devices"][0]["sm_active"] == pytest.approx(0.41)


def test_bad_interval_is_a_usage_error():
    assert main(["telemetry", "gpu", "--interval", "0"]) == 2
