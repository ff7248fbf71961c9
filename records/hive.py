"""The layout of a compacted record dataset: ``date=YYYY-MM-DD/hour=HH/replica=<name>/`` folders
(hive partitioning, by each record's ``finished_s`` in UTC), and the one writer that may change it.

A partition folder holds the records of one replica that finished within one UTC hour, so its
name alone says how old its records are (``hour_span``): pruning needs no file opened. The
replica value is made safe for a path and bounded: bytes outside ``[A-Za-z0-9_.-]`` (and a
leading ``.``, which would hide the folder) are percent-encoded as Hive does, and a value longer
than ``MAX_REPLICA_CHARS`` keeps its start and a hash of the whole. Records keep their own
``replica`` column; the folder name is for people and for engines that read hive partitions.

State lives in the hidden ``.compact/`` folder (which every dataset reader skips): the journal
of the batch being compacted, the manifest of sources compacted but kept, and ``lock``, which one
process at a time holds (``writer_lock``) while it compacts or prunes; the kernel drops it when
that process dies, however it dies.
"""

from __future__ import annotations

import calendar
import contextlib
import datetime as dt
import errno
import fcntl
import hashlib
import json
import math
import os
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, Final, TypeVar

from fleetwatch.core.records.schema import RecordError

if TYPE_CHECKING:
    from fleetwatch.records.filters import RecordFilter

__all__ = [
    "MAX_REPLICA_CHARS",
    "STATE_DIR",
    "hour_span",
    "load_journal",
    "partition_dir",
    "pruned",
    "replica_value",
    "writer_lock",
]

STATE_DIR: Final = ".compact"
"""The hidden folder of a compacted dataset's state (journal, manifest, lock)."""
_J = TypeVar("_J")


def load_journal(path: Path, kind: str, build: Callable[[dict[str, Any]], _J]) -> _J:
    """A journal of the state folder, ``build`` from its JSON; one that cannot be read or
    built is a ``RecordError`` naming it (``kind``: what it journals)."""
    try:
        return build(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError) as exc:
        raise RecordError(
            f"not a {kind} journal ({type(exc).__name__}: {exc}); move it away to go on",
            path=str(path),
        ) from None


MAX_REPLICA_CHARS: Final = 96
"""Longest ``replica=`` value written: longer ones keep a prefix and a hash of the whole."""
_SAFE: Final = re.compile(r"[A-Za-z0-9_.-]")
_DATE: Final = re.compile(r"date=(\d{4})-(\d{2})-(\d{2})")
_HOUR: Final = re.compile(r"hour=(\d{2})")
_EPOCH_ORDINAL: Final = dt.date(1970, 1, 1).toordinal()


def replica_value(replica: str) -> str:
    """``replica`` as a folder name's value: percent-encoded outside ``[A-Za-z0-9_.-]`` (a
    leading ``.`` too), at most ``MAX_REPLICA_CHARS`` characters.

    >>> replica_value("10.0.0.7:8000/dp1")
    '10.0.0.7%3A8000%2Fdp1'
    """
    out = "".join(
        ch if _SAFE.fullmatch(ch) and not (i == 0 and ch == ".") else _escape(ch)
        for i, ch in enumerate(replica)
    )
    if len(out) <= MAX_REPLICA_CHARS:
        return out
    digest = hashlib.sha256(replica.encode("utf-8")).hexdigest()[:16]
    head = out[: MAX_REPLICA_CHARS - len(digest) - 1]
    cut = head.rfind("%", len(head) - 2)  # never half an escape
    return f"{head if cut == -1 else head[:cut]}~{digest}"


def _escape(ch: str) -> str:
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8"))


def partition_dir(finished_s: float, replica: str) -> str:
    """The partition folder (relative, ``/``-separated) of a record that finished at
    ``finished_s`` (Unix seconds) on ``replica``.

    >>> partition_dir(1764583200.5, "a")
    'date=2025-12-01/hour=10/replica=a'
    """
    seconds = math.floor(finished_s)
    days, rest = divmod(seconds, 86400)
    try:
        day = dt.date.fromordinal(_EPOCH_ORDINAL + days)
    except (ValueError, OverflowError):
        raise RecordError(
            f"finished_s {finished_s:.6g} has no calendar date to partition by", field="finished_s"
        ) from None
    return f"date={day.isoformat()}/hour={rest // 3600:02d}/replica={replica_value(replica)}"


def hour_span(parts: Sequence[str]) -> tuple[float, float] | None:
    """The Unix seconds ``[start, end)`` that a partition folder's records finished in, from
    the ``date=`` and ``hour=`` names among ``parts`` (a folder's path components); a day when
    no ``hour=`` follows the date; None when no ``date=`` name is there."""
    day: tuple[int, int, int] | None = None
    hour: int | None = None
    for part in parts:
        if (m := _DATE.fullmatch(part)) is not None:
            day = (int(m[1]), int(m[2]), int(m[3]))
        elif (m := _HOUR.fullmatch(part)) is not None and day is not None:
            hour = int(m[1])
    if day is None:
        return None
    try:
        dt.date(*day)
    except ValueError:
        return None  # date=2026-13-40: not a partition name after all
    if hour is not None and hour > 23:
        return None
    start = float(calendar.timegm((*day, hour or 0, 0, 0)))
    return (start, start + 3600.0) if hour is not None else (start, start + 86400.0)


P = TypeVar("P", bound=PurePath)


def pruned(files: Sequence[P], where: RecordFilter | None) -> list[P]:
    """``files`` less those in partition folders ``where`` cannot match: a ``date=``/``hour=``
    span wholly outside its window on ``finished_s``, or a ``replica=`` folder of none of its
    replicas. Only whole folders are judged by name; the filter still reads every row kept."""
    if where is None:
        return list(files)
    wanted = {replica_value(r) for r in where.replicas}
    out = []
    for path in files:
        folders = path.parts[:-1]
        span = hour_span(folders)
        if span is not None:
            if where.since_s is not None and span[1] <= where.since_s:
                continue
            if where.until_s is not None and span[0] >= where.until_s:
                continue
        if wanted:
            named = [p[len("replica=") :] for p in folders if p.startswith("replica=")]
            if named and named[-1] not in wanted:
                continue
        out.append(path)
    return out


@contextlib.contextmanager
def writer_lock(state: Path, *, dataset: str, command: str) -> Iterator[None]:
    """Hold ``<state>/lock`` (``state``: a dataset's ``.compact/``, created if missing) while
    changing ``dataset``; a ``RecordError`` when another process holds it (``command`` names what
    was refused)."""
    state.mkdir(parents=True, exist_ok=True)
    fd = os.open(state / "lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise RecordError(
                f"another compact or prune is changing this dataset now ({command} refused; "
                f"it holds {state / 'lock'})",
                path=dataset,
            ) from None
        yield
    finally:
        os.close(fd)
