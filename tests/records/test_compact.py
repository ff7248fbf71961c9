"""`records compact`: sealed segments become an hour- and replica-partitioned Parquet dataset that
holds every record once, with its values; files too new, unfinished or hidden are left; a rerun,
with sources deleted or kept, adds nothing; bad input is one line and exit 2 with nothing lost;
and a run SIGKILLed at any moment (each named stage, and seeded random moments) loses and
duplicates no record once a later run completes.

Environment: ``FLEETWATCH_SIGKILL_RUNS`` (default 20): runs killed at a seeded random moment."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from fleetwatch.cli import main
from fleetwatch.core.records import write_records
from fleetwatch.core.records.schema import FIELDS, ITL_BOUNDS
from fleetwatch.core.records.write import record_schema
from fleetwatch.records.compact import KILL_AT_ENV, STAGES, Journal, compact
from fleetwatch.records.dataset import read_dataset
from fleetwatch.records.hive import (
    MAX_REPLICA_CHARS,
    STATE_DIR,
    partition_dir,
    replica_value,
    writer_lock,
)
from tests.records.conftest import Runs
from tests.records.plugin_tree import plugin_tree
from tests.records.segment_tree import (
    START_S,
    SegmentTree,
    by_request,
    compact_argv,
    count_ids,
    partition_files,
    segment_tree,
    snapshot,
)

STORED_COLUMNS = [f.name for f in FIELDS]
NOW = START_S + 6 * 3600.0
"""The injected clock: well after every segment's mtime."""
RUNS = int(os.environ.get("FLEETWATCH_SIGKILL_RUNS", "20"))


@pytest.fixture
def tree(tmp_path: Path) -> SegmentTree:
    """3 replicas x 12 segments x 3 records over 3 hours: 9 partitions."""
    return segment_tree(tmp_path / "src", replicas=3, segments=12, parquet_every=4)


def _parts(dest: Path) -> list[Path]:
    return sorted(p for p in dest.rglob("*.parquet") if not p.name.startswith("."))


def test_every_record_lands_once_with_its_values(tree: SegmentTree, tmp_path: Path) -> None:
    before = read_dataset([tree.root]).frame
    result = compact([tree.root], tmp_path / "dest", now=NOW)
    after = read_dataset([tmp_path / "dest"]).frame
    assert (result.files_in, result.records_in) == (36, 108)
    assert after["request_id"].is_unique and set(after["request_id"]) == tree.ids
    pd.testing.assert_frame_equal(by_request(after), by_request(before))


def test_each_partition_holds_its_hour_and_replica_in_one_zstd_file(
    tree: SegmentTree, tmp_path: Path
) -> None:
    dest = tmp_path / "dest"
    result = compact([tree.root], dest, now=NOW)
    parts = _parts(dest)
    folders = {p.parent.relative_to(dest).as_posix() for p in parts}
    assert result.partitions == len(folders) == len(parts) == result.files_out == 3 * 3
    assert "date=2025-12-01/hour=10/replica=10.0.0.0%3A8000" in folders
    for p in parts:
        frame = pq.read_table(p).to_pandas()
        folder = p.parent.relative_to(dest).as_posix()
        rows = zip(frame.finished_s, frame.replica, strict=True)
        assert {partition_dir(f, r) for f, r in rows} == {folder}
        assert list(frame.finished_s) == sorted(frame.finished_s)
        assert pq.ParquetFile(p).metadata.row_group(0).column(0).compression == "ZSTD"


def test_sources_merged_are_removed_and_nothing_else(tree: SegmentTree, tmp_path: Path) -> None:
    result = compact([tree.root], tmp_path / "dest", now=NOW)
    assert result.sources_removed == len(tree.files)
    assert not any(p.exists() for p in tree.files)
    left = sorted(p.name for p in tree.root.rglob("*") if p.is_file())
    assert len(left) == 6 and all(n == "notes.txt" or n.endswith(".tmp") for n in left)


