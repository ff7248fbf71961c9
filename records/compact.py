"""`records compact`: merge sealed record segments into a partitioned Parquet dataset, losing and
duplicating no record whatever moment the process is killed at.

Sources are the sealed segments that paths name (files, folders, globs, as a dataset resolves
them: never a dotfile or ``*.tmp``), each last modified at least ``min_age_s`` ago, so a file a
writer is sealing now is left for the next run. They are read and checked in batches of about
``target_rows`` rows (memory: one batch), and each batch becomes one zstd Parquet file per
partition it touches (``fleetwatch.records.hive``): ``<dest>/date=…/hour=…/replica=…/part-<batch>.parquet``.

A batch goes through these steps, each durable before the next (fsync, rename, fsync of the
folder), with the stage names the kill hook (``KILL_AT_ENV``) knows:

1. the journal ``<state>/journal/<batch>.json`` is written: the batch id (a hash of its inputs),
   its inputs (path, size, mtime) and its outputs' names. ``after-journal``
2. each output is written to a hidden temporary file, then each is renamed into place.
   ``after-first-rename``, ``after-rename``
3. the inputs are removed (``mid-delete``), or with ``delete_sources=False`` kept and the journal
   becomes the batch's entry in the manifest ``<state>/done/``, which later runs skip.
4. the journal is removed. ``before-journal-removed``

A run starts by settling every journal a killed run left: when all its outputs are in place, the
batch is finished (step 3 and 4: its outputs hold every record of its inputs); otherwise the
outputs that are there are removed and the journal dropped, and the inputs, never touched before
step 3, are compacted again. So at every moment each record is in its source or in a visible
output, and in both only while a journal names the two and says which one goes. Output names are
fixed by the batch, so doing a batch again replaces its files; a source changed since the journal
named it is left in place and reported. One process at a time holds ``<state>/lock``.

With object storage (``s3://…``) each output is uploaded under its final name after the journal
(there is no rename; an object appears whole or not at all) and the state lives in a local folder
given as ``state``; the same recovery applies.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import signal
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from fleetwatch.core.atomic import atomic_write_text, fsync_directory
from fleetwatch.core.records.schema import RecordError
from fleetwatch.core.records.write import JSONL_SUFFIXES
from fleetwatch.records.dest import Destination, LocalFolder, identity, is_url, open_destination
from fleetwatch.records.hive import STATE_DIR, load_journal, partition_dir, writer_lock
from fleetwatch.records.rollup import SHARED_MARKER, RolledUp, roll_up, settle_rollups

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

__all__ = [
    "KILL_AT_ENV",
    "STAGES",
    "Compacted",
    "Journal",
    "Source",
    "compact",
    "describe_run",
    "kill_at",
    "partitions",
]

STAGES: Final = (
    "after-journal",
    "after-first-rename",
    "after-rename",
    "mid-delete",
    "before-journal-removed",
)
"""The moments of a batch at which ``kill_at`` can stop the process (module docstring)."""
KILL_AT_ENV: Final = "FLEETWATCH_COMPACT_KILL_AT"
"""The environment variable naming a stage at which `records compact` SIGKILLs itself: a test
hook for the windows a crash must survive."""
_JOURNAL_VERSION: Final = 1

Checkpoint = Callable[[str], None]


def _no_checkpoint(stage: str) -> None:
    return None


def kill_at(
    stage: str | None, *, env: str = KILL_AT_ENV, stages: Sequence[str] = STAGES
) -> Checkpoint:
    """A checkpoint that SIGKILLs this process when it reaches ``stage`` (None: never); a stage
    not among ``stages`` is a ``RecordError`` naming ``env``."""
    if not stage:
        return _no_checkpoint
    if stage not in stages:
        raise RecordError(f"{env}={stage}: not a stage; one of {', '.join(stages)}")

    def checkpoint(reached: str) -> None:
        if reached == stage:
            os.kill(os.getpid(), signal.SIGKILL)

    return checkpoint


@dataclass(frozen=True, slots=True)
class Source:
    """One sealed segment as it was when planned: its resolved path, size and mtime (ns)."""

    path: Path
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path) -> Source | None:
        """The file as it is now (None: gone)."""
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        return cls(path, st.st_size, st.st_mtime_ns)

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "size": self.size, "mtime_ns": self.mtime_ns}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Source:
        return cls(Path(obj["path"]), int(obj["size"]), int(obj["mtime_ns"]))


@dataclass(frozen=True, slots=True)
class Journal:
    """A batch in flight: its id, the destination it writes (``dest.identity``; ``.`` for the
    folder the state is in, wherever it is moved), its inputs, outputs (paths relative to the
    destination, with their rows) and whether its inputs are kept."""

    batch: str
    destination: str
    inputs: tuple[Source, ...]
    outputs: tuple[tuple[str, int], ...]
    keep_sources: bool

    def dumps(self) -> str:
        return json.dumps(
            {
                "version": _JOURNAL_VERSION,
                "batch": self.batch,
                "destination": self.destination,
                "keep_sources": self.keep_sources,
                "inputs": [s.to_json() for s in self.inputs],
                "outputs": [{"path": rel, "rows": rows} for rel, rows in self.outputs],
            },
            indent=1,
        )

    @classmethod
    def load(cls, path: Path) -> Journal:
        return load_journal(
            path,
            "compaction",
            lambda obj: cls(
                str(obj["batch"]),
                str(obj["destination"]),
                tuple(Source.from_json(s) for s in obj["inputs"]),
                tuple((str(o["path"]), int(o["rows"])) for o in obj["outputs"]),
                bool(obj["keep_sources"]),
            ),
        )


@dataclass(frozen=True, slots=True)
class Compacted:
    """What one run did: sources merged and records in them, files written and the partitions
    they went to, sources removed; what it left (too new, changed while read, bad with
    ``skip_bad``, each bad one with its line), and a line for each journal a killed run left."""

    files_in: int = 0
    records_in: int = 0
    files_out: int = 0
    partitions: int = 0
    sources_removed: int = 0
    too_new: int = 0
    already_compacted: int = 0
    changed: int = 0
    skipped: tuple[tuple[Path, str], ...] = ()
    recovered: tuple[str, ...] = field(default=())
    rolled_up: int = 0
    not_rolled_up: tuple[str, ...] = ()


def partitions(frame: pd.DataFrame) -> list[tuple[str, np.ndarray[Any, Any]]]:
    """The positions of ``frame``'s rows in each partition folder (``hive.partition_dir``), in
    folder order, each partition's rows in ``finished_s`` order (ties keep their order)."""
    import numpy as np
    import pandas as pd

    if not len(frame):
        return []
    finished = frame["finished_s"].to_numpy(dtype=np.float64)
    hours = np.floor(finished / 3600.0).astype(np.int64)
    codes, replicas = pd.factorize(frame["replica"].to_numpy(dtype=object))
    order = np.lexsort((finished, codes, hours))  # stable: by hour, replica, then finished_s
    keys = np.stack([hours[order], codes[order]])
    starts = np.flatnonzero(np.r_[True, (np.diff(keys, axis=1) != 0).any(axis=0)])
    ends = np.r_[starts[1:], len(order)]
    out = [
        (partition_dir(float(hours[order[a]]) * 3600.0, str(replicas[codes[order[a]]])), order[a:b])
        for a, b in zip(starts, ends, strict=True)
    ]
    out.sort(key=lambda part: part[0])
    return out


