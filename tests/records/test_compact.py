"""`records compact`: sealed segments become an hour- and replica-partitioned Parquet dataset that
holds every record once, with its values; files too new, unfinished or hidden are left; a rerun,
with sources deleted or kept, adds nothing; bad input is one line and exit 2 with nothing lost;
and a run SIGKILLed at any moment (each named stage, and seeded random moments) loses and
duplicates no record once a later run completes.

Environment: ``FLEETWATCH_SIGKILL_RUNS`` (default 20): runs killed at a seeded random moment."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import shutil
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from fleetwatch.cli import main
from fleetwatch.core.records import write_records
from fleetwatch.core.records.schema import FIELDS, ITL_BOUNDS, RecordError
from fleetwatch.core.records.write import CHECKED_KEY, read_stamp, record_schema
from fleetwatch.records import rollup
from fleetwatch.records.compact import KILL_AT_ENV, STAGES, Journal, compact
from fleetwatch.records.dataset import read_dataset
from fleetwatch.records.dest import write_checked
from fleetwatch.records.hive import (
    MAX_REPLICA_CHARS,
    STATE_DIR,
    partition_dir,
    replica_value,
    writer_lock,
)
from fleetwatch.records.io import parquet_table
from fleetwatch.records.rollup import ROLLUP_AFTER_S, ROLLUP_STAGES, SHARED_MARKER
from tests.records.conftest import Runs
from tests.records.plugin_tree import plugin_tree
from tests.records.segment_tree import (
    START_S,
    SegmentTree,
    count_ids,
    segment_tree,
)

STORED_COLUMNS = [f.name for f in FIELDS]
NOW = START_S + 6 * 3600.0
"""The injected clock: well after every segment's mtime."""
RUNS = int(os.environ.get("FLEETWATCH_SIGKILL_RUNS", "20"))
STORED = [
    "request_id",
    "replica",
    "model",
    "arrival_s",
    "scheduled_s",
    "first_token_s",
    "finished_s",
    "prompt_tokens",
    "output_tokens",
    "status",
]


@pytest.fixture
def tree(tmp_path: Path) -> SegmentTree:
    """3 replicas x 12 segments x 3 records over 3 hours: 9 partitions."""
    return segment_tree(tmp_path / "src", replicas=3, segments=12, parquet_every=4)


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[STORED].sort_values("request_id").reset_index(drop=True)


def _parts(dest: Path) -> list[Path]:
    return sorted(p for p in dest.rglob("*.parquet") if not p.name.startswith("."))


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and STATE_DIR not in p.parts
    }


def test_every_record_lands_once_with_its_values(tree: SegmentTree, tmp_path: Path) -> None:
    before = read_dataset([tree.root]).frame
    result = compact([tree.root], tmp_path / "dest", now=NOW)
    after = read_dataset([tmp_path / "dest"]).frame
    assert (result.files_in, result.records_in) == (36, 108)
    assert after["request_id"].is_unique and set(after["request_id"]) == tree.ids
    pd.testing.assert_frame_equal(_sorted(after), _sorted(before))


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
    before = _snapshot(dest)
    again = compact([tree.root], dest, now=NOW)
    assert (again.files_in, again.files_out) == (0, 0)
    assert _snapshot(dest) == before


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


def _rolled(dest: Path) -> dict[str, list[str]]:
    """Each partition folder's files (hidden ones too), by folder."""
    return {
        d.relative_to(dest).as_posix(): sorted(p.name for p in d.iterdir())
        for d in sorted(dest.glob("date=*/hour=*/replica=*"))
    }


