"""GPU counters: NVML (+ GPM on Hopper and newer) sampled in the background, as Prometheus metrics.

Without a driver the collector exports ``fleetwatch_gpu_available{reason=...} 0`` and nothing
else: no value is ever invented. ``recorded.RecordedNvml`` is a test double that replays recorded
NVML answers; it is never used unless passed in explicitly.
"""

from fleetwatch.telemetry.gpu.nvml import (
    CLOCK_EVENT_REASONS,
    DeviceReading,
    GpuSnapshot,
    NvmlReader,
    unavailable_reason,
)
from fleetwatch.telemetry.gpu.peak import PeakRates, declared_peak, measure_memory_bandwidth
from fleetwatch.telemetry.gpu.sampler import GpuSampler

__all__ = [
    "CLOCK_EVENT_REASONS",
    "DeviceReading",
    "GpuSampler",
    "GpuSnapshot",
    "NvmlReader",
    "PeakRates",
    "declared_peak",
    "measure_memory_bandwidth",
    "unavailable_reason",
]
