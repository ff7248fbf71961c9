"""Records as a dataset: the files that one or more paths name, read as one checked DataFrame.

Each path given is a record file, a directory (every ``*.jsonl`` and ``*.parquet`` under it,
recursively, in sorted order) or a glob (quote it so the shell leaves it alone; ``**`` matches any
depth). JSON lines and Parquet mix freely. Files a writer has not finished are never part of a
dataset: dotfiles and ``*.tmp`` (the sink's ``.<prefix>-NNNNNN.<fmt>.<hex>.tmp``, an atomic
write's ``.<name>.<hex>.tmp``). A path that names nothing readable is a ``RecordError`` naming it.

Every file is read with ``read_records`` and checked as it is; the frames are concatenated in the
order resolved, so a dataset reads exactly as the single file holding the same rows would. Memory
is the whole dataset's (about 1.1 KB a row from JSON lines): ``count_rows`` and ``data_bytes``
measure a dataset before it is read, cheaply (Parquet footers; JSON lines scanned in 1 MiB chunks
only until a cap is passed), so a command can refuse one too large.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fleetwatch.core.records.schema import RecordError
from fleetwatch.core.records.write import JSONL_SUFFIXES, PARQUET_SUFFIXES

if TYPE_CHECKING:
    import pandas as pd

    from fleetwatch.records.filters import RecordFilter

__all__ = [
    "DATASET_SUFFIXES",
    "MAX_LINE_BYTES",
    "Dataset",
    "check_paths",
    "count_rows",
    "data_bytes",
    "describe",
    "file_bytes",
    "file_rows",
    "pruned_or_refused",
    "read_dataset",
    "resolve",
]

DATASET_SUFFIXES = (".jsonl", ".parquet")
"""The record files a directory contributes (what the sink seals); a file named on its own may
also be ``.json``, ``.ndjson`` or ``.pq``."""
MAX_LINE_BYTES = 1 << 20
"""A JSON line longer than this (no record is near it) marks a file that holds no records."""
_CHUNK_BYTES = 1 << 20
_MAGIC = frozenset("*?[")


def _unfinished(path: Path) -> bool:
    """A file a writer has not finished (or hid): a dotfile or ``*.tmp``."""
    return path.name.startswith(".") or path.suffix.lower() == ".tmp"


def _in_directory(top: Path, *, first: bool = False) -> list[Path]:
    """The record files under ``top``, sorted: not in a hidden folder, not unfinished, symlinked
    folders not followed (as ``Path.rglob``). One ``scandir`` a folder (a fleet's folder holds
    tens of thousands of files: the entries' types come with the listing, no ``stat`` a file);
    sorted as strings split at the separator (``Path``'s own order, at a tenth of its cost),
    made paths once sorted.
    ``first``: the first one found only (whether there is any)."""
    found: list[tuple[list[str], str]] = []
    stack = [os.fspath(top)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if not entry.name.startswith("."):
                        stack.append(entry.path)
                    continue
                name = entry.name
                suffix = os.path.splitext(name)[1].lower()
                if suffix in DATASET_SUFFIXES and not name.startswith(".") and entry.is_file():
                    if first:
                        return [Path(entry.path)]
                    found.append((entry.path.split(os.sep), entry.path))
    found.sort()
    return [Path(path) for _, path in found]


def _matching(pattern: str, first: bool = False) -> list[Path]:
    found: list[Path] = []
    for name in sorted(glob.glob(pattern, recursive=True)):
        p = Path(name)
        if p.is_dir():
            found.extend(_in_directory(p, first=first))
        elif (
            p.is_file()
            and p.suffix.lower() in JSONL_SUFFIXES + PARQUET_SUFFIXES
            and not _unfinished(p)
        ):
            found.append(p)
    return found


def _expand(arg: str, allow_empty: bool, first: bool = False) -> list[Path]:
    p = Path(arg)
    if p.is_dir():
        files = _in_directory(p, first=first)
        if not files and not allow_empty:
            raise RecordError(
                "is a directory holding no record files (*.jsonl, *.parquet)", path=arg
            )
        return files
    if p.exists():
        if p.suffix.lower() not in JSONL_SUFFIXES + PARQUET_SUFFIXES:
            raise RecordError("unknown record format: use .jsonl or .parquet", path=arg)
        return [p]
    if _MAGIC & set(arg):
        files = _matching(arg, first)
        if not files and not allow_empty:
            raise RecordError("no record files (*.jsonl, *.parquet) match this pattern", path=arg)
        return files
    raise RecordError("no such file or directory", path=arg)


def resolve(paths: Sequence[str | os.PathLike[str]], *, allow_empty: bool = False) -> list[Path]:
    """The record files ``paths`` name, in order: each path a file, a directory (recursive) or
    a glob; a file named twice is read once. ``RecordError`` names the first path that names no
    record file (missing, an empty directory, a pattern matching nothing, another format).

    With ``allow_empty``, a directory holding no record files and a pattern matching none give
    no files (a folder a job has emptied before); a path that does not exist is still an error."""
    if not paths:
        raise RecordError("no record paths given")
    seen: set[object] = set()
    out: list[Path] = []
    for arg in paths:
        for p in _expand(_local(arg), allow_empty):
            try:
                st = os.stat(p)  # the file, however named (links too): its device and inode
                key: object = (st.st_dev, st.st_ino)
            except OSError:  # gone since it was listed (pruned): reading it names it
                key = p.resolve()
            if key not in seen:
                seen.add(key)
                out.append(p)
    return out


def check_paths(paths: Sequence[str | os.PathLike[str]]) -> None:
    """``RecordError`` where ``resolve`` would refuse ``paths`` (the same line), without listing
    each directory whole: its first record file is enough (a fleet's folder holds tens of
    thousands, which the engine lists once when it opens them)."""
    if not paths:
        raise RecordError("no record paths given")
    for arg in paths:
        _expand(_local(arg), False, first=True)


def _local(arg: str | os.PathLike[str]) -> str:
    """``arg`` as a local path; ``RecordError`` for an object-storage URL."""
    from fleetwatch.records.remote import is_url, location

    if is_url(arg):
        raise RecordError(
            "object storage is read through the query engine (--engine duckdb), not here",
            path=location(arg).split("?", 1)[0],
        )
    return os.fspath(arg)


def describe(paths: Sequence[str | os.PathLike[str]], files: Sequence[Path] = ()) -> str:
    """A dataset's name for messages: the paths given, and how many files they hold when that is
    not one file named as itself."""
    from fleetwatch.records.remote import location

    name = " ".join(location(p).split("?", 1)[0] for p in paths)
    if len(files) == 1 and len(paths) == 1 and Path(os.fspath(paths[0])) == files[0]:
        return name
    return f"{name} ({len(files):,} file{'s' if len(files) != 1 else ''})" if files else name


@dataclass(frozen=True, slots=True)
class Dataset:
    """A dataset read whole: its rows (those a filter kept, when one was given), the files they
    came from, the files skipped as bad (each with the one line that says why; empty unless
    ``skip_bad``), and how many rows the files held before the filter (so a command can say
    "N of M records match"; None when no filter was given)."""

    frame: pd.DataFrame
    files: tuple[Path, ...]
    skipped: tuple[tuple[Path, str], ...] = ()
    rows_before_filter: int | None = None

    @property
    def rows(self) -> int:
        return len(self.frame)


def _read_one(path: Path, where: RecordFilter | None) -> tuple[pd.DataFrame, int]:
    """One file's (matching) rows, and how many rows it holds before the filter."""
    from fleetwatch.records.io import read_records

    if where is None or path.suffix.lower() not in PARQUET_SUFFIXES:
        frame = read_records(path)
        return (frame, len(frame)) if where is None else (where.apply(frame), len(frame))
    frame = read_records(path, where=where)  # pushed down: the footer counts the rows
    return frame, file_rows(path, 0) or len(frame)


def read_dataset(
    paths: Sequence[str | os.PathLike[str]],
    *,
    skip_bad: bool = False,
    where: RecordFilter | None = None,
) -> Dataset:
    """Read every file ``paths`` name into one checked frame (the schema ``read_records`` gives;
    zero rows when every file is empty). A bad file raises its ``RecordError``, or with
    ``skip_bad`` is left out and listed in ``Dataset.skipped``.

    With ``where``, each file is filtered as it is read (memory: the matching rows and one
    file); records that the filter leaves none of are a ``RecordError`` naming the filter."""
    import pandas as pd

    from fleetwatch.records.io import to_frame

    files = pruned_or_refused(paths, resolve(paths), where)
    frames: list[pd.DataFrame] = []
    read: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    before = 0
    for p in files:
        try:
            frame, held = _read_one(p, where)
        except RecordError as exc:
            if not skip_bad:
                raise
            skipped.append((p, str(exc)))
            continue
        frames.append(frame)
        before += held
        read.append(p)
    if not frames:
        frame = to_frame([])
    elif len(frames) == 1:
        frame = frames[0]
    else:
        frame = pd.concat(frames, ignore_index=True)
    if where is None:
        return Dataset(frame, tuple(read), tuple(skipped))
    if before and not len(frame):
        raise RecordError(
            f"no records match {where.describe()} (of {before:,} read"
            + ("; times are the records' finished_s)" if "finished_s" in where.columns() else ")"),
            path=describe(paths, files) if len(paths) == 1 else f"{len(files):,} record files",
        )
    return Dataset(frame, tuple(read), tuple(skipped), rows_before_filter=before)


def pruned_or_refused(
    paths: Sequence[str | os.PathLike[str]], files: Sequence[Path], where: RecordFilter | None
) -> list[Path]:
    """``files`` less the partitions ``where`` cannot match (``records.hive.pruned``); a
    ``RecordError`` naming the filter when it leaves none."""
    from fleetwatch.records.hive import pruned

    kept = pruned(files, where)
    if files and not kept and where is not None:
        raise RecordError(
            f"no records match {where.describe()}: every partition folder of the "
            f"{len(files):,} record files lies outside it",
            path=describe(paths, files),
        )
    return kept


def _jsonl_rows(path: Path, stop_after: int) -> int:
    """Non-blank lines of ``path``, counting no further than ``stop_after``."""
    rows = 0
    line_bytes = 0  # bytes of the current line so far
    content = False  # whether the current line has a non-blank byte
    with open(path, "rb") as fh:
        while rows <= stop_after:
            chunk = fh.read(_CHUNK_BYTES)
            if not chunk:
                break
            pieces = chunk.split(b"\n")
            for i, piece in enumerate(pieces):
                line_bytes += len(piece)
                content = content or bool(piece.strip())
                if line_bytes > MAX_LINE_BYTES:
                    raise RecordError(
                        f"line {rows + 1} is longer than {MAX_LINE_BYTES >> 20} MiB; "
                        "not a request record file",
                        path=str(path),
                    )
                if i < len(pieces) - 1:  # the line ended here
                    rows += content
                    line_bytes, content = 0, False
    return rows + content


def file_rows(path: Path, stop_after: int) -> int | None:
    """Rows in one record file (at most ``stop_after`` + 1 counted), or None when the kind of
    file or its state (missing, unreadable) is left for the reader to report."""
    suffix = path.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        import pyarrow.parquet as pq

        try:
            return int(pq.ParquetFile(path).metadata.num_rows)  # the footer only
        except Exception:
            return None  # not Parquet, or unreadable: the reader says so, in its words
    if suffix in JSONL_SUFFIXES:
        try:
            return _jsonl_rows(path, stop_after)
        except OSError:
            return None
    return None


def file_bytes(path: Path) -> int | None:
    """The bytes one record file holds as read: a JSON-lines file's size, a Parquet file's total
    uncompressed size from its footer; None when left for the reader to report."""
    suffix = path.suffix.lower()
    try:
        if suffix in JSONL_SUFFIXES:
            return path.stat().st_size
        if suffix in PARQUET_SUFFIXES:
            import pyarrow.parquet as pq

            md = pq.ParquetFile(path).metadata
            return sum(int(md.row_group(i).total_byte_size) for i in range(md.num_row_groups))
    except Exception:
        return None
    return None


def count_rows(files: Sequence[Path], stop_after: int) -> int:
    """Rows in a dataset's files, counting no further than just past ``stop_after`` (a file the
    reader will refuse counts nothing)."""
    total = 0
    for p in files:
        if total > stop_after:
            break
        total += file_rows(p, stop_after - total) or 0
    return total


def data_bytes(files: Sequence[Path]) -> int:
    """The bytes a dataset's files hold as read (see ``file_bytes``)."""
    return sum(file_bytes(p) or 0 for p in files)