def _batch_id(inputs: Sequence[Source]) -> str:
    """A batch's name: a hash of this host and its inputs, so the same batch done again gets
    the same output names, and another host's batch never does."""
    h = hashlib.sha256(socket.gethostname().encode("utf-8"))
    for s in sorted(inputs, key=lambda s: str(s.path)):
        h.update(f"\0{s.path}\0{s.size}\0{s.mtime_ns}".encode())
    return h.hexdigest()[:20]


def _refuse_overlap(paths: Sequence[str], dest: Path) -> None:
    """A ``RecordError`` when the destination folder is a source or inside one (its files would
    be read again as sources) or a source is inside it."""
    target = dest.resolve()
    for arg in paths:
        roots = [Path(arg)]
        if not Path(arg).exists() and set("*?[") & set(arg):
            roots = [Path(p) for p in glob.glob(arg, recursive=True)]
        for root in roots:
            where = root.resolve()
            if where == target or where in target.parents:
                raise RecordError(
                    f"--out {dest} is inside this source: compacted files would be read "
                    "again as sources; put the destination outside every source",
                    path=arg,
                )
            if target in where.parents:
                raise RecordError(
                    f"this source is inside --out {dest}: compact reads segments into a "
                    "dataset, not a dataset into itself",
                    path=arg,
                )