def test_a_closed_hour_s_parts_are_rolled_up_into_one_file(tmp_path: Path) -> None:
    """Batches of one segment leave parts in each partition; every hour ended ROLLUP_AFTER_S ago is
    then one stamped file per replica, in finished_s order, holding every record once with its
    values; the hour that has not is left in parts."""
    sealed = START_S + 3 * 3600.0 + 60  # a minute after the last record finished
    tree = segment_tree(tmp_path / "src", replicas=3, segments=12, parquet_every=4, mtime_s=sealed)
    before = read_dataset([tree.root]).frame
    dest = tmp_path / "dest"
    last_hour_end = (math.floor(max(r.finished_s for r in tree.records) / 3600) + 1) * 3600
    result = compact([tree.root], dest, now=last_hour_end + ROLLUP_AFTER_S - 1, target_rows=1)
    layout = _rolled(dest)
    assert result.rolled_up == 6 and len(layout) == 9
    open_hour = {f for f in layout if f.startswith(partition_dir(last_hour_end - 1, "")[:24])}
    assert len(open_hour) == 3 and all(len(layout[f]) > 1 for f in open_hour)
    for folder, names in layout.items():
        if folder in open_hour:
            continue
        (name,) = names
        assert name.startswith("part-") and name.endswith(".parquet")
        file = pq.ParquetFile(dest / folder / name)
        stamp = read_stamp(file.schema_arrow.metadata[CHECKED_KEY.encode()])
        assert stamp is not None and stamp.rows == file.metadata.num_rows
        finished = file.read(columns=["finished_s"]).column(0).to_pylist()
        assert finished == sorted(finished)
    pd.testing.assert_frame_equal(_sorted(read_dataset([dest]).frame), _sorted(before))
    again = compact([tree.root], dest, now=last_hour_end + ROLLUP_AFTER_S, target_rows=1)
    assert again.rolled_up == 3 and all(len(n) == 1 for n in _rolled(dest).values())
    assert count_ids(dest) == {i: 1 for i in tree.ids}
    assert not list((dest / STATE_DIR / "rollup").iterdir())


def test_a_folder_written_with_a_state_folder_of_its_own_is_never_rolled_up(
    tmp_path: Path,
) -> None:
    """Hosts writing one shared folder, each with its own --state, journal their batches where
    no roll-up looks and may add a part at any moment: once such a run has written the folder
    (its mark in DEST/.compact), no run rolls it up, whatever its state folder."""
    tree = segment_tree(tmp_path / "src", replicas=2, segments=8, parquet_every=0)
    dest = tmp_path / "dest"
    result = compact([tree.root], dest, now=NOW, target_rows=1, state=tmp_path / "state")
    layout = _rolled(dest)
    assert result.rolled_up == 0 and sum(len(n) for n in layout.values()) == result.files_out
    assert all(len(n) > 1 for n in layout.values())
    mark = dest / STATE_DIR / SHARED_MARKER
    assert mark.read_text().strip() == str((tmp_path / "state").resolve())
    assert compact([tree.root], dest, now=NOW).rolled_up == 0  # the folder's own state: still not
    assert _rolled(dest) == layout
    mark.unlink()  # an operator who has moved every host to the folder's own state
    assert compact([tree.root], dest, now=NOW).rolled_up == len(layout)


def test_a_state_folder_of_its_own_leaves_no_trace_on_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "bad.jsonl").write_text("not json\n")
    os.utime(tmp_path / "src" / "bad.jsonl", (NOW - 60, NOW - 60))
    with pytest.raises(RecordError):
        compact([tmp_path / "src"], tmp_path / "dest", now=NOW, state=tmp_path / "state")
    assert not (tmp_path / "dest").exists() and not (tmp_path / "state").exists()


def test_a_part_that_no_longer_says_what_its_stamp_says_is_not_rolled_up(
    tree: SegmentTree, tmp_path: Path
) -> None:
    """A part rewritten since it was stamped (a count negated, the stamp kept) would have its
    rows stamped checked again, unchecked: its partition is left in parts."""
    dest = tmp_path / "dest"
    _in_parts(tree, dest)
    folders = sorted(dest.glob("date=*/hour=*/replica=*"))
    part = sorted(folders[0].iterdir())[0]
    table = pq.read_table(part)
    at = table.schema.get_field_index("output_tokens")
    bent = table.set_column(at, "output_tokens", pc.negate(table["output_tokens"]))
    pq.write_table(bent, part)  # the schema's metadata, and so the stamp, kept
    foreign = sorted(folders[1].iterdir())[0]
    pq.write_table(
        pq.read_table(foreign).append_column(
            "gpu", pa.nulls(1).cast(pa.string()).take([0] * pq.read_metadata(foreign).num_rows)
        ),
        foreign,
    )
    result = compact([tree.root], dest, now=NOW)
    assert result.rolled_up == len(folders) - 2
    assert len(list(folders[0].iterdir())) > 1 and len(list(folders[1].iterdir())) > 1