def test_the_dataset_commands_read_the_compacted_folder_as_the_same_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = plugin_tree(tmp_path / "fleet")
    for p in fleet.root.rglob("*"):
        os.utime(p, (NOW - 60, NOW - 60))
    dest = tmp_path / "dest"
    assert compact([fleet.root], dest, now=NOW).records_in == fleet.rows
    assert main(["fleet", "tail", str(fleet.whole)]) == 0
    whole = capsys.readouterr().out
    assert main(["fleet", "tail", str(dest)]) == 0
    assert capsys.readouterr().out == whole and "e2e tail" in whole


def test_files_newer_than_min_age_wait_for_a_later_run(tree: SegmentTree, tmp_path: Path) -> None:
    young = tree.files[:2]
    for p in young:
        os.utime(p, (NOW - 10, NOW - 10))
    dest = tmp_path / "dest"
    first = compact([tree.root], dest, now=NOW, min_age_s=30)
    assert (first.files_in, first.too_new) == (34, 2)
    assert all(p.exists() for p in young)
    assert count_ids(dest, tree.root) == {i: 1 for i in tree.ids}
    later = compact([tree.root], dest, now=NOW + 30, min_age_s=30)
    assert (later.files_in, later.too_new) == (2, 0)
    assert count_ids(dest, tree.root) == {i: 1 for i in tree.ids}


def test_unfinished_and_hidden_files_are_never_taken(tree: SegmentTree, tmp_path: Path) -> None:
    hidden = tree.root / "replica-0" / ".vllm-9-000001.jsonl"
    staged = tree.root / ".staging" / "vllm-9-000002.jsonl"
    staged.parent.mkdir()
    for p in (hidden, staged):
        shutil.copy2(tree.files[0], p)
    temps = sorted(tree.root.rglob("*.tmp"))
    dest = tmp_path / "dest"
    named = [str(tree.root), str(hidden)]  # a dotfile named on its own is not taken either
    compact(named, dest, now=NOW)
    assert hidden.exists() and staged.exists() and all(p.exists() for p in temps)
    assert count_ids(dest) == {i: 1 for i in tree.ids}


