"""Run a real Prometheus server on loopback: scrape given targets, evaluate given rule files.

Used by ``fleetwatch demo --prometheus`` and the end-to-end test. Prometheus is Debian's
``prometheus`` package; nothing here fakes it.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

__all__ = ["PrometheusError", "PrometheusServer", "ScrapeTarget", "free_port"]


class PrometheusError(RuntimeError):
    """The Prometheus server could not be started or answered an error."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    """One ``/metrics`` endpoint to scrape, with extra target labels (e.g. ``replica``)."""

    address: str
    labels: Mapping[str, str] = field(default_factory=dict)


class PrometheusServer:
    """A Prometheus process bound to 127.0.0.1 with its own temporary TSDB.

    >>> # with PrometheusServer(workdir, [ScrapeTarget("127.0.0.1:8001")], ["rules.yaml"]) as p:
    >>> #     p.query("up")
    """

    def __init__(
        self,
        workdir: Path,
        targets: Sequence[ScrapeTarget],
        rule_files: Sequence[Path] = (),
        *,
        scrape_interval_s: float = 1.0,
        evaluation_interval_s: float = 1.0,
        binary: str | None = None,
        port: int | None = None,
        job: str = "fleetwatch",
    ) -> None:
        found = binary or shutil.which("prometheus")
        if found is None:
            raise PrometheusError(
                "prometheus not found on PATH: install Debian's prometheus package "
                "(apt-get install prometheus)"
            )
        self.binary = found
        self.workdir = Path(workdir)
        self.targets = list(targets)
        self.rule_files = [Path(p).resolve() for p in rule_files]
        self.scrape_interval_s = scrape_interval_s
        self.evaluation_interval_s = evaluation_interval_s
        self.port = port or free_port()
        self.job = job
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self) -> dict[str, Any]:
        """The prometheus.yml this server runs with."""
        return {
            "global": {
                "scrape_interval": f"{self.scrape_interval_s:g}s",
                "evaluation_interval": f"{self.evaluation_interval_s:g}s",
            },
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [
                {
                    "job_name": self.job,
                    "scrape_interval": f"{self.scrape_interval_s:g}s",
                    "static_configs": [
                        {"targets": [t.address], "labels": dict(t.labels)} for t in self.targets
                    ],
                }
            ],
        }

    def start(self, *, timeout_s: float = 30.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config_path = self.workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        log = open(self.workdir / "prometheus.log", "wb")  # noqa: SIM115 - lives as long as the process
        self._proc = subprocess.Popen(
            [
                self.binary,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1d",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = (self.workdir / "prometheus.log").read_text(errors="replace")[-2000:]
                raise PrometheusError(f"prometheus exited with {self._proc.returncode}: {tail}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)
        self.stop()
        raise PrometheusError(f"prometheus did not become ready on {self.url} in {timeout_s:g} s")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=10) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise PrometheusError(f"{path}: HTTP {exc.code}: {exc.read()[:500]!r}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{path}: {body.get('error', body)}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; returns the result vector (``metric`` and ``value`` per element)."""
        data = self._get("/api/v1/query", {"query": expr})
        result: list[dict[str, Any]] = data["result"]
        return result

    def query_range(
        self, expr: str, start_s: float, end_s: float, step_s: float = 1.0
    ) -> list[dict[str, Any]]:
        """Range query; returns the result matrix (``metric`` and ``values`` per series)."""
        data = self._get(
            "/api/v1/query_range",
            {
                "query": expr,
                "start": f"{start_s:.3f}",
                "end": f"{end_s:.3f}",
                "step": f"{step_s:g}",
            },
        )
        result: list[dict[str, Any]] = data["result"]
        return result

    def targets_up(self) -> dict[str, bool]:
        """Scrape health per target address, from ``/api/v1/targets``."""
        data = self._get("/api/v1/targets")
        return {
            str(t["discoveredLabels"].get("__address__", t["scrapeUrl"])): t["health"] == "up"
            for t in data["activeTargets"]
        }

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (pending and firing) as the HTTP API lists them."""
        data = self._get("/api/v1/alerts")
        alerts: list[dict[str, Any]] = data["alerts"]
        return alerts

    def rule_groups(self) -> list[dict[str, Any]]:
        data = self._get("/api/v1/rules")
        groups: list[dict[str, Any]] = data["groups"]
        return groups

    def wait_for(
        self,
        predicate: Callable[[], bool],
        *,
        timeout_s: float,
        poll_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> bool:
        """Poll ``predicate`` until it is true or ``timeout_s`` passes; return whether it held."""
        deadline = clock() + timeout_s
        while clock() < deadline:
            if predicate():
                return True
            sleep(poll_s)
        return predicate()
