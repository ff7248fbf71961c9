"""TEST DOUBLE: an object shaped like the ``pynvml`` module that replays recorded NVML answers.

It exists so the NVML parsing and export code runs on machines without a GPU (CI, laptops). It is
never used unless passed explicitly (``NvmlReader(RecordedNvml())``); the values are illustrative
readings of the shape an H100 SXM returns under a decode-heavy load, not measurements of this
machine. Raising behaviour mirrors pynvml: ``pynvml.NVMLError`` subclasses with NVML codes.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pynvml

__all__ = ["RecordedFrame", "RecordedNvml"]


@dataclass(frozen=True, slots=True)
class RecordedFrame:
    """One recorded poll of one device, in NVML's own units (%, MHz, mW, mJ, bytes, °C)."""

    utilization_gpu: int = 100
    sm_util_pct: float = 38.0
    sm_occupancy_pct: float = 21.5
    tensor_util_pct: float = 12.25
    dram_bw_util_pct: float = 71.0
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    clock_event_reasons: int = 0
    power_mw: int = 412_345
    energy_mj: int = 9_876_543_210
    temperature_c: int = 61
    memory_used: int = 71_000_000_000
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)


DEFAULT_FRAMES: tuple[RecordedFrame, ...] = (
    RecordedFrame(),
    RecordedFrame(sm_util_pct=41.0, energy_mj=9_876_955_555, power_mw=420_001),
    RecordedFrame(
        sm_util_pct=40.0,
        sm_clock_mhz=1755,
        clock_event_reasons=0x4 | 0x20,
        temperature_c=84,
        energy_mj=9_877_380_000,
    ),
)


@dataclass(frozen=True, slots=True)
class _Utilization:
    gpu: int
    memory: int


@dataclass(frozen=True, slots=True)
class _Memory:
    total: int
    used: int
    free: int


@dataclass(frozen=True, slots=True)
class _GpmSupport:
    isSupportedDevice: int


