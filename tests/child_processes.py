"""Servers the integration lanes start as child processes, stopped by PID: SIGTERM, a wait, then
SIGKILL for the child and for whatever of its process tree is left. Nothing is matched by name."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["alive", "descendants", "free_port", "stop_tree"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _children(pid: int) -> list[int]:
    """PIDs whose parent is ``pid`` (read from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, children first."""
    out: list[int] = []
    for child in _children(pid):
        out.append(child)
        out.extend(descendants(child))
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_tree(
    proc: subprocess.Popen[bytes], timeout_s: float = 30.0, grace_s: float = 10.0
) -> None:
    """SIGTERM ``proc`` and wait ``timeout_s`` for it (SIGKILL after), then give what was below it
    ``grace_s`` to end on its own before SIGKILLing each by PID."""
    tree = descendants(proc.pid)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + grace_s
    for pid in tree:
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