def _settle(state: Path, dest: Destination, dest_id: str, checkpoint: Checkpoint) -> list[str]:
    """Finish or roll back every batch a killed run left; a line for each. A batch of another
    destination (a state folder given to two) is a ``RecordError``: only its own destination
    can tell whether its outputs are in place."""
    folder = state / "journal"
    if not folder.is_dir():
        return []
    for tmp in folder.glob(".*.tmp"):
        tmp.unlink(missing_ok=True)  # a journal whose write was cut short: never in effect
    lines: list[str] = []
    for path in sorted(folder.glob("*.json")):
        journal = Journal.load(path)
        if journal.destination != dest_id:
            raise RecordError(
                f"holds a stopped batch for {journal.destination}: finish it there first "
                f"(compact --out {journal.destination} --state {state}); a state folder serves "
                "one destination",
                path=str(path),
            )
        present = sum(dest.exists(rel) for rel, _ in journal.outputs)
        if present == len(journal.outputs):
            removed, kept = _finish(journal, path, state, checkpoint)
            lines.append(
                f"finished batch {journal.batch} that a stopped run left (all "
                f"{present} files in place; {removed} sources removed"
                + (f", {len(kept)} changed since and kept: {kept[0]}" if kept else "")
                + ")"
            )
        else:
            for rel, _ in journal.outputs:
                dest.discard(rel)
            path.unlink()
            fsync_directory(folder)
            lines.append(
                f"rolled back batch {journal.batch} that a stopped run left ({present} of "
                f"{len(journal.outputs)} files were in place; its {len(journal.inputs)} sources "
                "are compacted again)"
            )
    return lines


def _finish(
    journal: Journal, path: Path, state: Path, checkpoint: Checkpoint
) -> tuple[int, list[Path]]:
    """Steps 3 and 4 of a batch whose outputs are all in place: (sources removed, sources
    left because they changed since the journal named them)."""
    if journal.keep_sources:
        checkpoint("before-journal-removed")
        done = state / "done"
        done.mkdir(exist_ok=True)
        os.replace(path, done / path.name)
        fsync_directory(done)
        fsync_directory(path.parent)
        return 0, []
    removed = 0
    kept: list[Path] = []
    for src in journal.inputs:
        now = Source.of(src.path)
        if now is None:
            continue  # removed before the kill
        if now != src:
            kept.append(src.path)
            continue
        src.path.unlink(missing_ok=True)
        removed += 1
        if removed == 1:
            checkpoint("mid-delete")
    for folder in sorted({s.path.parent for s in journal.inputs}):
        fsync_directory(folder)
    checkpoint("before-journal-removed")
    path.unlink()
    fsync_directory(path.parent)
    return removed, kept


