"""Background GPU sampler and its Prometheus collector.

A daemon thread reads every device every ``interval_s`` (default 1 s) and keeps the latest
``GpuSnapshot``; scrapes only format that snapshot, so a slow NVML call never delays ``/metrics``
and a busy scraper never adds NVML load. Without NVML the only series is
``fleetwatch_gpu_available{reason="<why>"} 0``.

A failed NVML init is not final: a driver still loading, a device plugin not yet ready or a
container started before the GPU was mounted all recover. The sampler tries again after
``retry_initial_s``, doubling the wait after each failure up to ``retry_max_s``, and exports the
availability gauge at 0 with the last reason in between.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fleetwatch.core.profiles import FLEETWATCH, Profile, Signal
from fleetwatch.telemetry.gpu.nvml import (
    CLOCK_EVENT_REASONS,
    DeviceReading,
    GpuSnapshot,
    GpuUnavailable,
    NvmlReader,
)

__all__ = ["GpuSampler"]

_RATIOS = (
    (Signal.GPU_UTILIZATION, "utilization", "NVML utilization.gpu, 0..1: time ANY kernel ran. "
     "Misleading: one busy SM reads 1.0. Prefer fleetwatch_gpu_sm_active_ratio."),
    (Signal.GPU_SM_ACTIVE, "sm_active", "GPM SM activity, 0..1: share of SMs busy (Hopper+)."),
    (Signal.GPU_SM_OCCUPANCY, "sm_occupancy", "GPM SM occupancy, 0..1: active warps vs maximum."),
    (Signal.GPU_TENSOR_ACTIVE, "tensor_active", "GPM tensor-pipe activity, 0..1."),
    (Signal.GPU_DRAM_ACTIVE, "dram_active", "GPM DRAM bandwidth used vs theoretical peak, 0..1."),
    (Signal.GPU_SM_CLOCK, "sm_clock_hz", "SM clock (Hz)."),
    (Signal.GPU_SM_CLOCK_MAX, "sm_clock_max_hz", "Maximum SM clock (Hz)."),
    (Signal.GPU_MEM_CLOCK, "mem_clock_hz", "Memory clock (Hz)."),
    (Signal.GPU_MEM_CLOCK_MAX, "mem_clock_max_hz", "Maximum memory clock (Hz)."),
    (Signal.GPU_POWER, "power_w", "Power draw (W)."),
    (Signal.GPU_TEMPERATURE, "temperature_c", "GPU temperature (°C)."),
    (Signal.GPU_MEMORY_USED, "memory_used_bytes", "Device memory used (bytes)."),
    (Signal.GPU_MEMORY_TOTAL, "memory_total_bytes", "Device memory total (bytes)."),
)  # fmt: skip


class GpuSampler(Collector):
    """Sample NVML in the background; export the latest snapshot.

    ``nvml`` defaults to the real ``pynvml`` module (pass ``RecordedNvml()`` only in tests).
    ``labels`` are constant labels added to every series (e.g. ``{"replica": "r0"}``).
    ``wait(seconds) -> bool`` is the thread's sleep (returns True to stop); injected in tests.
    ``clock() -> seconds`` (monotonic) times the retries of a failed NVML init, which wait
    ``retry_initial_s`` and then twice as long after each failure, at most ``retry_max_s``.

    >>> from fleetwatch.telemetry.gpu.recorded import RecordedNvml
    >>> s = GpuSampler(nvml=RecordedNvml())
    >>> s.sample_once().available
    True
    >>> s.stop()
    """

    def __init__(
        self,
        *,
        nvml: Any | None = None,
        interval_s: float = 1.0,
        labels: Mapping[str, str] | None = None,
        profile: Profile = FLEETWATCH,
        use_gpm: bool = True,
        wait: Callable[[float], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
        retry_initial_s: float = 1.0,
        retry_max_s: float = 300.0,
    ) -> None:
        if not 0 < retry_initial_s <= retry_max_s:
            raise ValueError(
                f"need 0 < retry_initial_s <= retry_max_s, got {retry_initial_s}, {retry_max_s}"
            )
        self.interval_s = interval_s
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        self._clock = clock
        self._retry_at = 0.0
        self._backoff_s = 0.0
        self.labels = dict(labels or {})
        self.profile = profile
        self._reader = NvmlReader(nvml, use_gpm=use_gpm)
        self._opened = False
        self._unavailable: GpuSnapshot | None = None
        self._snapshot: GpuSnapshot | None = None
        self._stop = threading.Event()
        self._wait = wait if wait is not None else self._stop.wait
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def snapshot(self) -> GpuSnapshot | None:
        return self._snapshot

    @property
    def retry_at(self) -> float | None:
        """``clock()`` time of the next NVML init attempt while unavailable, else None."""
        return self._retry_at if self._unavailable is not None else None

    def sample_once(self) -> GpuSnapshot:
        """Read every device now (opening NVML on first use) and keep the snapshot. While NVML
        is unavailable, tries to open it again only once the backoff has passed."""
        with self._lock:
            if self._unavailable is not None and self._clock() < self._retry_at:
                snap = self._unavailable
            else:
                try:
                    if not self._opened:
                        self._reader.open()
                        self._opened = True
                    snap = self._reader.read()
                    self._unavailable = None
                    self._backoff_s = 0.0
                except GpuUnavailable as exc:
                    snap = GpuSnapshot(False, exc.reason, exc.detail)
                    self._unavailable = snap
                    self._backoff_s = min(
                        self.retry_max_s, 2 * self._backoff_s or self.retry_initial_s
                    )
                    self._retry_at = self._clock() + self._backoff_s
            self._snapshot = snap
            return snap

    def start(self) -> None:
        """Take a first sample now, then keep sampling on a daemon thread (which, without
        NVML, retries opening it with backoff)."""
        if self._thread is not None:
            return
        self.sample_once()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="fleetwatch-gpu", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        """Whether the background sampling thread is alive."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def join(self, timeout: float | None = None) -> bool:
        """Wait at most ``timeout`` seconds for the background thread to end by itself (an
        injected ``wait`` returning True ends it), without stopping it; True when none runs."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return not self.running

    def _run(self) -> None:
        while not self._wait(self.interval_s):
            if self._stop.is_set():
                break
            self.sample_once()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(max(5.0, 2 * self.interval_s))
            self._thread = None
        with self._lock:
            if self._opened:
                self._reader.close()
                self._opened = False

    # --- export -------------------------------------------------------------------------------

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        snap = self._snapshot if self._snapshot is not None else self.sample_once()
        p = self.profile
        const = list(self.labels)
        const_v = list(self.labels.values())
        avail = GaugeMetricFamily(
            p.metric(Signal.GPU_AVAILABLE).name,
            "1 when NVML could be read, 0 with the reason when not (then no other GPU series).",
            labels=[*const, "reason"],
        )
        avail.add_metric([*const_v, snap.reason], 1.0 if snap.available else 0.0)
        yield avail
        if not snap.available:
            return
        dev_labels = [*const, "gpu", "uuid"]

        def key(d: DeviceReading) -> list[str]:
            return [*const_v, str(d.index), d.uuid]

        info = GaugeMetricFamily(
            p.metric(Signal.GPU_INFO).name,
            "Device identity (value 1).",
            labels=[*dev_labels, "name"],
        )
        gpm = GaugeMetricFamily(
            p.metric(Signal.GPU_GPM_AVAILABLE).name,
            "1 when GPM (Hopper+) values are exported for the device, else 0 with the reason.",
            labels=[*dev_labels, "reason"],
        )
        for d in snap.devices:
            info.add_metric([*key(d), d.name], 1.0)
            gpm.add_metric([*key(d), d.gpm_reason or ""], 0.0 if d.gpm_reason else 1.0)
        yield info
        yield gpm

        for signal, attr, doc in _RATIOS:
            fam = GaugeMetricFamily(p.metric(signal).name, doc, labels=dev_labels)
            for d in snap.devices:
                v = getattr(d, attr)
                if v is not None:
                    fam.add_metric(key(d), float(v))
            if fam.samples:
                yield fam

        energy = CounterMetricFamily(
            p.metric(Signal.GPU_ENERGY).name,
            "Energy used since the driver loaded (J).",
            labels=dev_labels,
        )
        events = GaugeMetricFamily(
            p.metric(Signal.GPU_CLOCK_EVENT).name,
            "1 while the clock event reason is active (thermal, power cap, …), else 0.",
            labels=[*dev_labels, "reason"],
        )
        ecc = CounterMetricFamily(
            p.metric(Signal.GPU_ECC_ERRORS).name,
            "Volatile ECC errors since the driver loaded, by type.",
            labels=[*dev_labels, "type"],
        )
        rows = GaugeMetricFamily(
            p.metric(Signal.GPU_REMAPPED_ROWS).name,
            "Remapped memory rows by kind (correctable, uncorrectable, pending, failure).",
            labels=[*dev_labels, "kind"],
        )
        for d in snap.devices:
            if d.energy_j is not None:
                energy.add_metric(key(d), d.energy_j)
            if d.clock_event_reasons is not None:
                for reason, bit in CLOCK_EVENT_REASONS.items():
                    events.add_metric(
                        [*key(d), reason], 1.0 if d.clock_event_reasons & bit else 0.0
                    )
            if d.ecc_corrected is not None:
                ecc.add_metric([*key(d), "corrected"], d.ecc_corrected)
            if d.ecc_uncorrected is not None:
                ecc.add_metric([*key(d), "uncorrected"], d.ecc_uncorrected)
            for kind, n in (d.remapped_rows or {}).items():
                rows.add_metric([*key(d), kind], n)
        yield from (f for f in (energy, events, ecc, rows) if f.samples)

        errors = CounterMetricFamily(
            p.metric(Signal.GPU_SAMPLE_ERRORS).name,
            "NVML calls that failed (other than not-supported), by call.",
            labels=[*const, "call"],
        )
        for call, n in sorted(snap.errors.items()):
            errors.add_metric([*const_v, call], n)
        if errors.samples:
            yield errors
