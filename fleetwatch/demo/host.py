"""The demo's own machine while the fleet ran: load average, CPU steal, and how long each
replica's step thread waited for a CPU.

The demo's four replicas share one process and the machine's CPUs; a laptop or a busy CI runner
slows them all together. Linux says how much: ``/proc/loadavg`` (runnable tasks), ``/proc/stat``
(``steal``: time a hypervisor gave this VM's CPUs to someone else) and, per thread,
``/proc/self/task/<tid>/schedstat`` (nanoseconds on a CPU, nanoseconds runnable but waiting).
A replica's ``cpu_wait`` is its step thread's wait over the wall time of the traffic; it goes to
the detector (``FleetTable.cpu_wait``), which names host contention only where a replica's own
wait explains how far it is off its peers.

Where ``/proc`` is missing (not Linux) every figure is None and nothing is judged on it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["HOST_BUSY", "HostLoad", "HostProbe", "engine_threads"]

HOST_BUSY = 0.10
"""Median step-thread CPU wait from which the demo reports host contention (as the detector's
``CPU_WAIT``)."""

_PROC = Path("/proc")


def engine_threads(replicas: list[str]) -> dict[str, int]:
    """Native thread id of each replica's engine step thread (``engine-<replica>``)."""
    names = {f"engine-{r}": r for r in replicas}
    return {
        names[t.name]: t.native_id
        for t in threading.enumerate()
        if t.name in names and t.native_id is not None
    }


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _cpu_stat() -> tuple[float, float] | None:
    """(total jiffies, steal jiffies) of all CPUs."""
    text = _read(_PROC / "stat")
    if not text:
        return None
    parts = text.splitlines()[0].split()
    vals = [float(v) for v in parts[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
    return sum(vals[:8]), vals[7] if len(vals) > 7 else 0.0


def _load1() -> float | None:
    text = _read(_PROC / "loadavg")
    return float(text.split()[0]) if text else None


def _schedstat(tid: int) -> tuple[float, float] | None:
    text = _read(_PROC / "self" / "task" / str(tid) / "schedstat")
    if not text:
        return None
    on, wait = text.split()[:2]
    return float(on) / 1e9, float(wait) / 1e9


@dataclass(frozen=True, slots=True)
class HostLoad:
    """What the machine was doing while the fleet served its traffic."""

    cpus: int
    load1_start: float | None
    load1_end: float | None
    load1_max: float | None
    load1_mean: float | None
    steal: float | None
    """Share of all CPU time stolen by the hypervisor over the traffic (0..1)."""
    cpu_wait: Mapping[str, float] = field(default_factory=dict)
    """Per replica: its step thread's time runnable but waiting for a CPU, over the wall time."""
    cpu_busy: Mapping[str, float] = field(default_factory=dict)
    """Per replica: its step thread's time on a CPU, over the wall time."""

    @property
    def contended(self) -> bool:
        """Every replica slowed together: the median replica waited ``HOST_BUSY`` or more."""
        waits = sorted(self.cpu_wait.values())
        return bool(waits) and waits[len(waits) // 2] >= HOST_BUSY

    def to_dict(self) -> dict[str, Any]:
        return {
            "cpus": self.cpus,
            "load1_start": self.load1_start,
            "load1_end": self.load1_end,
            "load1_max": self.load1_max,
            "load1_mean": self.load1_mean,
            "steal": self.steal,
            "cpu_wait": dict(self.cpu_wait),
            "cpu_busy": dict(self.cpu_busy),
            "contended": self.contended,
        }


class HostProbe:
    """Start with ``begin`` once the engine threads run, sample the load each second with
    ``sample`` (an asyncio task may call it), ``end`` after the traffic."""

    def __init__(self, threads: Mapping[str, int]) -> None:
        self._threads = dict(threads)
        self._t0 = time.monotonic()
        self._stat0 = _cpu_stat()
        self._sched0 = {r: _schedstat(t) for r, t in self._threads.items()}
        self._loads: list[float] = []
        self.sample()

    def sample(self) -> None:
        v = _load1()
        if v is not None:
            self._loads.append(v)

    def end(self) -> HostLoad:
        self.sample()
        wall = max(time.monotonic() - self._t0, 1e-9)
        stat1 = _cpu_stat()
        steal = None
        if self._stat0 is not None and stat1 is not None and stat1[0] > self._stat0[0]:
            steal = (stat1[1] - self._stat0[1]) / (stat1[0] - self._stat0[0])
        wait: dict[str, float] = {}
        busy: dict[str, float] = {}
        for r, tid in self._threads.items():
            a, b = self._sched0.get(r), _schedstat(tid)
            if a is not None and b is not None:
                busy[r] = (b[0] - a[0]) / wall
                wait[r] = (b[1] - a[1]) / wall
        loads = self._loads
        return HostLoad(
            cpus=os.cpu_count() or 1,
            load1_start=loads[0] if loads else None,
            load1_end=loads[-1] if loads else None,
            load1_max=max(loads) if loads else None,
            load1_mean=sum(loads) / len(loads) if loads else None,
            steal=steal,
            cpu_wait=wait,
            cpu_busy=busy,
        )