def _manifest(state: Path, dest_id: str) -> set[Source]:
    """The kept sources already compacted into this destination (``done/``); an entry none of
    whose sources is still there as it was is dropped, so the manifest does not outgrow them."""
    done = state / "done"
    if not done.is_dir():
        return set()
    for tmp in done.glob(".*.tmp"):
        tmp.unlink(missing_ok=True)
    found: set[Source] = set()
    for path in sorted(done.glob("*.json")):
        entry = Journal.load(path)
        if entry.destination != dest_id:
            continue
        there = {s for s in entry.inputs if Source.of(s.path) == s}
        if there:
            found |= there
        else:
            path.unlink()
    return found


def _candidates(paths: Sequence[str], now: float, min_age_s: float) -> tuple[list[Source], int]:
    """(the sealed segments ``paths`` name that are old enough, how many are too new), in
    dataset order. A path that names nothing is a ``RecordError``; an emptied folder is not."""
    from fleetwatch.records.dataset import resolve

    found: list[Source] = []
    too_new = 0
    cutoff_ns = int((now - min_age_s) * 1e9)
    for p in resolve(paths, allow_empty=True):
        if p.name.startswith("."):
            continue  # a file a writer has not finished, even when named on its own
        src = Source.of(p.resolve())
        if src is None:
            continue
        if src.mtime_ns >= cutoff_ns:
            too_new += 1
        else:
            found.append(src)
    return found, too_new


@dataclass(slots=True)
class _Run:
    """One run's batch under way and its tally. JSON lines are kept as checked column values and
    framed once per batch: a frame per small segment would cost more than reading it."""

    dest: Destination
    dest_id: str
    state: Path
    keep_sources: bool
    checkpoint: Checkpoint
    inputs: list[Source] = field(default_factory=list)
    columns: dict[str, list[Any]] = field(default_factory=dict)
    frames: list[pd.DataFrame] = field(default_factory=list)
    rows: int = 0
    files_in: int = 0
    records_in: int = 0
    files_out: int = 0
    partitions: set[str] = field(default_factory=set)
    removed: int = 0
    kept_changed: int = 0

    def add(self, src: Source, rows: dict[str, list[Any]] | pd.DataFrame) -> None:
        self.inputs.append(src)
        if isinstance(rows, dict):
            for name, values in rows.items():
                self.columns.setdefault(name, []).extend(values)
            self.rows += len(next(iter(rows.values()), []))
        else:
            self.frames.append(rows)
            self.rows += len(rows)

    def _frame(self) -> pd.DataFrame:
        import pandas as pd

        from fleetwatch.records.io import columns_frame

        frames = [*self.frames, columns_frame(self.columns)] if self.columns else self.frames
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)

    def commit(self) -> None:
        """Steps 1 to 4 for the batch gathered so far."""
        from fleetwatch.records.io import parquet_table

        if not self.inputs:
            return
        frame = self._frame()
        parts = partitions(frame)
        table = parquet_table(frame)
        batch = _batch_id(self.inputs)
        outputs = tuple((f"{folder}/part-{batch}.parquet", len(rows)) for folder, rows in parts)
        journal = Journal(batch, self.dest_id, tuple(self.inputs), outputs, self.keep_sources)
        path = self.state / "journal" / f"{batch}.json"
        atomic_write_text(path, journal.dumps())
        self.checkpoint("after-journal")
        for (rel, _), (_, rows) in zip(outputs, parts, strict=True):
            self.dest.write(rel, table.take(rows))
        for i, (rel, _) in enumerate(outputs):
            self.dest.publish(rel)
            if i == 0:
                self.checkpoint("after-first-rename")
        self.dest.sync(rel for rel, _ in outputs)
        self.checkpoint("after-rename")
        removed, kept = _finish(journal, path, self.state, self.checkpoint)
        self.files_in += len(self.inputs)
        self.records_in += self.rows
        self.files_out += len(outputs)
        self.partitions.update(folder for folder, _ in parts)
        self.removed += removed
        self.kept_changed += len(kept)
        self.inputs, self.columns, self.frames, self.rows = [], {}, [], 0


