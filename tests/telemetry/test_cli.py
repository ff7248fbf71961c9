"""`fleetwatch telemetry gpu`: live counters, or 'unavailable: <reason>'."""

from __future__ import annotations

import json

import pynvml
import pytest

from fleetwatch.cli import main


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


def test_gpu_once_prints_counters_from_the_test_double(capsys):
    assert main(["telemetry", "gpu", "--once", "--test-double", "--interval", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "sm_active 41.0%" in out and "utilization.gpu 100.0%" in out
    assert (
        main(["telemetry", "gpu", "--once", "--json", "--test-double", "--interval", "0.05"]) == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["devices"][0]["sm_active"] == pytest.approx(0.41)


def test_bad_interval_is_a_usage_error():
    assert main(["telemetry", "gpu", "--interval", "0"]) == 2
