"""An engine's temporary folder under ``TMPDIR`` (its spill files, the JSON lines' database
file): removed when the engine closes, and where its process was killed before that, by the
next engine that opens.

A live engine holds an exclusive ``flock`` on its folder's ``held`` file, which the kernel lets
go however the process ends (SIGKILL, the OOM killer, a SIGTERM left to its default action). The
file is locked under another name and only then renamed ``held``, so a sweep that finds ``held``
unlocked knows its engine is gone, and removes the folder while holding the lock itself. Left
alone: a folder with no ``held`` (being made, not an engine's, or made where ``flock`` fails:
some NFS, Lustre and FUSE mounts; it is removed on close only), one not a directory of this
user's own, and this process's own engines' (over NFS ``flock`` is a lock per process, which a
second descriptor of the same process would take). A process killed between making its folder
and naming ``held``, or while removing it, leaves what no sweep removes.
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
_MINE: set[str] = set()
"""The folders of this process's live engines."""


def _locked(folder: str) -> int | None:
    """A descriptor holding ``folder``'s ``HELD`` file locked; None without ``flock`` or where
    the file system refuses it (no ``HELD`` then: the folder is never swept)."""
    if fcntl is None:
        return None
    part = os.path.join(folder, HELD + ".new")
    fd = os.open(part, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    try:
        os.rename(part, os.path.join(folder, HELD))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _remove(folder: str, fd: int | None) -> None:
    """Remove ``folder``, then let its lock go (a sweep finding it free finds no folder)."""
    shutil.rmtree(folder, ignore_errors=True)
    _MINE.discard(folder)
    if fd is not None:
        os.close(fd)


def _stale(entry: os.DirEntry[str]) -> bool:
    """Whether ``entry`` may be a dead engine's folder: a directory, not a link, of this user's,
    not one of this process's engines'."""
    try:
        return (
            entry.name.startswith(PREFIX)
            and entry.path not in _MINE
            and entry.is_dir(follow_symlinks=False)
            and entry.stat(follow_symlinks=False).st_uid == os.getuid()
        )
    except OSError:
        return False


def sweep() -> None:
    """Remove the folders under ``TMPDIR`` of engines whose process is gone."""
    if fcntl is None:
        return
    try:
        with os.scandir(tempfile.gettempdir()) as listing:
            entries = [e for e in listing if _stale(e)]
    except OSError:
        return
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK
    for entry in entries:
        try:
            fd = os.open(os.path.join(entry.path, HELD), flags)
        except OSError:  # none (being made, not an engine's) or not ours
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its engine lives
            os.close(fd)
            continue
        _remove(entry.path, fd)


class Scratch:
    """An engine's folder, made after a ``sweep`` and held until ``cleanup`` (or the object's
    collection, or the interpreter's exit)."""

    def __init__(self) -> None:
        sweep()
        self.name = tempfile.mkdtemp(prefix=PREFIX)
        _MINE.add(self.name)
        try:
            fd = _locked(self.name)
        except BaseException:
            _remove(self.name, None)
            raise
        self._finalizer = weakref.finalize(self, _remove, self.name, fd)

    def cleanup(self) -> None:
        self._finalizer()
