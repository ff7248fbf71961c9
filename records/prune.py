"""`records prune`: remove the records of a dataset that are all older than a cutoff, a whole
partition or file at a time, so that a kill at any moment leaves each one whole or gone.

What is old is ``finished_s < now - older_than_s``, judged without reading records where possible:

- a hive partition folder (``date=…/hour=…/``, see ``fleetwatch.records.hive``) by its name: it
  goes when the hour (or, without ``hour=``, the day) it covers ended at or before the cutoff;
- any other record file, such as the segments a sink seals, by the largest ``finished_s`` in a
  Parquet file's footer statistics, or else by the file's mtime: a sealed file is written after
  every record in it finished, so its mtime bounds them from above.

A partition is renamed to a hidden ``.pruning-<name>`` beside it (one rename: readers skip it
from then on), the rename is made durable, and only then are its files removed; a run finds any
``.pruning-*`` a killed run left and finishes removing it. A file goes with one unlink. The kill
hook (``KILL_AT_ENV``) stops the process after a rename (``after-hide``) or after a partition's
first file is removed (``mid-delete``). Object storage has no rename to hide a partition with:
its retention is the bucket's lifecycle rule, and a URL is refused.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from fleetwatch.core.atomic import fsync_directory
from fleetwatch.core.records.schema import RecordError
from fleetwatch.core.records.write import PARQUET_SUFFIXES
from fleetwatch.records.dataset import DATASET_SUFFIXES
from fleetwatch.records.hive import STATE_DIR, hour_span, writer_lock

__all__ = ["KILL_AT_ENV", "STAGES", "Pruned", "Removal", "prune"]

STAGES: Final = ("after-hide", "mid-delete")
"""The moments at which the kill hook can stop a prune (module docstring)."""
KILL_AT_ENV: Final = "FLEETWATCH_PRUNE_KILL_AT"
"""The environment variable naming a stage at which `records prune` SIGKILLs itself (a test hook)."""
HIDDEN_PREFIX: Final = ".pruning-"

Checkpoint = Callable[[str], None]


def _no_checkpoint(stage: str) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Removal:
    """One thing removed: a partition folder, or the old files of one other folder; how many
    files and bytes, and what told their age (``partition name``, ``Parquet statistics``,
    ``file mtime``)."""

    path: Path
    partition: bool
    files: int
    bytes: int
    by: str


@dataclass(frozen=True, slots=True)
class Pruned:
    """What a prune removed (or, dry, would remove), and the cutoff it used (Unix s)."""

    cutoff_s: float
    removals: tuple[Removal, ...]
    finished_leftovers: int = 0

    @property
    def partitions(self) -> int:
        return sum(r.partition for r in self.removals)

    @property
    def files(self) -> int:
        return sum(r.files for r in self.removals)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.removals)


def _files_under(folder: Path) -> Iterator[Path]:
    for top, _, names in os.walk(folder):
        for name in names:
            yield Path(top) / name


def _size(paths: Iterator[Path]) -> tuple[int, int]:
    files = total = 0
    for p in paths:
        try:
            total += p.lstat().st_size
        except FileNotFoundError:
            continue
        files += 1
    return files, total


def _remove_tree(folder: Path, checkpoint: Checkpoint) -> None:
    """Remove ``folder`` and everything in it, files first, deepest folders first."""
    first = True
    for top, dirs, names in os.walk(folder, topdown=False):
        for name in names:
            (Path(top) / name).unlink(missing_ok=True)
            if first:
                checkpoint("mid-delete")
                first = False
        for name in dirs:
            (Path(top) / name).rmdir()
    folder.rmdir()
    fsync_directory(folder.parent)


def _leftovers(root: Path) -> list[Path]:
    """Hidden partitions a killed prune left (``.pruning-*``, wherever partitions are)."""
    found: list[Path] = []
    for top, dirs, _ in os.walk(root):
        found.extend(Path(top) / d for d in dirs if d.startswith(HIDDEN_PREFIX))
        dirs[:] = [d for d in dirs if not d.startswith(".") and not d.startswith("hour=")]
    return sorted(found)


def _newest_finished(path: Path) -> tuple[float, str]:
    """The latest time a file's records can have finished, and what told it."""
    if path.suffix.lower() in PARQUET_SUFFIXES:
        import pyarrow.parquet as pq

        try:
            md = pq.ParquetFile(path).metadata
            column = md.schema.names.index("finished_s")
            stats = [md.row_group(i).column(column).statistics for i in range(md.num_row_groups)]
            if stats and all(s is not None and s.has_min_max for s in stats):
                return max(float(s.max) for s in stats), "Parquet statistics"
        except Exception:
            pass  # no statistics to go by (or not Parquet): the mtime bounds it all the same
    return path.stat().st_mtime, "file mtime"


