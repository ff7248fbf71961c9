"""`records prune`: whole hour (or day) partitions whose hour ended by the cutoff go, and nothing
newer; other record files go by their Parquet statistics or their mtime; a dry run removes
nothing and says the same; a SIGKILL mid-prune leaves each partition whole or invisible, and the
next run finishes; bad input is one line and exit 2."""

from __future__ import annotations

import dataclasses
import io
import math
import os
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fleetwatch.cli import main
from fleetwatch.core.records import RequestRecord, write_records
from fleetwatch.records.compact import compact
from fleetwatch.records.hive import STATE_DIR, writer_lock
from fleetwatch.records.prune import KILL_AT_ENV, STAGES, prune
from tests.records.conftest import Runs
from tests.records.segment_tree import START_S, SegmentTree, count_ids, segment_tree

HOUR = 3600.0


def _hive(root: Path, *, start_s: float = START_S) -> tuple[Path, SegmentTree]:
    """A compacted dataset of 2 replicas over 40 hours from ``start_s`` (one record a 50 min)."""
    tree = segment_tree(
        root / "src", replicas=2, segments=12, per_segment=4, span_s=40 * HOUR, start_s=start_s
    )
    dest = root / "dest"
    compact([tree.root], dest, now=start_s + 60 * HOUR)
    return dest, tree


def _kept_after(tree: SegmentTree, cutoff: float) -> set[str]:
    """The ids a prune at ``cutoff`` keeps: those whose finishing hour ends after it."""
    return {
        r.request_id for r in tree.records if math.floor(r.finished_s / HOUR) * HOUR + HOUR > cutoff
    }


def _finished_at(record: RequestRecord, finished_s: float) -> RequestRecord:
    return dataclasses.replace(
        record,
        arrival_s=finished_s - 1.5,
        scheduled_s=finished_s - 1.4,
        first_token_s=finished_s - 1.0,
        finished_s=finished_s,
    )


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and STATE_DIR not in p.parts
    }


def test_partitions_go_whole_once_their_hour_has_ended(scratch: Path) -> None:
    dest, tree = _hive(scratch)
    now = START_S + 30 * HOUR + 1800  # cutoff 16:30 on the first day; a record at 16:15
    result = prune(dest, older_than_s=24 * HOUR, now=now)
    cutoff = now - 24 * HOUR
    assert result.cutoff_s == cutoff
    kept = set(count_ids(dest))
    assert kept == _kept_after(tree, cutoff)
    gone = tree.ids - kept
    assert gone and all(r.finished_s < cutoff for r in tree.records if r.request_id in gone)
    assert any(r.finished_s < cutoff for r in tree.records if r.request_id in kept)  # 16:xx
    assert result.partitions == 6 and {r.by for r in result.removals} == {"partition name"}
    assert all(r.path.name.startswith("hour=") for r in result.removals)
    assert (dest / "date=2025-12-01" / "hour=16").is_dir()
    assert result.files == 6 * 2 and result.bytes == sum(r.bytes for r in result.removals) > 0


def test_a_day_wholly_past_goes_as_one_partition(scratch: Path) -> None:
    dest, tree = _hive(scratch)
    now = START_S + 50 * HOUR  # cutoff 2025-12-02T12:00
    result = prune(dest, older_than_s=24 * HOUR, now=now)
    names = [r.path.relative_to(dest).as_posix() for r in result.removals]
    assert names[0] == "date=2025-12-01"
    assert names[1:] == [f"date=2025-12-02/hour={h:02d}" for h in range(12)]
    assert set(count_ids(dest)) == _kept_after(tree, now - 24 * HOUR)
    assert not (dest / "date=2025-12-01").exists()


def test_a_day_whose_last_hour_goes_goes_with_it(scratch: Path) -> None:
    dest, _ = _hive(scratch)
    prune(dest, older_than_s=HOUR, now=START_S + 41 * HOUR)  # every hour written has ended
    assert count_ids(dest) == {}
    assert sorted(p.name for p in dest.iterdir()) == [STATE_DIR]


def test_a_dry_run_removes_nothing_and_says_what_a_run_would(scratch: Path) -> None:
    dest, _ = _hive(scratch)
    before = _snapshot(dest)
    now = START_S + 50 * HOUR
    dry = prune(dest, older_than_s=24 * HOUR, now=now, dry_run=True)
    assert _snapshot(dest) == before
    real = prune(dest, older_than_s=24 * HOUR, now=now)
    assert dry == real
    again = prune(dest, older_than_s=24 * HOUR, now=now)
    assert again.removals == ()


