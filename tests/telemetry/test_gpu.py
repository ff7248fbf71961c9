"""GPU counters: the no-driver path on this machine, and parsing via the recorded NVML double."""

from __future__ import annotations

import pynvml
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from fleetwatch.telemetry.gpu import GpuSampler, NvmlReader, declared_peak, unavailable_reason
from fleetwatch.telemetry.gpu.recorded import RecordedFrame, RecordedNvml


def _samples(reg: CollectorRegistry) -> list:
    return [
        s for f in text_string_to_metric_families(generate_latest(reg).decode()) for s in f.samples
    ]


def _real_nvml_works() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_real_nvml_works(), reason="a GPU driver is present on this machine")
def test_without_a_driver_only_availability_zero_with_a_reason_is_exported():
    sampler = GpuSampler()  # the real pynvml
    reg = CollectorRegistry()
    reg.register(sampler)
    sampler.start()
    samples = _samples(reg)
    sampler.stop()
    assert [(s.name, s.labels, s.value) for s in samples] == [
        ("fleetwatch_gpu_available", {"reason": "library_not_found"}, 0.0)
    ]


@pytest.mark.parametrize(
    ("code", "reason"),
    [(12, "library_not_found"), (9, "driver_not_loaded"), (4, "no_permission")],
)
def test_init_failures_become_reason_labels(code, reason):
    sampler = GpuSampler(nvml=RecordedNvml(init_error=code))
    snap = sampler.sample_once()
    assert not snap.available and snap.reason == reason and snap.devices == ()
    assert unavailable_reason(pynvml.NVMLError(code)) == reason


def test_recorded_values_are_converted_to_exported_units():
    sampler = GpuSampler(nvml=RecordedNvml(), labels={"replica": "r0"})
    reg = CollectorRegistry()
    reg.register(sampler)
    first = sampler.sample_once().devices[0]
    assert first.gpm_reason == "warming_up" and first.sm_active is None
    second = sampler.sample_once().devices[0]
    assert second.gpm_reason is None
    dev = {"replica": "r0", "gpu": "0", "uuid": second.uuid}
    get = reg.get_sample_value
    assert get("fleetwatch_gpu_available", {"replica": "r0", "reason": ""}) == 1.0
    assert get("fleetwatch_gpu_sm_active_ratio", dev) == pytest.approx(0.41)
    assert get("fleetwatch_gpu_sm_occupancy_ratio", dev) == pytest.approx(0.215)
    assert get("fleetwatch_gpu_tensor_active_ratio", dev) == pytest.approx(0.1225)
    assert get("fleetwatch_gpu_dram_bandwidth_ratio", dev) == pytest.approx(0.71)
    # The misleading number is exported too: 100% "utilization" while 41% of SMs are busy.
    assert get("fleetwatch_gpu_utilization_ratio", dev) == 1.0
    assert get("fleetwatch_gpu_sm_clock_hertz", dev) == 1.98e9
    assert get("fleetwatch_gpu_sm_clock_max_hertz", dev) == 1.98e9
    assert get("fleetwatch_gpu_memory_clock_max_hertz", dev) == 2.619e9
    assert get("fleetwatch_gpu_power_watts", dev) == pytest.approx(420.001)
    assert get("fleetwatch_gpu_energy_joules_total", dev) == pytest.approx(9_876_955.555)
    assert get("fleetwatch_gpu_temperature_celsius", dev) == 61.0
    assert get("fleetwatch_gpu_memory_used_bytes", dev) == 71e9
    assert get("fleetwatch_gpu_memory_total_bytes", dev) == 85_520_809_984
    assert get("fleetwatch_gpu_ecc_errors_total", {**dev, "type": "uncorrected"}) == 0
    assert get("fleetwatch_gpu_remapped_rows", {**dev, "kind": "pending"}) == 0
    assert get("fleetwatch_gpu_info", {**dev, "name": "NVIDIA H100 80GB HBM3"}) == 1.0
    assert get("fleetwatch_gpu_gpm_available", {**dev, "reason": ""}) == 1.0


def test_clock_event_bitmask_becomes_one_gauge_per_reason():
    sampler = GpuSampler(nvml=RecordedNvml())
    reg = CollectorRegistry()
    reg.register(sampler)
    for _ in range(3):
        snap = sampler.sample_once()
    d = snap.devices[0]
    assert d.sm_clock_hz == 1.755e9 and d.temperature_c == 84.0
    events = {
        s.labels["reason"]: s.value
        for s in _samples(reg)
        if s.name == "fleetwatch_gpu_clock_event_active"
    }
    assert events["sw_power_cap"] == 1.0 and events["sw_thermal_slowdown"] == 1.0
    assert events["hw_thermal_slowdown"] == 0.0 and events["hw_slowdown"] == 0.0
    assert len(events) == 9


