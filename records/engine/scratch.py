"""An engine's temporary folder under ``TMPDIR`` (its spill files, the JSON lines' database
file): removed when the engine closes, and where its process was killed before that, by the
next engine that opens.

A live engine holds an exclusive ``flock`` on its folder's ``held`` file, which the kernel lets
go however the process ends (SIGKILL, the OOM killer, a SIGTERM left to its default action). The
file is locked under another name and only then renamed ``held``, so a sweep that finds ``held``
unlocked knows its engine is gone, and removes the folder while holding the lock itself. A
folder with no ``held`` (being made, or not an engine's) and one of another user's (its lock
file not ours to open) are left alone.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref

try:
    import fcntl
except ImportError:  # no flock: folders are removed on close only
    fcntl = None  # type: ignore[assignment]

__all__ = ["HELD", "PREFIX", "Scratch", "sweep"]

PREFIX = "fleetwatch-duckdb-"
"""The name of every engine's folder begins so."""
HELD = "held"
"""The file of an engine's folder it holds locked while it lives."""


def _locked(folder: str) -> int | None:
    """A descriptor holding ``folder``'s ``HELD`` file locked (None without ``flock``)."""
    if fcntl is None:
        return None
    part = os.path.join(folder, HELD + ".new")
    fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(part, os.path.join(folder, HELD))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _remove(folder: str, fd: int | None) -> None:
    """Remove ``folder``, then let its lock go (a sweep finding it free finds no folder)."""
    shutil.rmtree(folder, ignore_errors=True)
    if fd is not None:
        os.close(fd)


def sweep(root: str | None = None) -> list[str]:
    """Remove the folders under ``root`` (``TMPDIR``) of engines whose process is gone; the
    folders removed."""
    if fcntl is None:
        return []
    root = tempfile.gettempdir() if root is None else root
    try:
        entries = [e for e in os.scandir(root) if e.name.startswith(PREFIX)]
    except OSError:
        return []
    removed = []
    for entry in entries:
        try:
            fd = os.open(os.path.join(entry.path, HELD), os.O_RDWR)
        except OSError:  # none (being made, not an engine's) or not ours
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its engine lives
            os.close(fd)
            continue
        _remove(entry.path, fd)
        removed.append(entry.path)
    return removed


class Scratch:
    """An engine's folder, made after a ``sweep`` and held until ``cleanup`` (or the object's
    collection, or the interpreter's exit)."""

    def __init__(self) -> None:
        sweep()
        self.name = tempfile.mkdtemp(prefix=PREFIX)
        try:
            fd = _locked(self.name)
        except BaseException:
            shutil.rmtree(self.name, ignore_errors=True)
            raise
        self._finalizer = weakref.finalize(self, _remove, self.name, fd)

    def cleanup(self) -> None:
        self._finalizer()
