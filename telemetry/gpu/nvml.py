"""Read one snapshot of every GPU through NVML (``pynvml`` from ``nvidia-ml-py``).

All NVML calls go through the ``nvml`` object given to ``NvmlReader`` (default: the ``pynvml``
module), so the parsing is tested with a recorded double. Units are converted here: ratios 0..1,
hertz, watts, joules, bytes, degrees Celsius. A field NVML does not support on a device is None
and is not exported; other per-field errors are counted and also leave the field None.

GPM (Hopper and newer): two sample buffers per device; each read takes a new sample into the
spare buffer, asks ``nvmlGpmMetricsGet`` for the metrics between the previous and the new
sample, then swaps the buffers. The first read after opening has no interval yet, so GPM fields
are None until the second.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "CLOCK_EVENT_REASONS",
    "GPM_METRICS",
    "DeviceReading",
    "GpuSnapshot",
    "GpuUnavailable",
    "NvmlReader",
    "unavailable_reason",
]

CLOCK_EVENT_REASONS: Final[Mapping[str, int]] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
"""``nvmlDeviceGetCurrentClocksEventReasons`` bits by exported ``reason`` label."""

GPM_METRICS: Final[Mapping[str, int]] = {
    "sm_active": 2,  # NVML_GPM_METRIC_SM_UTIL
    "sm_occupancy": 3,  # NVML_GPM_METRIC_SM_OCCUPANCY
    "tensor_active": 5,  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    "dram_active": 10,  # NVML_GPM_METRIC_DRAM_BW_UTIL
}
"""GPM metric ids (percent 0..100 over the interval) by ``DeviceReading`` field."""

_NOT_SUPPORTED: Final = 3  # NVML_ERROR_NOT_SUPPORTED
_SUCCESS: Final = 0


class GpuUnavailable(Exception):
    """NVML cannot be used here; ``reason`` is a short snake_case label value."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def unavailable_reason(exc: BaseException) -> str:
    """``NVMLError_LibraryNotFound`` -> ``library_not_found``; anything else -> its class name."""
    name = type(exc).__name__
    name = name.removeprefix("NVMLError_")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """One GPU at one moment. None: not supported or not readable (never a made-up value)."""

    index: int
    uuid: str
    name: str
    utilization: float | None = None
    """NVML ``utilization.gpu`` (0..1): share of time ANY kernel ran. It misleads: a one-SM kernel
    reads 1.0 and a bandwidth-bound decode step can read low. Prefer ``sm_active``."""
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    gpm_reason: str | None = None
    """Why the GPM fields are None (``not_supported``, ``warming_up``, an error), else None."""
    sm_clock_hz: float | None = None
    sm_clock_max_hz: float | None = None
    mem_clock_hz: float | None = None
    mem_clock_max_hz: float | None = None
    clock_event_reasons: int | None = None
    power_w: float | None = None
    energy_j: float | None = None
    temperature_c: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    remapped_rows: Mapping[str, int] | None = None
    """``correctable``, ``uncorrectable``, ``pending``, ``failure``."""


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    """Every device at one sample, or why none could be read."""

    available: bool
    reason: str = ""
    detail: str = ""
    devices: tuple[DeviceReading, ...] = ()
    errors: Mapping[str, int] = field(default_factory=dict)
    """Cumulative per-call error counts (NVML calls that failed other than NOT_SUPPORTED)."""


class _Device:
    __slots__ = (
        "gpm_prev",
        "gpm_reason",
        "gpm_samples",
        "gpm_spare",
        "handle",
        "index",
        "max_mem",
        "max_sm",
        "name",
        "uuid",
    )

    def __init__(self, index: int, handle: Any) -> None:
        self.index = index
        self.handle = handle
        self.name = ""
        self.uuid = ""
        self.max_sm: float | None = None
        self.max_mem: float | None = None
        self.gpm_samples: tuple[Any, Any] | None = None
        self.gpm_prev: Any = None
        self.gpm_spare: Any = None
        self.gpm_reason: str | None = None