def _read(
    src: Source, skip_bad: bool, bad: list[tuple[Path, str]]
) -> dict[str, list[Any]] | pd.DataFrame | None:
    """A source's checked rows (JSON lines as column values, Parquet as a frame); None when it
    is gone, or bad and skipped."""
    from fleetwatch.records.io import read_columns, read_records

    try:
        if src.path.suffix.lower() in JSONL_SUFFIXES:
            return read_columns(src.path)
        return read_records(src.path)
    except FileNotFoundError:
        return None
    except RecordError as exc:
        if skip_bad:
            bad.append((src.path, str(exc)))
            return None
        raise RecordError(
            f"{exc.message}; a bad segment is left in place and nothing is compacted from it "
            "(--skip-bad compacts the others)",
            path=exc.path or str(src.path),
            row=exc.row,
            field=exc.field,
        ) from None


def compact(
    paths: Sequence[str | os.PathLike[str]],
    dest: str | os.PathLike[str],
    *,
    now: float,
    min_age_s: float = 30.0,
    delete_sources: bool = True,
    target_rows: int = 250_000,
    skip_bad: bool = False,
    state: str | os.PathLike[str] | None = None,
    checkpoint: Checkpoint = _no_checkpoint,
) -> Compacted:
    """Compact the sealed segments ``paths`` name into ``dest`` (a folder, or a URL with a local
    ``state`` folder); ``now`` is the Unix time that ``min_age_s`` counts back from."""
    if target_rows < 1:
        raise RecordError(f"--target-rows must be at least 1, got {target_rows}")
    if min_age_s < 0:
        raise RecordError(f"--min-age must not be negative, got {min_age_s:g} s")
    args = [os.fspath(p) for p in paths]
    where = os.fspath(dest)
    if is_url(where):
        if state is None:
            raise RecordError(
                "object storage keeps no journal: give --state, a local folder for it "
                "(one per destination and host)",
                path=where,
            )
        state_dir = Path(state)
    else:
        if Path(where).exists() and not Path(where).is_dir():
            raise RecordError("--out must be a folder, not a file", path=where)
        _refuse_overlap(args, Path(where))
        state_dir = Path(where) / STATE_DIR if state is None else Path(state)
    candidates, too_new = _candidates(args, now, min_age_s)
    target = open_destination(where)
    made = [p for p in (state_dir, Path(where)) if not is_url(str(p)) and not p.exists()]
    try:
        if not is_url(where) and state_dir != Path(where) / STATE_DIR:
            _mark_shared(Path(where), state_dir)
        with writer_lock(state_dir, dataset=target.name, command="compact"):
            return _locked(
                candidates,
                too_new,
                target,
                identity(where) if state is not None or is_url(where) else ".",
                state_dir,
                now=now,
                delete_sources=delete_sources,
                target_rows=target_rows,
                skip_bad=skip_bad,
                checkpoint=checkpoint,
            )
    except BaseException:
        _forget(made)
        raise


