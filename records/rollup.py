"""Rolling up a closed hour: the parts `records compact` left in one partition folder, one a run
(every five minutes from cron: twelve an hour and replica), merged into one file once the hour
has ended ``ROLLUP_AFTER_S`` ago, so a kept dataset holds a file per hour and replica, not a
dozen small ones (an hour of 200 replicas: 200 files, not 2,400; reading the 2,400 cost `fleet
tail` twice the CPU: docs/records-at-scale.md, "Keeping records").

A partition is rolled up when it holds two or more stamped parts (``part-*.parquet`` whose footer
vouches for its rows: ``records compact`` wrote them) and nothing else, and at most
``ROLLUP_MAX_ROWS`` rows (memory: one partition). A run rolls up the newest hours first, up to
``ROLLUP_ROWS_PER_RUN`` rows; a partition that cannot be rolled up (a part that does not read) is
left in parts, with a warning, and the others are rolled up. The steps, each durable before the next, with
the stages the kill hook knows (``ROLLUP_STAGES``):

1. the journal ``<state>/rollup/<batch>.json`` names the partition, its parts (name, size, mtime)
   and the file they become. ``rollup-after-journal``
2. the parts' rows, in ``finished_s`` order, are written to that file in a hidden folder beside
   the partition (``.rollup-<batch>``). ``rollup-after-write``
3. the hidden folder and the partition folder are exchanged in one ``renameat2(RENAME_EXCHANGE)``:
   the partition then holds the one file, the hidden folder the parts. ``rollup-after-exchange``
4. the hidden folder is removed, then the journal.

A reader listing the partition sees the parts or the one file, never both and never neither
(every records command, and Spark, leave hidden folders out; a glob of DuckDB's own does not, and
finds a killed roll-up's parts in its hidden folder until the next run removes them). A reader
that listed the parts before the exchange and opens one after finds it gone, as after `records
prune`: ``records validate`` leaves it out, an analysis names it; run it again. A run
killed at any moment leaves a journal that the next run settles: the partition holding the
journal's file means the exchange was made (the hidden folder, holding the parts, is removed),
otherwise the hidden folder is the unfinished file's (removed; the parts were never touched).
Where the file system cannot exchange two folders (``renameat2`` missing or refused), nothing is
rolled up and the parts stay as they are; object storage (no rename) is not rolled up either, nor
a folder compacted with a state folder of its own (``--state``): only the destination's own lock
(``DEST/.compact``) makes sure no other run adds a part to a partition while it is rolled up.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from fleetwatch.core.atomic import atomic_write_text, fsync_directory
from fleetwatch.core.records.schema import FIELDS, RecordError
from fleetwatch.core.records.write import CHECKED_KEY, record_schema
from fleetwatch.records.hive import hour_span, load_journal

__all__ = [
    "ROLLUP_AFTER_S",
    "ROLLUP_MAX_ROWS",
    "ROLLUP_ROWS_PER_RUN",
    "ROLLUP_STAGES",
    "SHARED_MARKER",
    "RolledUp",
    "roll_up",
    "settle_rollups",
]

ROLLUP_AFTER_S: Final = 900.0
"""How long after its hour ends a partition is rolled up: segments sealed late in the hour are
compacted by then (a part compacted later still, from a host that was down, is rolled up with
the hour's file on the next run)."""
ROLLUP_MAX_ROWS: Final = 500_000
"""A partition holding more rows is left as it is: its parts are large already (an hour of a
replica at 139 requests a second), and merging them holds them all in memory (1 M rows rolled up
in 751 MB peak, 500,000 in 477 MB: about what compacting a batch of 250,000 takes)."""
ROLLUP_STAGES: Final = ("rollup-after-journal", "rollup-after-write", "rollup-after-exchange")
"""The moments of a roll-up at which the kill hook can stop the process."""
ROLLUP_ROWS_PER_RUN: Final = 2_000_000
"""Rows a run rolls up at most (about 6 s of CPU), the newest hours first: the first run over a
week of parts kept in twelves does not hold the lock, and every compaction waiting on it, for an
hour; later runs go on where it stopped."""
SHARED_MARKER: Final = "shared"
"""``DEST/.compact/shared``: written (under the destination's lock) by a run that compacts into a
local folder with a state folder of its own; such a folder is never rolled up, since that run's
batches are journalled where no roll-up looks, and its parts may land at any moment."""
_JOURNAL_VERSION: Final = 1
_COLUMNS: Final = tuple(f.name for f in FIELDS)
_AT_FDCWD: Final = -100
_RENAME_EXCHANGE: Final = 2
_CANNOT_EXCHANGE: Final = (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two folders in one step; False where the system or file system cannot."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False  # a C library older than glibc 2.28
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in _CANNOT_EXCHANGE:
        return False
    raise OSError(err, os.strerror(err), str(a))


@dataclass(frozen=True, slots=True)
class _Journal:
    batch: str
    partition: str  # relative to the dataset's root, ``/``-separated
    parts: tuple[tuple[str, int, int], ...]  # name, size, mtime (ns)
    output: str

    def dumps(self) -> str:
        return json.dumps(
            {
                "version": _JOURNAL_VERSION,
                "batch": self.batch,
                "partition": self.partition,
                "parts": [list(p) for p in self.parts],
                "output": self.output,
            },
            indent=1,
        )

    @classmethod
    def load(cls, path: Path) -> _Journal:
        journal = load_journal(
            path,
            "roll-up",
            lambda obj: cls(
                str(obj["batch"]),
                str(obj["partition"]),
                tuple((str(n), int(s), int(m)) for n, s, m in obj["parts"]),
                str(obj["output"]),
            ),
        )
        folders = journal.partition.split("/")
        if (
            len(folders) != 3
            or not journal.batch.isalnum()
            or any(not f or f.startswith(".") for f in folders)
        ):  # what settling removes must be a partition's hidden sibling, nothing else
            raise RecordError(
                f"not a roll-up journal (partition {journal.partition!r}, batch "
                f"{journal.batch!r}); move it away to go on",
                path=str(path),
            )
        return journal


def _remove(folder: Path) -> None:
    if folder.exists():
        shutil.rmtree(folder)
        fsync_directory(folder.parent)


def _held(partition: Path, batch: str) -> Path:
    """A roll-up's hidden folder, beside its partition."""
    return partition.parent / f".rollup-{batch}"


def _journal_path(state: Path, batch: str) -> Path:
    return state / "rollup" / f"{batch}.json"


def _drop(held: Path, journal: Path) -> None:
    """The last step of every roll-up, made or not: its hidden folder (the parts, or the file
    that was not exchanged) removed, then its journal."""
    _remove(held)
    journal.unlink(missing_ok=True)
    fsync_directory(journal.parent)


def settle_rollups(state: Path, root: Path) -> list[str]:
    """Finish or undo each roll-up a killed run left (module docstring); a line for each."""
    folder = state / "rollup"
    if not folder.is_dir():
        return []
    for tmp in folder.glob(".*.tmp"):
        tmp.unlink(missing_ok=True)
    lines = []
    for path in sorted(folder.glob("*.json")):
        journal = _Journal.load(path)
        exchanged = (root / journal.partition / journal.output).is_file()
        _drop(_held(root / journal.partition, journal.batch), path)
        lines.append(
            f"{'finished' if exchanged else 'undid'} the roll-up of {journal.partition} that a "
            f"stopped run left ({len(journal.parts)} parts"
            + (" now one file)" if exchanged else " left as they were)")
        )
    return lines


def _closed_partitions(root: Path, now: float) -> list[Path]:
    """The partition folders of hours that ended ``ROLLUP_AFTER_S`` before ``now``, the newest
    hours first."""
    out = []
    for folder in root.glob("date=*/hour=*/replica=*"):
        span = hour_span(folder.relative_to(root).parts)
        if span is not None and now >= span[1] + ROLLUP_AFTER_S and folder.is_dir():
            out.append((-span[0], folder.relative_to(root).as_posix(), folder))
    return [folder for *_, folder in sorted(out)]


def _parts(folder: Path) -> list[Path] | None:
    """The partition's parts, when it holds two or more parts (``part-*.parquet``) and nothing
    else, of at most ``ROLLUP_MAX_ROWS`` rows and the record's columns only, each stamped
    checked when written and its footer still saying what the stamp says (``Footers.vouched``,
    every column read: a part rewritten since is not rolled up, so its rows are not stamped
    checked again unchecked)."""
    from fleetwatch.records.engine.footers import read_footers

    entries = sorted(folder.iterdir())
    if len(entries) < 2 or not all(
        p.is_file() and p.name.startswith("part-") and p.suffix == ".parquet" for p in entries
    ):
        return None
    footers = read_footers(entries, CHECKED_KEY.encode(), _COLUMNS)
    if footers is None or footers.vouched(_COLUMNS, ()) is None:
        return None
    if sum(f.rows for f in footers.files) > ROLLUP_MAX_ROWS:
        return None
    if any(not set(shape.to_arrow_schema().names) <= set(_COLUMNS) for shape in footers.shapes):
        return None  # a column the record schema lacks (a newer writer's): left as it is
    return entries


def _merged(parts: list[Path]) -> Any:
    """The parts' rows as one table of the record schema, in ``finished_s`` order (ties in the
    parts' order)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    tables = [pq.read_table(p).replace_schema_metadata(None) for p in parts]
    table = pa.concat_tables(tables, promote_options="permissive")
    schema = record_schema(table.column_names)  # the record's columns, in the record's order
    table = table.select(schema.names).cast(schema)
    order = pc.sort_indices(table, sort_keys=[("finished_s", "ascending")])
    return table.take(order)


@dataclass(frozen=True, slots=True)
class RolledUp:
    """What a run's roll-up did: partitions rolled up, and a line for each it could not (left
    in parts; the next run tries again)."""

    partitions: int = 0
    failed: tuple[str, ...] = ()


def roll_up(
    root: Path, state: Path, now: float, batch_id: Callable[[list[Path]], str], checkpoint: Any
) -> RolledUp:
    """Roll up the closed partitions of the dataset at ``root`` that need it, the newest first,
    up to ``ROLLUP_ROWS_PER_RUN`` rows (``batch_id``: the output's name from the parts, as
    compaction names a batch). A partition that cannot be (a part that does not read, say) is
    left as it was, with a line saying why, and the others are rolled up."""
    import pyarrow as pa

    if (state / SHARED_MARKER).exists():
        return RolledUp()
    rolled, rows = 0, 0
    failed: list[str] = []
    for folder in _closed_partitions(root, now):
        if rows >= ROLLUP_ROWS_PER_RUN:
            break
        batch = None
        try:
            paths = _parts(folder)
            if paths is None:
                continue
            batch = batch_id(paths)
            made = _roll(root, state, folder, paths, batch, checkpoint)
        except (OSError, ValueError, pa.ArrowException, RecordError) as exc:
            if batch is not None:
                _drop(_held(folder, batch), _journal_path(state, batch))
            failed.append(f"{folder}: not rolled up ({type(exc).__name__}: {exc})")
            continue
        if made is None:
            break  # this file system cannot exchange folders: leave every partition as it is
        rolled += 1
        rows += made
    return RolledUp(rolled, tuple(failed))


def _roll(
    root: Path,
    state: Path,
    folder: Path,
    paths: list[Path],
    batch: str,
    checkpoint: Any,
) -> int | None:
    """Steps 1 to 4 for one partition: its rows, or None where the folders cannot be exchanged
    (nothing changed)."""
    from fleetwatch.records.dest import write_checked

    output = f"part-{batch}.parquet"
    stats = [p.stat() for p in paths]
    journal = _Journal(
        batch,
        folder.relative_to(root).as_posix(),
        tuple((p.name, s.st_size, s.st_mtime_ns) for p, s in zip(paths, stats, strict=True)),
        output,
    )
    path = _journal_path(state, batch)
    atomic_write_text(path, journal.dumps())
    checkpoint("rollup-after-journal")
    held = _held(folder, batch)
    _remove(held)
    held.mkdir()
    table = _merged(paths)
    write_checked(table, held / output)
    fsync_directory(held)
    checkpoint("rollup-after-write")
    exchanged = _exchange(held, folder)
    if exchanged:
        fsync_directory(folder.parent)
        checkpoint("rollup-after-exchange")
    _drop(held, path)
    return int(table.num_rows) if exchanged else None
