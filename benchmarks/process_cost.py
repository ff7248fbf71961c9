"""What one command costs as a whole process: CPU seconds (user + system), wall seconds and peak
resident memory, with a time limit and a memory cap.

The command is started by a small runner process (this file run as a script), which waits for it
with ``os.wait4`` and prints the figures as JSON. The runner is there for the peak: Linux carries
the memory of the process that forks (or vforks) a child into the child's ``ru_maxrss`` at exec,
so a command started straight from a benchmark that holds gigabytes would report them as its
own; the runner holds a few MB. It kills the command (its whole session) when it runs past the
time limit or its resident memory passes the cap (read from ``/proc`` every 0.1 s), and says
which. Standard library only: the runner must stay small.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Cost", "measure"]


@dataclass(frozen=True, slots=True)
class Cost:
    """One run. ``rc`` is the exit status (negative: the signal that ended it); ``killed`` says
    why the runner ended it (None: it ended by itself); ``rss_mb`` in 10^6 bytes."""

    rc: int
    cpu_s: float
    wall_s: float
    rss_mb: float
    killed: str | None
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.killed is None

    def first_error(self) -> str:
        """Why it failed, in one line: the runner's reason, else the first line of stderr that
        says something (a traceback's last line)."""
        if self.killed:
            return self.killed
        lines = [ln.strip() for ln in self.stderr.splitlines() if ln.strip()]
        if lines and lines[0].startswith("Traceback"):
            return lines[-1][:300]
        return (lines[0][:300] if lines else "no message") + f" (exit {self.rc})"


def measure(
    argv: list[str],
    *,
    timeout_s: float,
    rss_cap_mb: float,
    cwd: Path | None = None,
    scratch: Path,
) -> Cost:
    """Run ``argv`` through the runner; its stdout and stderr go through files in ``scratch``."""
    out, err = scratch / "stdout", scratch / "stderr"
    job = {
        "argv": argv,
        "timeout_s": timeout_s,
        "rss_cap_mb": rss_cap_mb,
        "cwd": str(cwd) if cwd else None,
        "stdout": str(out),
        "stderr": str(err),
    }
    done = subprocess.run(
        [sys.executable, __file__, json.dumps(job)], capture_output=True, text=True, check=True
    )
    fig = json.loads(done.stdout)
    return Cost(
        rc=fig["rc"],
        cpu_s=fig["cpu_s"],
        wall_s=fig["wall_s"],
        rss_mb=fig["rss_kib"] * 1024 / 1e6,
        killed=fig["killed"],
        stdout=out.read_text(encoding="utf-8", errors="replace"),
        stderr=err.read_text(encoding="utf-8", errors="replace"),
    )


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _run(job: dict[str, Any]) -> dict[str, Any]:
    argv = [str(a) for a in job["argv"]]
    timeout_s = float(job["timeout_s"])
    cap_kib = float(job["rss_cap_mb"]) * 1e6 / 1024
    cwd = job["cwd"]
    with open(str(job["stdout"]), "wb") as out, open(str(job["stderr"]), "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            argv, stdout=out, stderr=err, cwd=None if cwd is None else str(cwd),
            start_new_session=True,
        )  # fmt: skip
    killed: list[str] = []
    finished = threading.Event()

    def watch() -> None:
        while not finished.wait(0.1):
            elapsed = time.perf_counter() - start
            rss = _rss_kib(proc.pid)
            reason = None
            if elapsed > timeout_s:
                reason = f"timed out after {timeout_s:g} s"
            elif rss > cap_kib:
                cap = cap_kib * 1024 / 1e6
                reason = f"killed at the {cap:,.0f} MB resident cap after {elapsed:.0f} s"
            if reason:
                killed.append(reason)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    finished.set()
    watcher.join()
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return {
        "rc": proc.returncode,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "wall_s": wall,
        "rss_kib": usage.ru_maxrss,
        "killed": killed[0] if killed else None,
    }


if __name__ == "__main__":
    print(json.dumps(_run(json.loads(sys.argv[1]))))