class NvmlReader:
    """Opens NVML, reads snapshots, closes. Not thread-safe: one sampler thread owns it.

    >>> from fleetwatch.telemetry.gpu.recorded import RecordedNvml
    >>> r = NvmlReader(RecordedNvml())
    >>> r.open(); snap = r.read(); r.close()
    >>> snap.available, snap.devices[0].name
    (True, 'NVIDIA H100 80GB HBM3')
    """

    def __init__(self, nvml: Any | None = None, *, use_gpm: bool = True) -> None:
        self._nvml = nvml
        self.use_gpm = use_gpm
        self._devices: list[_Device] = []
        self._errors: dict[str, int] = {}
        self._open = False

    @property
    def nvml(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                raise GpuUnavailable("pynvml_not_installed", str(exc)) from None
            self._nvml = pynvml
        return self._nvml

    def open(self) -> None:
        """Initialise NVML and discover devices; ``GpuUnavailable`` when it cannot."""
        nvml = self.nvml
        try:
            nvml.nvmlInit()
        except Exception as exc:
            raise GpuUnavailable(unavailable_reason(exc), str(exc)) from None
        self._open = True
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:
            self.close()
            raise GpuUnavailable(unavailable_reason(exc), str(exc)) from None
        if count == 0:
            self.close()
            raise GpuUnavailable("no_devices", "NVML reports no GPU")
        self._devices = []
        for i in range(count):
            dev = _Device(i, nvml.nvmlDeviceGetHandleByIndex(i))
            dev.name = _text(self._get("name", nvml.nvmlDeviceGetName, dev.handle)) or f"gpu{i}"
            dev.uuid = _text(self._get("uuid", nvml.nvmlDeviceGetUUID, dev.handle)) or ""
            dev.max_sm = _mhz(
                self._get(
                    "max_clock", nvml.nvmlDeviceGetMaxClockInfo, dev.handle, nvml.NVML_CLOCK_SM
                )
            )
            dev.max_mem = _mhz(
                self._get(
                    "max_clock", nvml.nvmlDeviceGetMaxClockInfo, dev.handle, nvml.NVML_CLOCK_MEM
                )
            )
            self._setup_gpm(dev)
            self._devices.append(dev)

    def _setup_gpm(self, dev: _Device) -> None:
        nvml = self.nvml
        if not self.use_gpm:
            dev.gpm_reason = "disabled"
            return
        try:
            support = nvml.nvmlGpmQueryDeviceSupport(dev.handle)
        except Exception as exc:
            dev.gpm_reason = unavailable_reason(exc)
            return
        if not int(support.isSupportedDevice):
            dev.gpm_reason = "not_supported"
            return
        try:
            dev.gpm_samples = (nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc())
            dev.gpm_spare = dev.gpm_samples[0]
        except Exception as exc:
            dev.gpm_reason = unavailable_reason(exc)
            return
        dev.gpm_reason = "warming_up"

    def close(self) -> None:
        if not self._open:
            return
        nvml = self.nvml
        for dev in self._devices:
            if dev.gpm_samples is not None:
                for s in dev.gpm_samples:
                    self._get("gpm_free", nvml.nvmlGpmSampleFree, s)
        self._devices = []
        try:
            nvml.nvmlShutdown()
        finally:
            self._open = False

    def _get(self, call: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            if getattr(exc, "value", None) != _NOT_SUPPORTED:
                self._count_error(call)
            return None

    def _count_error(self, call: str) -> None:
        self._errors[call] = self._errors.get(call, 0) + 1

    def read(self) -> GpuSnapshot:
        """One snapshot of every device (call ``open`` first)."""
        return GpuSnapshot(
            available=True,
            devices=tuple(self._read_device(d) for d in self._devices),
            errors=dict(self._errors),
        )

    def _read_device(self, dev: _Device) -> DeviceReading:
        nvml, h, g = self.nvml, dev.handle, self._get
        util = g("utilization", nvml.nvmlDeviceGetUtilizationRates, h)
        mem = g("memory", nvml.nvmlDeviceGetMemoryInfo, h)
        remapped = g("remapped_rows", nvml.nvmlDeviceGetRemappedRows, h)
        temp = g("temperature", nvml.nvmlDeviceGetTemperatureV, h, nvml.NVML_TEMPERATURE_GPU)
        power = g("power", nvml.nvmlDeviceGetPowerUsage, h)
        energy = g("energy", nvml.nvmlDeviceGetTotalEnergyConsumption, h)
        reasons = g("clock_event_reasons", nvml.nvmlDeviceGetCurrentClocksEventReasons, h)
        ecc_corr, ecc_unc = (
            g("ecc", nvml.nvmlDeviceGetTotalEccErrors, h, kind, nvml.NVML_VOLATILE_ECC)
            for kind in (
                nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            )
        )
        gpm = self._read_gpm(dev)
        return DeviceReading(
            index=dev.index,
            uuid=dev.uuid,
            name=dev.name,
            utilization=None if util is None else float(util.gpu) / 100.0,
            sm_active=gpm.get("sm_active"),
            sm_occupancy=gpm.get("sm_occupancy"),
            tensor_active=gpm.get("tensor_active"),
            dram_active=gpm.get("dram_active"),
            gpm_reason=dev.gpm_reason,
            sm_clock_hz=_mhz(g("clock", nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM)),
            sm_clock_max_hz=dev.max_sm,
            mem_clock_hz=_mhz(g("clock", nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_MEM)),
            mem_clock_max_hz=dev.max_mem,
            clock_event_reasons=None if reasons is None else int(reasons),
            power_w=None if power is None else float(power) / 1000.0,
            energy_j=None if energy is None else float(energy) / 1000.0,
            temperature_c=None if temp is None else float(temp),
            memory_used_bytes=None if mem is None else float(mem.used),
            memory_total_bytes=None if mem is None else float(mem.total),
            ecc_corrected=None if ecc_corr is None else int(ecc_corr),
            ecc_uncorrected=None if ecc_unc is None else int(ecc_unc),
            remapped_rows=None
            if remapped is None
            else dict(
                zip(
                    ("correctable", "uncorrectable", "pending", "failure"),
                    map(int, remapped),
                    strict=True,
                )
            ),
        )

    def _read_gpm(self, dev: _Device) -> dict[str, float]:
        if dev.gpm_samples is None:
            return {}
        nvml = self.nvml
        previous, spare = dev.gpm_prev, dev.gpm_spare
        try:
            nvml.nvmlGpmSampleGet(dev.handle, spare)
        except Exception as exc:
            self._count_error("gpm_sample")
            dev.gpm_reason = unavailable_reason(exc)
            return {}
        # Swap: the buffer just filled is the next read's "previous"; the other becomes spare.
        dev.gpm_prev = spare
        dev.gpm_spare = dev.gpm_samples[1] if previous is None else previous
        if previous is None:
            dev.gpm_reason = "warming_up"
            return {}
        req = nvml.c_nvmlGpmMetricsGet_t()
        req.version = nvml.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(GPM_METRICS)
        req.sample1 = previous
        req.sample2 = spare
        for i, metric_id in enumerate(GPM_METRICS.values()):
            req.metrics[i].metricId = metric_id
        try:
            nvml.nvmlGpmMetricsGet(req)
        except Exception as exc:
            self._count_error("gpm_metrics")
            dev.gpm_reason = unavailable_reason(exc)
            return {}
        dev.gpm_reason = None
        out: dict[str, float] = {}
        for i, name in enumerate(GPM_METRICS):
            m = req.metrics[i]
            if int(m.nvmlReturn) == _SUCCESS:
                out[name] = float(m.value) / 100.0
        return out


def _mhz(value: Any) -> float | None:
    return None if value is None else float(value) * 1e6


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)
