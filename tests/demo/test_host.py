"""The demo's own host figures: each step thread's CPU time and wait, and the lines they make."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fleetwatch.demo.host import HostLoad, HostProbe, engine_threads
from fleetwatch.demo.lines import _host_lines


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_the_probe_reads_each_engine_threads_cpu_time_from_proc() -> None:
    go, done, release = threading.Event(), threading.Event(), threading.Event()

    def work() -> None:
        go.wait()
        total = 0
        for i in range(2_000_000):
            total += i
        done.set()
        release.wait()  # alive while the probe reads it, like an engine's step thread

    t = threading.Thread(target=work, name="engine-replica-0", daemon=True)
    t.start()
    threads = engine_threads(["replica-0", "replica-1"])
    assert set(threads) == {"replica-0"}  # replica-1 has no step thread running
    probe = HostProbe(threads)
    go.set()
    done.wait(timeout=60)
    host = probe.end()
    release.set()
    t.join()
    assert host.cpu_busy["replica-0"] > 0
    assert 0.0 <= host.cpu_wait["replica-0"] <= 1.0
    assert host.load1_mean is not None and host.load1_mean >= 0
    assert host.steal is None or 0.0 <= host.steal <= 1.0
    assert set(host.to_dict()) >= {"cpus", "load1_mean", "load1_max", "steal", "cpu_wait"}


@pytest.mark.parametrize(
    ("waits", "contended"), [((0.5, 0.2, 0.5, 0.6), True), ((0.0,) * 4, False)]
)
def test_the_report_says_host_contention_when_every_replica_waited(waits, contended) -> None:
    host = HostLoad(
        cpus=2,
        load1_start=8.0,
        load1_end=9.0,
        load1_max=9.5,
        load1_mean=8.7,
        steal=0.001,
        cpu_wait={f"replica-{i}": w for i, w in enumerate(waits)},
    )
    assert host.contended is contended
    text = "\n".join(_host_lines(host.to_dict()))
    assert "load 8.7 mean, 9.5 max on 2 CPUs; steal 0.1%" in text
    assert "replica-1 20%" in text or not contended
    assert ("host contention: every replica waited for a CPU together" in text) is contended
