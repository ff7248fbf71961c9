"""A real Prometheus server on 127.0.0.1 over history backfilled from OpenMetrics text.

``promtool tsdb create-blocks-from openmetrics`` writes the samples at their own timestamps, so
queries evaluated at a fixed time are deterministic.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["free_port", "ramp", "serving"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ramp(series: str, per_step: float, t0: int, steps: int, step_s: int = 15) -> list[str]:
    """OpenMetrics lines of a counter (or a cumulative bucket) growing ``per_step`` every
    ``step_s`` seconds from 0 at ``t0``, rounded to whole counts: ``steps`` samples."""
    return [f"{series} {round(k * per_step)} {t0 + step_s * k}" for k in range(steps)]


@contextmanager
def serving(directory: Path, openmetrics: str, promtool: Path, prometheus: Path) -> Iterator[str]:
    """The base URL of a Prometheus serving ``openmetrics`` (ending ``# EOF``) from
    ``directory``; stopped on exit."""
    (directory / "in.om").write_text(openmetrics)
    subprocess.run(
        [str(promtool), "tsdb", "create-blocks-from", "openmetrics", "in.om", "data"],
        cwd=directory,
        check=True,
        capture_output=True,
    )
    (directory / "prometheus.yml").write_text("global: {scrape_interval: 1h}\n")
    port = free_port()
    proc = subprocess.Popen(
        [
            str(prometheus),
            "--config.file=prometheus.yml",
            "--storage.tsdb.path=data",
            "--storage.tsdb.retention.time=100y",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        cwd=directory,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # blocks until the server says it is ready
            if "ready to receive web requests" in line:
                break
        else:
            raise RuntimeError("prometheus exited before it was ready")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