def test_raw_segments_go_by_parquet_statistics_or_else_by_mtime(tmp_path: Path) -> None:
    tree = segment_tree(tmp_path / "raw", replicas=1, segments=4, parquet_every=2, span_s=60)
    folder = tree.root / "replica-0"
    jsonl_old, parquet_new_mtime, jsonl_new, parquet_old_mtime = tree.files
    cutoff = START_S + 7 * 86400.0
    now = cutoff + 7 * 86400.0
    os.utime(jsonl_old, (cutoff - 10, cutoff - 10))  # sealed before the cutoff: goes
    os.utime(jsonl_new, (cutoff + 10, cutoff + 10))  # old records, but the mtime says new: stays
    os.utime(parquet_new_mtime, (now, now))  # statistics say old: goes
    # this file's records finished after the cutoff: it stays, though its mtime is old
    write_records(parquet_old_mtime, [_finished_at(r, cutoff + 5) for r in tree.records[9:]])
    os.utime(parquet_old_mtime, (cutoff - 10, cutoff - 10))
    result = prune(tree.root, older_than_s=7 * 86400.0, now=now)
    assert not jsonl_old.exists() and not parquet_new_mtime.exists()
    assert jsonl_new.exists() and parquet_old_mtime.exists()
    (removal,) = result.removals
    assert (removal.path, removal.partition, removal.files) == (folder, False, 2)
    assert removal.by == "Parquet statistics and file mtime"
    assert sorted(p.name for p in folder.iterdir() if p not in tree.files) == [
        ".vllm-4000-000005.jsonl.5e1f0a.tmp",
        "notes.txt",
    ]


# -- the command line: lines printed, bad input ----------------------------------------------------


def test_the_command_prints_each_removal_and_the_totals(
    scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    start = math.floor(time.time() / HOUR) * HOUR - 60 * HOUR
    dest, tree = _hive(scratch, start_s=start)
    assert main(["records", "prune", str(dest), "--older-than", "2d", "--dry-run"]) == 0
    dry = capsys.readouterr().out.splitlines()
    assert dry[0].startswith(f"would remove {dest}/date=") and dry[-1].startswith(
        f"{dest}: would remove "
    )
    assert main(["records", "prune", str(dest), "--older-than", "2d"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.replace("would remove", "removed") for line in dry[:-1]] == out[:-1]
    assert "partitions" in out[-1] and "bytes" in out[-1] and "finished before" in out[-1]
    assert set(count_ids(dest)) < tree.ids


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--older-than", "7x"], "--older-than must be a duration"),
        (["--older-than", "0s"], "--older-than must be longer than zero"),
    ],
)
def test_a_bad_age_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: str
) -> None:
    assert main(["records", "prune", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err


def test_a_missing_or_file_destination_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "r.jsonl"
    file.write_text("")
    for path, words in ((tmp_path / "nope", "no such folder"), (file, "this is a file")):
        assert main(["records", "prune", str(path), "--older-than", "7d"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err and str(path) in err


def test_a_prune_is_refused_while_a_compact_runs(
    scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest, tree = _hive(scratch)
    with writer_lock(dest / STATE_DIR, dataset=str(dest), command="compact"):
        assert main(["records", "prune", str(dest), "--older-than", "1h"]) == 2
    assert "another compact or prune" in capsys.readouterr().err
    assert set(count_ids(dest)) == tree.ids


# -- SIGKILL mid-prune -------------------------------------------------------------------------


@pytest.mark.parametrize("stage", STAGES)
def test_a_kill_mid_prune_leaves_each_partition_whole_or_unseen(
    scratch: Path, fleetwatch_process: Runs, stage: str
) -> None:
    start = math.floor(time.time() / HOUR) * HOUR - 60 * HOUR
    dest, tree = _hive(scratch, start_s=start)
    before = _snapshot(dest)
    argv = ["records", "prune", str(dest), "--older-than", "30h"]
    killed = fleetwatch_process(argv, env={KILL_AT_ENV: stage})
    assert killed.status == -9, killed.output
    (hidden,) = [p for p in dest.rglob(".pruning-*")]
    # what a reader sees: every visible file as it was, and no visible folder missing a file
    after = _snapshot(dest)
    visible = {k: v for k, v in after.items() if "/.pruning-" not in f"/{k}"}
    assert all(before[k] == v for k, v in visible.items())
    folders = {k.rsplit("/", 1)[0] for k in visible}
    assert all(k in visible for k in before if k.rsplit("/", 1)[0] in folders)
    assert set(count_ids(dest)) == tree.ids - _ids_in(before, hidden, dest)
    done = fleetwatch_process(argv)
    assert done.status == 0, done.output
    assert "finished removing 1 partition" in done.output
    assert not list(dest.rglob(".pruning-*"))
    assert set(count_ids(dest)) == _kept_after(tree, time.time() - 30 * HOUR)


def _ids_in(snapshot: dict[str, bytes], hidden: Path, dest: Path) -> set[str]:
    """The ids a hidden partition held before the prune (read from its files' old bytes)."""
    name = hidden.relative_to(dest).as_posix().replace(".pruning-", "")
    ids: set[str] = set()
    for key, data in snapshot.items():
        if key.startswith(name + "/"):
            ids.update(
                pq.read_table(io.BytesIO(data), columns=["request_id"]).column(0).to_pylist()
            )
    return ids