def test_a_second_run_finds_nothing_and_changes_nothing(tree: SegmentTree, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    compact([tree.root], dest, now=NOW)
    before = snapshot(dest)
    again = compact([tree.root], dest, now=NOW)
    assert (again.files_in, again.files_out) == (0, 0)
    assert snapshot(dest) == before


def test_kept_sources_are_compacted_once_across_runs(tree: SegmentTree, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    first = compact([tree.root], dest, now=NOW, delete_sources=False)
    assert first.files_in == 36 and all(p.exists() for p in tree.files)
    again = compact([tree.root], dest, now=NOW, delete_sources=False)
    assert (again.files_in, again.already_compacted) == (0, 36)
    extra = tree.root / "replica-1" / "vllm-4001-000099.jsonl"
    write_records(extra, [dataclasses.replace(tree.records[0], request_id="late")])
    os.utime(extra, (NOW - 60, NOW - 60))
    third = compact([tree.root], dest, now=NOW, delete_sources=False)
    assert (third.files_in, third.records_in) == (1, 1)
    assert count_ids(dest) == {i: 1 for i in {*tree.ids, "late"}}
    # deleting from then on: what was compacted and kept is removed, and nothing is added
    fourth = compact([tree.root], dest, now=NOW)
    assert (fourth.files_in, fourth.sources_removed) == (0, 37)
    assert count_ids(dest, tree.root) == {i: 1 for i in {*tree.ids, "late"}}


def test_every_file_of_the_dataset_has_one_schema_whatever_its_batch_held(
    tree: SegmentTree, tmp_path: Path
) -> None:
    """A batch in which no record has inter-token gaps (nor a tenant, nor an error) is written
    with the schema of one in which some do: Spark reads a dataset only when its files' schemas
    merge, and a list column does not merge with a null one."""
    dest = tmp_path / "dest"
    compact([tree.root], dest, now=NOW)
    gaps = (19,) + (0,) * len(ITL_BOUNDS)
    late = [
        dataclasses.replace(
            r,
            request_id=f"{r.request_id}-late",
            tenant="t",
            itl_buckets=gaps,
            status="error",
            error_type="timeout",
        )
        for r in tree.records[:6]
    ]
    segment = tmp_path / "late" / "vllm-9000-000001.jsonl"
    write_records(segment, late)
    os.utime(segment, (NOW - 60, NOW - 60))
    compact([tmp_path / "late"], dest, now=NOW)
    schemas = {p: pq.read_schema(p).remove_metadata() for p in _parts(dest)}
    assert set(schemas.values()) == {record_schema(STORED_COLUMNS)}
    assert count_ids(dest) == {r.request_id: 1 for r in [*tree.records, *late]}


def test_target_rows_splits_a_run_into_batches(tree: SegmentTree, tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    result = compact([tree.root], dest, now=NOW, target_rows=20)
    assert result.files_out > result.partitions == 9
    assert count_ids(dest, tree.root) == {i: 1 for i in tree.ids}


def test_a_replica_name_becomes_a_safe_bounded_folder(tmp_path: Path) -> None:
    long = "pool/" + "x" * 300
    assert replica_value("10.0.0.7:8000/dp1") == "10.0.0.7%3A8000%2Fdp1"
    assert replica_value(".hidden") == "%2Ehidden"
    assert len(replica_value(long)) <= MAX_REPLICA_CHARS
    assert replica_value(long) != replica_value(long + "y")
    src = tmp_path / "src"
    segment = src / "a.jsonl"
    tree = segment_tree(tmp_path / "unused", replicas=1, segments=1, parquet_every=0, span_s=60)
    write_records(segment, [dataclasses.replace(r, replica=long) for r in tree.records])
    os.utime(segment, (NOW - 60, NOW - 60))
    compact([src], tmp_path / "dest", now=NOW)
    (part,) = _parts(tmp_path / "dest")
    assert part.parent.name == f"replica={replica_value(long)}"
    assert set(read_dataset([tmp_path / "dest"]).frame["replica"]) == {long}


# -- bad input: one line, exit 2, nothing lost or half-written ---------------------------------


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_an_unknown_source_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope"
    err = _fails(["records", "compact", str(missing), "--out", str(tmp_path / "d")], capsys)
    assert str(missing) in err and "no such file or directory" in err
    assert not (tmp_path / "d").exists()


_OUTSIDE = {"batch": "0123", "partition": "../../x", "parts": [], "output": "part-0.parquet"}


@pytest.mark.parametrize(
    ("folder", "kind", "text"),
    [
        ("journal", "compaction", '{"batch": "0123"'),
        ("rollup", "roll-up", '{"batch": "0123"'),
        ("rollup", "roll-up", json.dumps(_OUTSIDE)),  # settling it would remove ../.rollup-0123
    ],
)
def test_an_unreadable_journal_is_named_and_nothing_is_touched(
    tree: SegmentTree,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    folder: str,
    kind: str,
    text: str,
) -> None:
    dest = tmp_path / "dest"
    compact([tree.root], dest, now=NOW, delete_sources=False)
    before = snapshot(dest)
    journal = dest / STATE_DIR / folder / "0123.json"
    journal.parent.mkdir(exist_ok=True)
    journal.write_text(text)
    err = _fails(compact_argv(tree.root, dest), capsys)
    assert str(journal) in err and f"not a {kind} journal" in err
    assert snapshot(dest) == before and all(p.exists() for p in tree.files)


def test_a_destination_inside_a_source_is_refused(
    tree: SegmentTree, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tree.root / "compacted"
    err = _fails(["records", "compact", str(tree.root), "--out", str(dest)], capsys)
    assert "inside this source" in err and str(tree.root) in err
    assert not dest.exists() and all(p.exists() for p in tree.files)
    glob_src = f"{tree.root.parent}/*"
    err = _fails(["records", "compact", glob_src, "--out", str(dest)], capsys)
    assert "inside this source" in err


def test_a_source_inside_the_destination_is_refused(
    tree: SegmentTree, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _fails(
        ["records", "compact", str(tree.root / "replica-0"), "--out", str(tree.root)], capsys
    )
    assert "inside --out" in err


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('{"request_id": "r", "replica": "a"', "not valid JSON"),
        ('{"arrival_s": ' + "1" * 5000 + "}", "not valid JSON (Exceeds the limit"),
        ("[" * 100_000, "not valid JSON (nested too deeply)"),
        ("NUMBER", "field 'arrival_s': must be finite"),
    ],
)
def test_a_corrupt_segment_is_named_left_in_place_and_nothing_is_written(
    tree: SegmentTree, tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, words: str
) -> None:
    bad = tree.root / "replica-1" / "vllm-4001-000005.jsonl"
    if line == "NUMBER":  # a number beyond every double where a time belongs
        first = json.loads(bad.read_text().splitlines()[0])
        line = json.dumps(first).replace(repr(first["arrival_s"]), "1" + "0" * 400, 1)
    bad.write_text(line + "\n")
    os.utime(bad, (NOW, NOW))
    dest = tmp_path / "dest"
    err = _fails(["records", "compact", str(tree.root), "--out", str(dest)], capsys)
    assert str(bad) in err and "row 1" in err and "left in place" in err and words in err
    assert all(p.exists() for p in tree.files) and not dest.exists()


def test_skip_bad_compacts_the_rest_and_counts_the_bad_one(
    tree: SegmentTree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tree.root / "replica-1" / "vllm-4001-000005.jsonl"
    bad.write_bytes(b"\xff\xfe not text\n")
    os.utime(bad, (NOW, NOW))
    dest = tmp_path / "dest"
    assert main(["records", "compact", str(tree.root), "--out", str(dest), "--skip-bad"]) == 0
    out, err = capsys.readouterr()
    assert "35 files in" in out and "1 bad skipped" in out
    assert "skipped 1 bad segment" in err and "not UTF-8" in err and str(bad) in err
    assert bad.exists() and len(count_ids(dest)) == 105


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--min-age", "soon", "--min-age must be a duration"),
        ("--target-rows", "0", "--target-rows"),
    ],
)
def test_a_bad_option_is_one_line(
    tree: SegmentTree,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    flag: str,
    value: str,
    words: str,
) -> None:
    argv = ["records", "compact", str(tree.root), "--out", str(tmp_path / "d"), flag, value]
    assert words in _fails(argv, capsys)
    assert all(p.exists() for p in tree.files)


def test_object_storage_without_a_state_folder_is_refused(
    tree: SegmentTree, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _fails(["records", "compact", str(tree.root), "--out", "s3://bucket/records"], capsys)
    assert "--state" in err and "s3://bucket/records" in err


def test_a_second_writer_is_refused_while_one_runs(
    tree: SegmentTree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dest = tmp_path / "dest"
    with writer_lock(dest / STATE_DIR, dataset=str(dest), command="test"):
        err = _fails(["records", "compact", str(tree.root), "--out", str(dest)], capsys)
    assert "another compact or prune" in err
    assert all(p.exists() for p in tree.files)


def test_an_unknown_kill_stage_is_refused(
    tree: SegmentTree,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KILL_AT_ENV, "sometime")
    err = _fails(["records", "compact", str(tree.root), "--out", str(tmp_path / "d")], capsys)
    assert KILL_AT_ENV in err and "after-journal" in err


# -- SIGKILL: at each named stage, then at seeded random moments ---------------------------------

_ROLLED_BACK = {"after-journal", "after-first-rename"}


@pytest.mark.parametrize(
    ("stage", "keep"),
    [(stage, False) for stage in STAGES]
    + [(stage, True) for stage in STAGES if stage != "mid-delete"],  # kept: none deleted
    ids=lambda v: {False: "delete", True: "keep"}.get(v, v) if isinstance(v, bool) else v,
)
def test_a_kill_at_each_stage_loses_and_duplicates_nothing(
    scratch: Path, fleetwatch_process: Runs, stage: str, keep: bool
) -> None:
    tree = segment_tree(scratch / "src", replicas=3, segments=6, parquet_every=0)
    dest = scratch / "dest"
    argv = compact_argv(tree.root, dest, *(("--keep-sources",) if keep else ()))
    killed = fleetwatch_process(argv, env={KILL_AT_ENV: stage})
    assert killed.status == -9, killed.output
    (journal,) = (dest / STATE_DIR / "journal").glob("*.json")
    assert len(Journal.load(journal).outputs) == 9
    done = fleetwatch_process(argv)
    assert done.status == 0, done.output
    assert ("rolled back batch" if stage in _ROLLED_BACK else "finished batch") in done.output
    assert list((dest / STATE_DIR / "journal").iterdir()) == []
    assert not list(dest.rglob(".part-*"))
    # every record once in DEST; the sources all gone, or all kept (and DEST has them once)
    assert count_ids(dest, *(() if keep else (tree.root,))) == {i: 1 for i in tree.ids}
    assert all(p.exists() == keep for p in tree.files)
    again = fleetwatch_process(argv)
    assert "0 files in" in again.output
    assert count_ids(dest) == {i: 1 for i in tree.ids}


def test_a_kill_while_finishing_a_stopped_batch_is_survived_too(
    scratch: Path, fleetwatch_process: Runs
) -> None:
    tree = segment_tree(scratch / "src", replicas=3, segments=6, parquet_every=0)
    dest = scratch / "dest"
    argv = compact_argv(tree.root, dest)
    for _ in range(3):  # each run finishes one more deletion of the stopped batch, then dies
        assert fleetwatch_process(argv, env={KILL_AT_ENV: "mid-delete"}).status == -9
    assert 0 < sum(p.exists() for p in tree.files) < len(tree.files)
    assert fleetwatch_process(argv).status == 0
    assert count_ids(dest, tree.root) == {i: 1 for i in tree.ids}
    assert not any(p.exists() for p in tree.files)


def test_a_state_folder_refuses_a_second_destination_while_a_batch_is_stopped(
    scratch: Path, fleetwatch_process: Runs, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = segment_tree(scratch / "src", replicas=2, segments=3, parquet_every=0)
    state, first, other = scratch / "state", scratch / "a", scratch / "b"
    argv = compact_argv(tree.root, first, "--state", str(state))
    assert fleetwatch_process(argv, env={KILL_AT_ENV: "mid-delete"}).status == -9
    err = _fails(compact_argv(tree.root, other, "--state", str(state)), capsys)
    assert f"stopped batch for {first}" in err and not other.exists()
    assert fleetwatch_process(argv).status == 0
    assert count_ids(first, tree.root) == {i: 1 for i in tree.ids}


@pytest.fixture(scope="module")
def many_segments(tmp_path_factory: pytest.TempPathFactory) -> SegmentTree:
    """6 replicas x 20 JSON-lines segments of 3 records over 3 hours: the tree each random kill
    starts from (Parquet sources have their own tests; here they would only slow each run)."""
    return segment_tree(tmp_path_factory.mktemp("template") / "src", segments=20, parquet_every=0)


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_and_duplicates_nothing(
    many_segments: SegmentTree, scratch: Path, fleetwatch_process: Runs
) -> None:
    """Each run: a fresh copy of the tree, `compact` (batches of about 30 rows, so a run passes
    through a dozen batches' windows) killed after a seeded random delay up to a little past
    how long a whole run took once, then run again to completion; every id is then in DEST
    exactly once, and no source is left."""
    rng = random.Random(20261201)
    calibrate = scratch / "calibrate"
    shutil.copytree(many_segments.root, calibrate / "src")
    started = time.monotonic()
    argv = compact_argv(calibrate / "src", calibrate / "dest", "--target-rows", "30")
    assert fleetwatch_process(argv).status == 0
    whole_s = time.monotonic() - started  # scales the delays; nothing is asserted on time
    killed = 0
    for run in range(RUNS):
        here = scratch / f"run-{run}"
        shutil.copytree(many_segments.root, here / "src")
        argv = compact_argv(here / "src", here / "dest", "--target-rows", "30")
        first = fleetwatch_process(argv, kill_after_s=rng.uniform(0.0, 1.2 * whole_s))
        assert first.status in (0, -9), first.output
        second = fleetwatch_process(argv)
        assert second.status == 0, second.output
        killed += first.status == -9
        assert count_ids(here / "dest", here / "src") == {i: 1 for i in many_segments.ids}, (
            f"run {run}: {second.output}"
        )
        assert not count_ids(here / "src")  # every source was removed
        assert not list((here / "dest").rglob(".rollup-*"))  # a stopped roll-up settled
        assert all(len(names) == 1 for names in partition_files(here / "dest").values())
        shutil.rmtree(here)
    assert killed  # the delays reach a little past a whole run: most runs die part-way