def _plan(root: Path, cutoff: float) -> list[tuple[Path, bool, str]]:
    """(path, is a partition, what told its age) for each thing to remove, in walk order."""
    plan: list[tuple[Path, bool, str]] = []
    for top, dirs, names in os.walk(root):
        here = Path(top)
        keep_dirs = []
        for name in sorted(dirs):
            if name.startswith("."):
                continue  # hidden: state, a staging folder, a prune in progress
            span = hour_span(Path(top, name).relative_to(root).parts)
            if span is None:
                keep_dirs.append(name)
            elif span[1] <= cutoff:
                plan.append((here / name, True, "partition name"))
            elif not name.startswith("hour="):
                keep_dirs.append(name)  # a day not all past: its hours may be
        dirs[:] = keep_dirs
        if hour_span(here.relative_to(root).parts) is not None:
            continue  # files in a partition go with it, or stay
        for name in sorted(names):
            p = here / name
            if name.startswith(".") or p.suffix.lower() not in DATASET_SUFFIXES:
                continue
            newest, by = _newest_finished(p)
            if newest < cutoff:
                plan.append((p, False, by))
    return plan


def prune(
    dataset: str | os.PathLike[str],
    *,
    older_than_s: float,
    now: float,
    dry_run: bool = False,
    checkpoint: Checkpoint = _no_checkpoint,
) -> Pruned:
    """Remove what in ``dataset`` (a folder) holds only records that finished before
    ``now - older_than_s``; with ``dry_run``, only say what that would be."""
    if "://" in os.fspath(dataset):
        raise RecordError(
            "prune removes from a local folder; in object storage, expire old partitions with "
            "the bucket's lifecycle rule (their objects are as old as their records, give or "
            "take a compaction interval)",
            path=os.fspath(dataset),
        )
    root = Path(dataset)
    if not root.exists():
        raise RecordError("no such folder", path=str(root))
    if not root.is_dir():
        raise RecordError("prune removes from a dataset folder, and this is a file", path=str(root))
    if not older_than_s > 0:
        raise RecordError(f"--older-than must be longer than zero, got {older_than_s:g} s")
    cutoff = now - older_than_s
    if dry_run:
        return _removals(root, _plan(root, cutoff), cutoff, dry_run=True, checkpoint=checkpoint)
    with writer_lock(root / STATE_DIR, dataset=str(root), command="prune"):
        leftovers = _leftovers(root)
        for hidden in leftovers:
            _remove_tree(hidden, _no_checkpoint)
        result = _removals(root, _plan(root, cutoff), cutoff, dry_run=False, checkpoint=checkpoint)
    return Pruned(result.cutoff_s, result.removals, finished_leftovers=len(leftovers))


def _removals(
    root: Path,
    plan: list[tuple[Path, bool, str]],
    cutoff: float,
    *,
    dry_run: bool,
    checkpoint: Checkpoint,
) -> Pruned:
    removals: list[Removal] = []
    loose: dict[Path, list[tuple[Path, str]]] = {}
    for path, partition, by in plan:
        if not partition:
            loose.setdefault(path.parent, []).append((path, by))
            continue
        files, size = _size(_files_under(path))
        removals.append(Removal(path, True, files, size, by))
        if dry_run:
            continue
        hidden = path.with_name(HIDDEN_PREFIX + path.name)
        os.replace(path, hidden)
        fsync_directory(path.parent)
        checkpoint("after-hide")
        _remove_tree(hidden, checkpoint)
        parent = path.parent
        if parent != root and not any(parent.iterdir()):
            parent.rmdir()  # a day whose last hour went
            fsync_directory(parent.parent)
    for folder, found in loose.items():
        files, size = _size(p for p, _ in found)
        kinds = sorted({by for _, by in found})
        removals.append(Removal(folder, False, files, size, " and ".join(kinds)))
        if dry_run:
            continue
        for p, _ in found:
            p.unlink(missing_ok=True)
        fsync_directory(folder)
    return Pruned(cutoff, tuple(removals))