def test_pre_hopper_and_unsupported_fields_are_absent_not_zero():
    nvml = RecordedNvml(
        gpm_supported=False,
        name="NVIDIA A100-SXM4-80GB",
        unsupported=frozenset({"nvmlDeviceGetRemappedRows", "nvmlDeviceGetTotalEccErrors"}),
    )
    sampler = GpuSampler(nvml=nvml)
    reg = CollectorRegistry()
    reg.register(sampler)
    sampler.sample_once()
    sampler.sample_once()
    names = {s.name for s in _samples(reg)}
    assert "fleetwatch_gpu_sm_active_ratio" not in names
    assert "fleetwatch_gpu_remapped_rows" not in names
    assert "fleetwatch_gpu_ecc_errors_total" not in names
    assert "fleetwatch_gpu_sample_errors_total" not in names  # NOT_SUPPORTED is not an error
    gpm = [s for s in _samples(reg) if s.name == "fleetwatch_gpu_gpm_available"]
    assert [(s.labels["reason"], s.value) for s in gpm] == [("not_supported", 0.0)]


def test_gpm_swaps_sample_buffers_every_poll():
    frames = [RecordedFrame(sm_util_pct=float(10 * i)) for i in range(1, 6)]
    reader = NvmlReader(RecordedNvml(frames))
    reader.open()
    values = [reader.read().devices[0].sm_active for _ in range(5)]
    reader.close()
    assert values == [None, 0.2, 0.3, 0.4, 0.5]


def test_background_thread_samples_at_the_injected_interval():
    waits: list[float] = []

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        return len(waits) > 3  # stop after three more samples

    nvml = RecordedNvml(devices=2)
    sampler = GpuSampler(nvml=nvml, interval_s=0.25, wait=wait)
    sampler.start()
    assert sampler.join(10)  # the injected wait ends the loop
    assert not sampler.running
    sampler.stop()
    assert waits == [0.25] * 4
    assert nvml.polls == [4, 4]
    assert not nvml.initialised


def test_declared_peaks_for_known_devices_only():
    assert declared_peak("NVIDIA H100 80GB HBM3").bandwidth_bytes_per_s == 3.35e12
    assert declared_peak("NVIDIA H200").bandwidth_bytes_per_s == 4.8e12
    assert declared_peak("Some Unknown Accelerator") is None


def test_instrument_registers_and_stops_the_sampler(make_engine, drive):
    from fleetwatch.telemetry.instrument import instrument

    nvml = RecordedNvml()
    sampler = GpuSampler(nvml=nvml, wait=lambda s: True)  # the thread exits at once
    reg = CollectorRegistry()
    engine = make_engine()
    inst = instrument(engine, registry=reg, gpu=sampler, env={})
    drive(engine, [[1, 2, 3]], 2)
    assert reg.get_sample_value("fleetwatch_gpu_available", {"reason": ""}) == 1.0
    inst.detach()
    assert not nvml.initialised
    assert reg.get_sample_value("fleetwatch_gpu_available", {"reason": ""}) is None


def test_measured_bandwidth_is_positive_and_says_where_it_came_from():
    from fleetwatch.telemetry.gpu import measure_memory_bandwidth

    peak = measure_memory_bandwidth("cpu", nbytes=1 << 20, repeats=2)
    assert peak.bandwidth_bytes_per_s > 0 and peak.flops_per_s is None
    assert peak.source == "measured: cpu copy"


class _FlakyNvml(RecordedNvml):
    """NVML whose init fails ``failures`` times (driver not loaded yet), then works."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.init_calls = 0

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_calls <= self.failures:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
        super().nvmlInit()


def test_a_failed_init_is_retried_with_capped_exponential_backoff():
    now = [0.0]
    nvml = _FlakyNvml(failures=6)
    sampler = GpuSampler(nvml=nvml, clock=lambda: now[0], retry_initial_s=1.0, retry_max_s=8.0)
    reg = CollectorRegistry()
    reg.register(sampler)
    tried_at = []
    while now[0] <= 60.0 and not sampler.sample_once().available:
        if nvml.init_calls > len(tried_at):
            tried_at.append(now[0])
        # between tries: only the availability gauge, at 0 with the reason
        assert [(s.name, s.labels, s.value) for s in _samples(reg)] == [
            ("fleetwatch_gpu_available", {"reason": "driver_not_loaded"}, 0.0)
        ]
        now[0] += 0.5
    tried_at.append(now[0])
    assert tried_at == [0.0, 1.0, 3.0, 7.0, 15.0, 23.0, 31.0]  # waits 1, 2, 4, 8, 8, 8
    assert nvml.init_calls == 7 and sampler.retry_at is None
    assert reg.get_sample_value("fleetwatch_gpu_available", {"reason": ""}) == 1.0
    assert reg.get_sample_value(
        "fleetwatch_gpu_info",
        {"gpu": "0", "name": "NVIDIA H100 80GB HBM3", "uuid": nvml.nvmlDeviceGetUUID(0)},
    )
    sampler.stop()
    assert not nvml.initialised


def test_the_background_thread_keeps_retrying_when_the_first_init_fails():
    now = [0.0]
    waits: list[float] = []
    nvml = _FlakyNvml(failures=2)

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        now[0] += seconds
        return nvml.initialised  # stop once NVML opened

    sampler = GpuSampler(nvml=nvml, interval_s=1.0, wait=wait, clock=lambda: now[0])
    sampler.start()
    assert sampler.join(10)  # the injected wait ends the loop once NVML opened
    assert sampler.snapshot is not None and sampler.snapshot.available
    assert nvml.init_calls == 3
    sampler.stop()
