"""`records compact`'s roll-up of closed hours (``records.rollup``): each partition's parts
become one stamped file once its hour has ended, a reader seeing the parts or the file and
never both, whatever moment a run is killed at; what is left in parts (an open hour, a folder
other writers share, a part rewritten since its stamp, a foreign column, too many rows, a file
system that cannot exchange folders) and what a failing partition leaves (nothing)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from fleetwatch.core.records.schema import ITL_BOUNDS, RecordError
from fleetwatch.core.records.write import CHECKED_KEY, read_stamp, record_schema
from fleetwatch.records import rollup
from fleetwatch.records.compact import KILL_AT_ENV, compact
from fleetwatch.records.dataset import read_dataset
from fleetwatch.records.dest import write_checked
from fleetwatch.records.hive import STATE_DIR, partition_dir
from fleetwatch.records.io import parquet_table
from fleetwatch.records.rollup import ROLLUP_AFTER_S, ROLLUP_STAGES, SHARED_MARKER
from tests.records.conftest import Runs
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

NOW = START_S + 6 * 3600.0
"""The injected clock: every hour of the tree ended long before."""


@pytest.fixture
def tree(tmp_path: Path) -> SegmentTree:
    """3 replicas x 12 segments x 3 records over 3 hours: 9 partitions."""
    return segment_tree(tmp_path / "src", replicas=3, segments=12, parquet_every=4)


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
    layout = partition_files(dest)
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
    pd.testing.assert_frame_equal(by_request(read_dataset([dest]).frame), by_request(before))
    again = compact([tree.root], dest, now=last_hour_end + ROLLUP_AFTER_S, target_rows=1)
    assert again.rolled_up == 3 and all(len(n) == 1 for n in partition_files(dest).values())
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
    layout = partition_files(dest)
    assert result.rolled_up == 0 and sum(len(n) for n in layout.values()) == result.files_out
    assert all(len(n) > 1 for n in layout.values())
    mark = dest / STATE_DIR / SHARED_MARKER
    assert mark.read_text().strip() == str((tmp_path / "state").resolve())
    assert compact([tree.root], dest, now=NOW).rolled_up == 0  # the folder's own state: still not
    assert partition_files(dest) == layout
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
    before = snapshot(dest)
    monkeypatch.setattr(rollup, "_exchange", lambda a, b: False)
    result = compact([tree.root], dest, now=NOW)
    assert result.rolled_up == 0 and result.not_rolled_up == ()
    assert snapshot(dest) == before and not list(dest.rglob(".rollup-*"))
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
    hours = {f.split("/")[1]: len(n) for f, n in partition_files(dest).items() if len(n) == 1}
    assert len(hours) == 1 and max(f.split("/")[1] for f in partition_files(dest)) in hours
    assert compact([tree.root], dest, now=NOW).rolled_up == 3


def _in_parts(tree: SegmentTree, dest: Path) -> None:
    """``tree`` compacted into ``dest`` a segment a batch, nothing rolled up."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(rollup, "ROLLUP_AFTER_S", math.inf)
        assert compact([tree.root], dest, now=NOW, target_rows=1).rolled_up == 0
    assert all(len(n) > 1 for n in partition_files(dest).values())


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
    argv = compact_argv(tree.root, dest, "--target-rows", "1")
    killed = fleetwatch_process(argv, env={KILL_AT_ENV: stage})
    assert killed.status == -9, killed.output
    assert count_ids(dest) == {i: 1 for i in tree.ids}
    (journal,) = (dest / STATE_DIR / "rollup").glob("*.json")
    done = fleetwatch_process(argv)
    assert done.status == 0, done.output
    said = "finished the roll-up" if stage == "rollup-after-exchange" else "undid the roll-up"
    assert said in done.output and "closed partitions rolled up" in done.output
    assert not journal.exists() and not list(dest.rglob(".rollup-*"))
    assert all(len(names) == 1 for names in partition_files(dest).values())
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
    assert result.rolled_up == 0 and all(
        len(n) > 1 for n in partition_files(tmp_path / "dest").values()
    )