def test_a_partition_that_fails_is_left_and_the_others_are_rolled_up(
    tree: SegmentTree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = tmp_path / "dest"
    _in_parts(tree, dest)
    first = _closed_first(dest)
    real = rollup._merged

    def merged(parts: list[Path]) -> pa.Table:
        if parts[0].parent == first:
            raise pa.ArrowInvalid("a data page that does not decode")
        return real(parts)

    monkeypatch.setattr(rollup, "_merged", merged)
    result = compact([tree.root], dest, now=NOW)
    assert result.rolled_up == 8
    (said,) = result.not_rolled_up
    assert str(first) in said and "a data page that does not decode" in said
    assert len(list(first.iterdir())) > 1
    assert not list(dest.rglob(".rollup-*")) and not list((dest / STATE_DIR / "rollup").iterdir())
    assert count_ids(dest) == {i: 1 for i in tree.ids}


def test_where_folders_cannot_be_exchanged_every_partition_stays_in_parts(
    tree: SegmentTree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file system without ``RENAME_EXCHANGE`` (renameat2 refused): nothing rolled up, the
    parts as they were, no hidden folder or journal left."""
    dest = tmp_path / "dest"
    _in_parts(tree, dest)
    before = _snapshot(dest)
    monkeypatch.setattr(rollup, "_exchange", lambda a, b: False)
    result = compact([tree.root], dest, now=NOW)
    assert result.rolled_up == 0 and result.not_rolled_up == ()
    assert _snapshot(dest) == before and not list(dest.rglob(".rollup-*"))
    assert not list((dest / STATE_DIR / "rollup").iterdir())


def test_renameat2_exchanges_two_folders(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    (b / "y").write_text("b")
    assert rollup._exchange(a, b)  # as the roll-up tests above need of this file system
    assert [p.name for p in a.iterdir()] == ["y"] and [p.name for p in b.iterdir()] == ["x"]


def test_a_run_rolls_up_the_newest_hours_first_up_to_its_rows(
    tree: SegmentTree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = tmp_path / "dest"
    _in_parts(tree, dest)
    monkeypatch.setattr(rollup, "ROLLUP_ROWS_PER_RUN", 30)  # three partitions of 12 rows
    assert compact([tree.root], dest, now=NOW).rolled_up == 3
    hours = {f.split("/")[1]: len(n) for f, n in _rolled(dest).items() if len(n) == 1}
    assert len(hours) == 1 and max(f.split("/")[1] for f in _rolled(dest)) in hours
    assert compact([tree.root], dest, now=NOW).rolled_up == 3


def _in_parts(tree: SegmentTree, dest: Path) -> None:
    """``tree`` compacted into ``dest`` a segment a batch, nothing rolled up."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(rollup, "ROLLUP_AFTER_S", math.inf)
        assert compact([tree.root], dest, now=NOW, target_rows=1).rolled_up == 0
    assert all(len(n) > 1 for n in _rolled(dest).values())


def _closed_first(dest: Path) -> Path:
    """The partition a run rolls up first: of the newest hour, the least name."""
    folders = sorted(dest.glob("date=*/hour=*/replica=*"))
    newest = max(f.parent.name for f in folders)
    return min(f for f in folders if f.parent.name == newest)


@pytest.mark.parametrize("stage", ROLLUP_STAGES)
def test_a_kill_at_each_roll_up_stage_shows_readers_every_record_once(
    scratch: Path, fleetwatch_process: Runs, stage: str
) -> None:
    """While a killed roll-up waits for the next run, and after it, a reader of the dataset
    finds every record once: the partition holds its parts or their one file, never both."""
    tree = segment_tree(scratch / "src", replicas=3, segments=6, parquet_every=0)
    dest = scratch / "dest"
    argv = _compact_argv(tree.root, dest, "--target-rows", "1")
    killed = fleetwatch_process(argv, env={KILL_AT_ENV: stage})
    assert killed.status == -9, killed.output
    assert count_ids(dest) == {i: 1 for i in tree.ids}
    (journal,) = (dest / STATE_DIR / "rollup").glob("*.json")
    done = fleetwatch_process(argv)
    assert done.status == 0, done.output
    said = "finished the roll-up" if stage == "rollup-after-exchange" else "undid the roll-up"
    assert said in done.output and "closed partitions rolled up" in done.output
    assert not journal.exists() and not list(dest.rglob(".rollup-*"))
    assert all(len(names) == 1 for names in _rolled(dest).values())
    assert count_ids(dest) == {i: 1 for i in tree.ids}


def test_a_partition_holding_anything_but_stamped_parts_is_left_as_it_is(
    tree: SegmentTree, tmp_path: Path
) -> None:
    dest = tmp_path / "dest"
    compact([tree.root], dest, now=tmp_path.stat().st_mtime + 1, target_rows=1_000_000)
    folders = sorted(dest.glob("date=*/hour=*/replica=*"))
    (dest / "notes").mkdir()
    extra = folders[0] / "notes.txt"
    extra.write_text("an operator's file\n")
    lone = next(folders[1].glob("part-*.parquet"))
    pq.write_table(pq.read_table(lone).replace_schema_metadata(None), folders[1] / "part-x.parquet")
    assert compact([tree.root], dest, now=NOW).rolled_up == 0
    assert extra.exists() and len(list(folders[1].iterdir())) == 2


def test_parts_written_before_one_schema_roll_up_into_it(tmp_path: Path) -> None:
    """Parts kept from before ``record_schema`` (the gaps a null column in one, a list in
    another; a column left out of a third) are rolled up into one file of the record schema
    holding every row and value."""
    frame = read_dataset([segment_tree(tmp_path / "src", replicas=1, segments=3).root]).frame
    table = parquet_table(frame).drop_columns(["itl_buckets"]).replace_schema_metadata(None)
    n = table.num_rows
    none = [0] * (len(ITL_BOUNDS) + 1)  # no gaps counted: valid whatever the output
    gaps = pa.array([none] * n, type=pa.list_(pa.int64()))
    folder = tmp_path / "dest" / partition_dir(START_S, "r")
    folder.mkdir(parents=True)
    kinds = [
        table.append_column("itl_buckets", pa.nulls(n)),
        table.append_column("itl_buckets", gaps),
        table.drop_columns(["trace_id"]),
    ]
    for i, part in enumerate(kinds):
        ids = pa.array([f"{x}-{i}" for x in part["request_id"].to_pylist()], pa.large_string())
        part = part.set_column(part.schema.get_field_index("request_id"), "request_id", ids)
        write_checked(part.replace_schema_metadata(None), folder / f"part-{i}.parquet")
    (tmp_path / "nothing").mkdir()
    assert compact([tmp_path / "nothing"], tmp_path / "dest", now=NOW).rolled_up == 1
    (merged,) = folder.iterdir()
    got = pq.read_table(merged)
    assert got.schema.remove_metadata() == record_schema(got.column_names)
    assert sorted(got["request_id"].to_pylist()) == sorted(
        f"{x}-{i}" for i in range(3) for x in frame["request_id"]
    )
    assert [x for x in got["itl_buckets"].to_pylist() if x is not None] == [none] * n


def test_a_partition_of_more_rows_than_a_roll_up_holds_is_left_in_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = segment_tree(tmp_path / "src", replicas=1, segments=8, parquet_every=0)
    monkeypatch.setattr(rollup, "ROLLUP_MAX_ROWS", 5)
    result = compact([tree.root], tmp_path / "dest", now=NOW, target_rows=1)
    assert result.rolled_up == 0 and all(len(n) > 1 for n in _rolled(tmp_path / "dest").values())


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
    before = _snapshot(dest)
    journal = dest / STATE_DIR / folder / "0123.json"
    journal.parent.mkdir(exist_ok=True)
    journal.write_text(text)
    err = _fails(_compact_argv(tree.root, dest), capsys)
    assert str(journal) in err and f"not a {kind} journal" in err
    assert _snapshot(dest) == before and all(p.exists() for p in tree.files)


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


def _compact_argv(src: Path, dest: Path, *extra: str) -> list[str]:
    return ["records", "compact", str(src), "--out", str(dest), *extra]


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
    argv = _compact_argv(tree.root, dest, *(("--keep-sources",) if keep else ()))
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
    argv = _compact_argv(tree.root, dest)
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
    argv = _compact_argv(tree.root, first, "--state", str(state))
    assert fleetwatch_process(argv, env={KILL_AT_ENV: "mid-delete"}).status == -9
    err = _fails(_compact_argv(tree.root, other, "--state", str(state)), capsys)
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
    argv = _compact_argv(calibrate / "src", calibrate / "dest", "--target-rows", "30")
    assert fleetwatch_process(argv).status == 0
    whole_s = time.monotonic() - started  # scales the delays; nothing is asserted on time
    killed = 0
    for run in range(RUNS):
        here = scratch / f"run-{run}"
        shutil.copytree(many_segments.root, here / "src")
        argv = _compact_argv(here / "src", here / "dest", "--target-rows", "30")
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
        assert all(len(names) == 1 for names in _rolled(here / "dest").values())
        shutil.rmtree(here)
    assert killed  # the delays reach a little past a whole run: most runs die part-way
