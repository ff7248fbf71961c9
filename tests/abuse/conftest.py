"""Helpers of the abuse suite: `fleetwatch engine serve` as a real process on loopback, raw
sockets, and small engines in-process.

Every test here is bounded: counts are fixed (scaled to a 2-core box and its file limit where the
issue names larger ones), every wait has a deadline, traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = "import typer; from engine_probe.serve.cli import serve; typer.run(serve)"


def wait_until(cond: Any, timeout_s: float, what: str, poll_s: float = 0.01) -> None:
    """Poll ``cond()`` until true; fail naming ``what`` after ``timeout_s`` (a deadline, not a
    measured time)."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(poll_s)


class ServeProcess:
    """One `engine serve` process: its URL, its log (stdout and stderr, one file), its exit."""

    def __init__(self, log: Path, args: list[str], env: dict[str, str] | None = None) -> None:
        self.log = log
        full_env = dict(os.environ)
        full_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), full_env.get("PYTHONPATH", "")) if p
        )
        full_env.update(env or {})
        self._log_fh = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, "--port", "0", "--num-blocks", "128", *args],
            stdout=self._log_fh,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=full_env,
        )
        self.url = ""
        wait_until(self._started, 120, "the server printing its URL", poll_s=0.05)
        self.port = int(self.url.rsplit(":", 1)[1])

    def _started(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"server exited early: {self.log.read_text()[-2000:]}")
        for line in self.log.read_text().splitlines():
            if line.startswith("serving ") and " on http://" in line:
                self.url = line.split(" on ")[1].split()[0]
                return True
        return False

    def get(self, path: str, timeout_s: float = 10.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=timeout_s) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def post(self, path: str, body: dict[str, Any], timeout_s: float = 30.0) -> tuple[int, bytes]:
        req = urllib.request.Request(
            f"{self.url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status, r.read()

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        from prometheus_client.parser import text_string_to_metric_families

        _, body = self.get("/metrics")
        for fam in text_string_to_metric_families(body.decode()):
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in (labels or {}).items()):
                    return float(s.value)
        return None

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout_s: float) -> int:
        return self.proc.wait(timeout=timeout_s)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
        self._log_fh.close()


@pytest.fixture
def serve_process(tmp_path: Path) -> Iterator[Any]:
    """A factory of `engine serve` processes (killed at teardown)."""
    started: list[ServeProcess] = []

    def start(*args: str, env: dict[str, str] | None = None, name: str = "serve") -> ServeProcess:
        p = ServeProcess(tmp_path / f"{name}-{len(started)}.log", list(args), env)
        started.append(p)
        return p

    yield start
    for p in started:
        p.stop()


def raw_request(port: int, data: bytes, timeout_s: float = 10.0) -> bytes:
    """Send ``data`` on a fresh connection and read until the server closes it (or times out)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(data)
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def small_engine(**engine_options: Any) -> Any:
    """A tiny reference engine on the CPU (random weights)."""
    from engine_probe.engine import EngineConfig, LLMEngine, ModelConfig

    model = ModelConfig(
        num_layers=2,
        hidden_size=64,
        intermediate_size=128,
        num_heads=4,
        num_kv_heads=2,
        vocab_size=512,
        max_position_embeddings=4096,
    )
    options: dict[str, Any] = {"num_blocks": 256, "max_num_seqs": 16, "device": "cpu"}
    options.update(engine_options)
    return LLMEngine(model, EngineConfig(**options))


class Tools:
    """The helpers above as a fixture (importlib mode: tests cannot import conftest)."""

    wait_until = staticmethod(wait_until)
    raw_request = staticmethod(raw_request)
    small_engine = staticmethod(small_engine)


@pytest.fixture
def tools() -> type[Tools]:
    return Tools
