"""The datasheet table is looked up by the device names NVML really reports, exactly: a name the
table does not list has no declared peak (no guessed MBU/MFU denominator)."""

from __future__ import annotations

import pytest

from fleetwatch.telemetry.gpu.specs import GPUS, find_gpu

# nvmlDeviceGetName as the driver reports it -> table key (None: not in the table).
NVML_NAMES = [
    ("NVIDIA H100 80GB HBM3", "H100-SXM"),
    ("NVIDIA H100 PCIe", "H100-PCIe"),
    ("NVIDIA H100 NVL", "H100-NVL"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA GH200 480GB", None),  # Grace Hopper: 96 or 144 GB of HBM, not an H200
    ("NVIDIA H200 NVL", None),  # a different board (lower power, other FLOP/s)
    ("NVIDIA A100-SXM4-80GB", "A100"),
    ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
    ("NVIDIA A100 80GB PCIe", "A100-80GB-PCIe"),
    ("NVIDIA A100-PCIE-40GB", "A100-40GB"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA L40", None),
    ("NVIDIA B200", "B200"),
    ("NVIDIA GB200", None),
    ("NVIDIA A10", None),
    ("Tesla V100-SXM2-32GB", None),
]


@pytest.mark.parametrize(("nvml_name", "key"), NVML_NAMES)
def test_nvml_names_map_to_their_own_datasheet_row(nvml_name: str, key: str | None) -> None:
    spec = find_gpu(nvml_name)
    assert (spec.name if spec else None) == key
    if key is not None:
        assert spec is GPUS[key]


def test_the_80gb_a100s_are_told_apart_by_bandwidth() -> None:
    sxm, pcie = find_gpu("NVIDIA A100-SXM4-80GB"), find_gpu("NVIDIA A100 80GB PCIe")
    assert sxm and pcie and sxm.memory_bytes == pcie.memory_bytes == 80e9
    assert (sxm.bandwidth_bps, pcie.bandwidth_bps) == (2.039e12, 1.935e12)


@pytest.mark.parametrize("name", ["h100", "H100 SXM", "h100-sxm", "a100 80gb pcie", "h200"])
def test_table_keys_are_looked_up_ignoring_case_spaces_and_dashes(name: str) -> None:
    assert find_gpu(name) is not None


@pytest.mark.parametrize("name", ["", "NVIDIA", "H100 80GB", "A100 PCIe", "NVIDIA GH200 144GB"])
def test_partial_or_unknown_names_find_nothing(name: str) -> None:
    assert find_gpu(name) is None


def test_no_two_names_in_the_table_collide() -> None:
    names = [n for key, spec in GPUS.items() for n in (key, *spec.nvml_names)]
    squashed = ["".join(ch for ch in n.lower() if ch.isalnum()) for n in names]
    assert len(set(squashed)) == len(squashed)