def _locked(
    candidates: list[Source],
    too_new: int,
    target: Destination,
    dest_id: str,
    state_dir: Path,
    *,
    now: float,
    delete_sources: bool,
    target_rows: int,
    skip_bad: bool,
    checkpoint: Checkpoint,
) -> Compacted:
    """The run itself, under the lock: settle, skip what is compacted, then batch by batch, and
    in a local folder the closed hours rolled up (``records.rollup``)."""
    local = target.root if isinstance(target, LocalFolder) else None
    recovered = _settle(state_dir, target, dest_id, checkpoint)
    if local is not None:
        recovered += settle_rollups(state_dir, local)
    compacted = _manifest(state_dir, dest_id)
    fresh = [s for s in candidates if s not in compacted]
    done = [s for s in candidates if s in compacted]
    if delete_sources:
        for src in done:  # kept by an earlier run, compacted already: only removed now
            src.path.unlink(missing_ok=True)
    run = _Run(target, dest_id, state_dir, not delete_sources, checkpoint)
    bad: list[tuple[Path, str]] = []
    changed = 0
    for src in fresh:
        if Source.of(src.path) is None:
            continue  # removed since it was listed (by finishing a stopped batch)
        rows = _read(src, skip_bad, bad)
        if rows is None:
            continue
        if Source.of(src.path) != src:
            changed += 1  # written to since listed: the next run takes it as it is then
            continue
        run.add(src, rows)
        if run.rows >= target_rows:
            run.commit()
    run.commit()
    rolled = RolledUp()
    if local is not None and state_dir == local / STATE_DIR:
        # only where the destination's own lock serializes every writer of its partitions, and
        # no run with a state folder of its own has written them (``rollup.SHARED_MARKER``)
        rolled = roll_up(local, state_dir, now, _named_batch, checkpoint)
    return Compacted(
        files_in=run.files_in,
        records_in=run.records_in,
        files_out=run.files_out,
        partitions=len(run.partitions),
        sources_removed=run.removed + (len(done) if delete_sources else 0),
        too_new=too_new,
        already_compacted=len(done),
        changed=changed + run.kept_changed,
        skipped=tuple(bad),
        recovered=tuple(recovered),
        rolled_up=rolled.partitions,
        not_rolled_up=rolled.failed,
    )


def _named_batch(parts: list[Path]) -> str:
    """A roll-up's name, as a batch's: from its inputs (present: the lock is held)."""
    return _batch_id([s for s in map(Source.of, parts) if s is not None])


def _mark_shared(dest: Path, state: Path) -> None:
    """Say in the folder's own state that a run with the state folder ``state`` writes it
    (``rollup.SHARED_MARKER``), under the folder's own lock: a roll-up under way finishes before
    this run writes a part, and none starts after."""
    own = dest / STATE_DIR
    if (own / SHARED_MARKER).exists():
        return
    with writer_lock(own, dataset=str(dest), command="compact"):
        atomic_write_text(own / SHARED_MARKER, f"{state.resolve()}\n")


def _forget(made: list[Path]) -> None:
    """Remove the folders a failed run made (its state folder, then the destination) while they
    hold nothing but the lock (and in the destination's own state folder, the mark a run with a
    state folder of its own leaves): bad input leaves no trace. Anything a batch wrote (a
    journal, an output) keeps a folder from being empty, so it stays for the next run."""
    for folder in made:
        try:
            own = folder / STATE_DIR
            if own.is_dir() and list(folder.iterdir()) == [own]:
                for name in ("lock", SHARED_MARKER):
                    (own / name).unlink(missing_ok=True)
                own.rmdir()
            for name in ("journal", "done"):
                if (folder / name).is_dir():
                    (folder / name).rmdir()
            (folder / "lock").unlink(missing_ok=True)
            folder.rmdir()
        except OSError:
            return


def describe_run(result: Compacted, dest: str, *, min_age: str, kept: bool) -> str:
    """The one line a run prints."""
    line = (
        f"{dest}: {result.files_in:,} files in, {result.records_in:,} records in, "
        f"{result.files_out:,} files out, {result.partitions:,} partitions"
    )
    notes: list[str] = []
    if kept:
        notes.append("sources kept")
    elif result.sources_removed:
        notes.append(f"{result.sources_removed:,} sources removed")
    if result.too_new:
        notes.append(f"{result.too_new:,} newer than --min-age {min_age} left")
    if result.already_compacted and kept:
        notes.append(f"{result.already_compacted:,} compacted before")
    if result.changed:
        notes.append(f"{result.changed:,} changed while read left")
    if result.skipped:
        notes.append(f"{len(result.skipped):,} bad skipped")
    if result.rolled_up:
        notes.append(f"{result.rolled_up:,} closed partitions rolled up into a file each")
    return line + (f" ({'; '.join(notes)})" if notes else "")