class RecordedNvml:
    """Replays ``frames`` (one per ``nvmlDeviceGetUtilizationRates`` call, the last repeating).

    ``init_error``: an NVML error code ``nvmlInit`` raises (e.g. 12, library not found).
    ``gpm_supported=False`` models a pre-Hopper GPU. ``unsupported`` names pynvml functions that
    raise NOT_SUPPORTED (e.g. ``{"nvmlDeviceGetRemappedRows"}``).
    """

    # Constants and structures the reader takes from the module it is given.
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_VOLATILE_ECC = pynvml.NVML_VOLATILE_ECC
    NVML_MEMORY_ERROR_TYPE_CORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_GPM_METRICS_GET_VERSION = pynvml.NVML_GPM_METRICS_GET_VERSION
    c_nvmlGpmMetricsGet_t = pynvml.c_nvmlGpmMetricsGet_t
    NVMLError = pynvml.NVMLError

    def __init__(
        self,
        frames: Sequence[RecordedFrame] = DEFAULT_FRAMES,
        *,
        devices: int = 1,
        name: str = "NVIDIA H100 80GB HBM3",
        memory_total: int = 85_520_809_984,
        max_sm_clock_mhz: int = 1980,
        max_mem_clock_mhz: int = 2619,
        gpm_supported: bool = True,
        init_error: int | None = None,
        unsupported: frozenset[str] = frozenset(),
    ) -> None:
        self.frames = tuple(frames)
        self.devices = devices
        self.name = name
        self.memory_total = memory_total
        self.max_clock = {
            pynvml.NVML_CLOCK_SM: max_sm_clock_mhz,
            pynvml.NVML_CLOCK_MEM: max_mem_clock_mhz,
        }
        self.gpm_supported = gpm_supported
        self.init_error = init_error
        self.unsupported = unsupported
        self.initialised = False
        self.polls = [0] * devices
        self._gpm_seq = 0
        self._gpm_storage: list[ctypes.c_uint] = []
        self._gpm_frame: dict[int, int] = {}

    # --- helpers ----------------------------------------------------------------------------

    def _check(self, fn: str) -> None:
        if not self.initialised:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        if fn in self.unsupported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def _frame(self, handle: int) -> RecordedFrame:
        i = max(0, self.polls[handle] - 1)
        return self.frames[min(i, len(self.frames) - 1)]

    # --- the pynvml surface the reader uses -----------------------------------------------------

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return self.devices

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._check("nvmlDeviceGetHandleByIndex")
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        self._check("nvmlDeviceGetName")
        return self.name

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        self._check("nvmlDeviceGetUUID")
        return f"GPU-00000000-0000-0000-0000-00000000000{handle}"

    def nvmlDeviceGetMaxClockInfo(self, handle: int, clock: int) -> int:
        self._check("nvmlDeviceGetMaxClockInfo")
        return self.max_clock[clock]

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> _Utilization:
        self._check("nvmlDeviceGetUtilizationRates")
        self.polls[handle] += 1
        return _Utilization(self._frame(handle).utilization_gpu, 60)

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        self._check("nvmlDeviceGetClockInfo")
        f = self._frame(handle)
        return f.sm_clock_mhz if clock == pynvml.NVML_CLOCK_SM else f.mem_clock_mhz

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        self._check("nvmlDeviceGetCurrentClocksEventReasons")
        return self._frame(handle).clock_event_reasons

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        self._check("nvmlDeviceGetPowerUsage")
        return self._frame(handle).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        self._check("nvmlDeviceGetTotalEnergyConsumption")
        return self._frame(handle).energy_mj

    def nvmlDeviceGetTemperatureV(self, handle: int, sensor: int) -> int:
        self._check("nvmlDeviceGetTemperatureV")
        return self._frame(handle).temperature_c

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> _Memory:
        self._check("nvmlDeviceGetMemoryInfo")
        used = self._frame(handle).memory_used
        return _Memory(self.memory_total, used, self.memory_total - used)

    def nvmlDeviceGetTotalEccErrors(self, handle: int, kind: int, counter: int) -> int:
        self._check("nvmlDeviceGetTotalEccErrors")
        f = self._frame(handle)
        return (
            f.ecc_corrected
            if kind == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
            else f.ecc_uncorrected
        )

    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple[int, int, int, int]:
        self._check("nvmlDeviceGetRemappedRows")
        return self._frame(handle).remapped_rows

    def nvmlGpmQueryDeviceSupport(self, handle: int) -> _GpmSupport:
        self._check("nvmlGpmQueryDeviceSupport")
        return _GpmSupport(1 if self.gpm_supported else 0)

    def nvmlGpmSampleAlloc(self) -> Any:
        self._check("nvmlGpmSampleAlloc")
        cell = ctypes.c_uint(0)
        self._gpm_storage.append(cell)
        return ctypes.cast(ctypes.pointer(cell), pynvml.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self._check("nvmlGpmSampleFree")

    def nvmlGpmSampleGet(self, handle: int, sample: Any) -> Any:
        self._check("nvmlGpmSampleGet")
        self._gpm_seq += 1
        ctypes.cast(sample, ctypes.POINTER(ctypes.c_uint)).contents.value = self._gpm_seq
        self._gpm_frame[self._gpm_seq] = max(0, self.polls[handle] - 1)
        return sample

    def nvmlGpmMetricsGet(self, req: Any) -> Any:
        self._check("nvmlGpmMetricsGet")
        first = ctypes.cast(req.sample1, ctypes.POINTER(ctypes.c_uint)).contents.value
        second = ctypes.cast(req.sample2, ctypes.POINTER(ctypes.c_uint)).contents.value
        if not 0 < first < second:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        f = self.frames[min(self._gpm_frame[second], len(self.frames) - 1)]
        values = {
            2: f.sm_util_pct,
            3: f.sm_occupancy_pct,
            5: f.tensor_util_pct,
            10: f.dram_bw_util_pct,
        }
        for i in range(req.numMetrics):
            m = req.metrics[i]
            if m.metricId in values:
                m.value = values[m.metricId]
                m.nvmlReturn = pynvml.NVML_SUCCESS
            else:
                m.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return req
