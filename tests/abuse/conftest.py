"""The abuse suite: what a slow, hostile or unlucky world does to fleetwatch, each bounded.

- ``test_connection_limits``: slow connections against the cap (20,000 opened, /health < 1 s, log
  < 1 MB), late request heads and bodies (408), idle keep-alive, oversized headers (400), the fast
  503 beyond the cap, quiet accept-error logging, the idempotency table's byte bound and expiry;
- ``test_gauges_follow_the_engine``: /metrics running/waiting/KV equal /health after seeded abort
  storms;
- ``test_record_loss``: SIGKILL from outside loses only records within the documented bound;
  shutdown signals lose none; orphan temporary files; directory fsync;
- ``test_shutdown_deadline``: a black-hole OTLP collector; detach bounded, SIGTERM exit < 10 s;
- ``test_bounded_input``: YAML alias bombs, implausible record times, long label values, Parquet
  checked as JSON lines are.

Every test here is bounded: counts are fixed (scaled to a 2-core box and its file limit where the
issue names larger ones), every wait has a deadline, each test has a timeout
(``ABUSE_TIMEOUT_S``), traffic stays on 127.0.0.1, randomness is seeded. Helpers: `fleetwatch
engine serve` as a real process (or forked from a warm parent), raw sockets, small engines.
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
ABUSE_TIMEOUT_S = 180
"""Per-test limit (pytest-timeout), well above what each test takes on a 2-core box."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.timeout(ABUSE_TIMEOUT_S))


LAUNCH = (
    "import typer; from fleetwatch.engine_probe.serve.command.cli import serve; typer.run(serve)"
)


def wait_until(cond: Any, timeout_s: float, what: str, poll_s: float = 0.01) -> None:
    """Poll ``cond()`` until true; fail naming ``what`` after ``timeout_s`` (a deadline, not a
    measured time)."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s} s")
        time.sleep(poll_s)


class _Server:
    """What the tests need of a running `engine serve`: URL, log, requests, signals."""

    log: Path
    url: str = ""
    port: int = 0

    def _alive(self) -> bool:
        raise NotImplementedError

    def _wait_started(self) -> None:
        wait_until(self._started, 120, "the server printing its URL", poll_s=0.02)
        self.port = int(self.url.rsplit(":", 1)[1])

    def _started(self) -> bool:
        text = self.log.read_text() if self.log.exists() else ""
        if not self._alive():
            raise AssertionError(f"server exited early: {text[-2000:]}")
        for line in text.splitlines():
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


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


class ServeProcess(_Server):
    """One `engine serve` process: its URL, its log (stdout and stderr, one file), its exit."""

    def __init__(self, log: Path, args: list[str], env: dict[str, str] | None = None) -> None:
        self.log = log
        self._log_fh = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, "--port", "0", "--num-blocks", "256", *args],
            stdout=self._log_fh,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env=_env(env),
        )
        self._wait_started()

    def _alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout_s: float) -> int:
        return self.proc.wait(timeout=timeout_s)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
        self._log_fh.close()


class ForkedServe(_Server):
    """An `engine serve` forked by ``forkserver.py`` (started in milliseconds); known by pid."""

    def __init__(self, zygote: subprocess.Popen[str], log: Path, args: list[str]) -> None:
        self.log = log
        assert zygote.stdin is not None and zygote.stdout is not None
        zygote.stdin.write(json.dumps([str(log), "--port", "0", "--num-blocks", "256", *args]))
        zygote.stdin.write("\n")
        zygote.stdin.flush()
        self.pid = int(zygote.stdout.readline())
        self._wait_started()

    def _alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def wait(self, timeout_s: float) -> None:
        wait_until(lambda: not self._alive(), timeout_s, f"process {self.pid} ending")

    def stop(self) -> None:
        if self._alive():
            os.kill(self.pid, signal.SIGKILL)
            self.wait(30)


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


@pytest.fixture(scope="module")
def forked_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A factory of forked `engine serve` processes (all killed at teardown)."""
    zygote = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("forkserver.py"))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_env(),
    )
    assert zygote.stdout is not None and zygote.stdout.readline().strip() == "ready"
    logs = tmp_path_factory.mktemp("forked")
    started: list[ForkedServe] = []

    def start(*args: str) -> ForkedServe:
        p = ForkedServe(zygote, logs / f"serve-{len(started)}.log", list(args))
        started.append(p)
        return p

    try:
        yield start
    finally:
        for p in started:
            p.stop()
        zygote.kill()
        zygote.wait(30)


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
    from fleetwatch.engine_probe.engine import EngineConfig, LLMEngine, ModelConfig

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
