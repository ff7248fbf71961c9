"""Shared by the record tests: `fleetwatch` commands as real processes that a test can SIGKILL at a
chosen moment (forked from a warm parent, ``zygote.py``, so each starts in milliseconds), and a
scratch folder in memory for the tests that run them many times."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple, Protocol

import pytest

ROOT = Path(__file__).resolve().parents[2]


class Ran(NamedTuple):
    status: int
    """The exit status, or -9 when the process was killed."""
    output: str
    """What it printed, stdout and stderr together."""


class Runs(Protocol):
    def __call__(
        self,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        kill_after_s: float | None = None,
    ) -> Ran: ...


@pytest.fixture(scope="session")
def fleetwatch_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    """Run ``fleetwatch <argv>`` as its own process, optionally SIGKILLed after a delay."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    zygote = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("zygote.py"))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert zygote.stdin is not None and zygote.stdout is not None
    assert zygote.stdout.readline().strip() == "ready"
    logs = tmp_path_factory.mktemp("runs")
    count = 0

    def run(
        argv: list[str], *, env: dict[str, str] | None = None, kill_after_s: float | None = None
    ) -> Ran:
        nonlocal count
        count += 1
        log = logs / f"run-{count}.log"
        request = {"argv": argv, "env": env or {}, "log": str(log), "kill_after_s": kill_after_s}
        assert zygote.stdin is not None and zygote.stdout is not None
        zygote.stdin.write(json.dumps(request) + "\n")
        zygote.stdin.flush()
        answer = json.loads(zygote.stdout.readline())
        return Ran(int(answer["status"]), log.read_text())

    try:
        yield run
    finally:
        zygote.stdin.close()
        zygote.wait(30)


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """An empty folder on tmpfs (``/dev/shm``) where there is one, else ``tmp_path``. A kill test
    is about a process stopped mid-step, which the page cache survives; on a disk whose every
    fsync and unlink waits on the device its runs would cost seconds each."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="fleetwatch-test-", dir=shm))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
