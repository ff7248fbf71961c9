"""Records as a dataset: files, directories and globs resolve to the record files they hold
(temporary and foreign files left out), read as one frame equal to the single file of the same
rows; a path that names nothing, or a bad file, is one line naming it (or, skipped, counted)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from fleetwatch.records import RecordError, read_records, write_records
from fleetwatch.records.dataset import (
    check_paths,
    count_rows,
    data_bytes,
    describe,
    read_dataset,
    resolve,
)
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet
from tests.records.plugin_tree import PluginTree, plugin_tree


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> PluginTree:
    return plugin_tree(tmp_path_factory.mktemp("dataset") / "fleet")


def _names(paths: list[Path], root: Path) -> list[str]:
    return [p.relative_to(root).as_posix() for p in paths]


def test_a_directory_is_every_record_file_under_it_sorted(tree: PluginTree) -> None:
    files = resolve([tree.root])
    assert len(files) == tree.files == 18
    assert files == sorted(files)
    assert _names(files, tree.root)[:3] == [
        "replica-0/records-000000.jsonl",
        "replica-0/records-000001.jsonl",
        "replica-0/records-000002.parquet",
    ]


def test_temporary_dot_and_foreign_files_are_never_part_of_it(tree: PluginTree) -> None:
    for files in (resolve([tree.root]), resolve([f"{tree.root}/**/*"])):
        names = {p.name for p in files}
        assert not any(n.startswith(".") or n.endswith((".tmp", ".txt")) for n in names)
        assert len(files) == tree.files


def test_a_quoted_glob_matches_at_any_depth_and_mixes_formats(tree: PluginTree) -> None:
    assert len(resolve([f"{tree.root}/**/*.jsonl"])) == 12
    assert len(resolve([f"{tree.root}/*/records-000002.parquet"])) == 6
    assert resolve([f"{tree.root}/replica-[01]"]) == resolve(
        [tree.root / "replica-0", tree.root / "replica-1"]
    )


def test_files_dirs_and_globs_mix_in_order_and_a_file_named_twice_is_read_once(
    tree: PluginTree,
) -> None:
    one = tree.root / "replica-5" / "records-000000.jsonl"
    files = resolve([one, tree.root / "replica-0", f"{tree.root}/replica-*/*.parquet"])
    assert files[0] == one and files[1:4] == resolve([tree.root / "replica-0"])
    assert len(files) == 1 + 3 + 5  # replica-0's Parquet file is already in
    assert len(resolve([one, one])) == 1


def test_a_file_linked_twice_is_read_once_and_one_gone_since_listing_is_kept(
    tree: PluginTree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files are one file however they are named (a hard link too); a file pruned between the
    listing and the check is kept, so reading it names it, not a crash here."""
    import fleetwatch.records.dataset as dataset

    one = tree.root / "replica-5" / "records-000000.jsonl"
    link = tmp_path / "link.jsonl"
    link.hardlink_to(one)
    assert resolve([one, link]) == [one]
    gone = tmp_path / "gone.jsonl"
    monkeypatch.setattr(dataset, "_expand", lambda arg, allow_empty: [gone])
    assert resolve([gone]) == [gone]


def test_one_folder_is_sorted_as_paths_and_a_file_it_holds_twice_is_read_once(
    tree: PluginTree, tmp_path: Path
) -> None:
    """One folder's files are sorted as ``Path`` sorts them (by parts, not by string: ``a/b``
    before ``a-c``); a hard link inside it is the file it names, and so is a symlink."""
    one = tree.root / "replica-5" / "records-000000.jsonl"
    top = tmp_path / "one"
    for name in ("a/b.jsonl", "a-c.jsonl", "a/a/z.jsonl", "a.b/x.jsonl", "ab.jsonl"):
        (top / name).parent.mkdir(parents=True, exist_ok=True)
        (top / name).write_bytes(one.read_bytes())
    files = resolve([top])
    assert files == sorted(files) and len(files) == 5
    assert _names(files, top)[:2] == ["a/a/z.jsonl", "a/b.jsonl"]
    (top / "zz-hard.jsonl").hardlink_to(top / "ab.jsonl")  # named after: the first name kept
    assert resolve([top]) == files
    (top / "zz-soft.jsonl").symlink_to(top / "a-c.jsonl")
    assert resolve([top]) == files
    (top / "z.jsonl").write_bytes(one.read_bytes())
    assert resolve([top]) == [*files, top / "z.jsonl"]


def test_the_dataset_reads_as_the_single_file_of_its_rows(tree: PluginTree) -> None:
    data = read_dataset([tree.root])
    whole = read_records(tree.whole)
    assert data.rows == len(data.frame) == tree.rows == len(whole)
    assert data.files == tuple(resolve([tree.root])) and data.skipped == ()
    pd.testing.assert_frame_equal(data.frame, whole)


def test_count_rows_and_bytes_cover_the_dataset(tree: PluginTree) -> None:
    files = resolve([tree.root])
    assert count_rows(files, 10**9) == tree.rows
    assert data_bytes(files) > 0


def test_count_rows_stops_once_past_the_cap(tree: PluginTree) -> None:
    n = count_rows(resolve([tree.root]), 100)  # 80 rows a file: two files, then it stops
    assert n == 160


@pytest.mark.parametrize(
    ("arg", "needle"),
    [
        ("missing", "missing: no such file or directory"),
        ("empty-dir", "empty-dir: is a directory holding no record files"),
        ("only-foreign", "only-foreign: is a directory holding no record files"),
        ("*.nothing", "*.nothing: no record files (*.jsonl, *.parquet) match this pattern"),
        ("notes.txt", "notes.txt: unknown record format"),
        (".seg.jsonl.ab12.tmp", ".seg.jsonl.ab12.tmp: unknown record format"),
    ],
)
def test_a_path_naming_no_records_is_one_error_naming_it(
    tmp_path: Path, arg: str, needle: str
) -> None:
    (tmp_path / "empty-dir").mkdir()
    (tmp_path / "only-foreign").mkdir()
    (tmp_path / "only-foreign" / ".records-000001.jsonl.0a1b.tmp").write_text("{")
    (tmp_path / "only-foreign" / "x.csv").write_text("a,b\n")
    (tmp_path / "notes.txt").write_text("hi")
    (tmp_path / ".seg.jsonl.ab12.tmp").write_text("{")
    for check in (resolve, check_paths):  # the checks before a command reads say the same
        with pytest.raises(RecordError) as info:
            check([tmp_path / arg])
        assert needle in str(info.value) and "\n" not in str(info.value)
        assert str(info.value).startswith(str(tmp_path / arg))


def test_checking_paths_lists_no_directory_whole(
    tree: PluginTree, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory holding record files passes the check at its first one: the engine lists
    it once, when it opens it."""
    import os

    folders = {p.parent for p in resolve([tree.root])}
    opened: list[str] = []
    real = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: opened.append(path) or real(path))
    check_paths([tree.root, tree.whole])
    assert len(opened) == 2 < len(folders)  # the top folder, and one holding a record file


def _bad_tree(tmp_path: Path) -> tuple[Path, int]:
    root = tmp_path / "fleet"
    root.mkdir()
    write_records(root / "a.jsonl", synthetic_fleet(3, 20, seed=1))
    write_records(root / "c.parquet", synthetic_fleet(3, 20, seed=2))
    (root / "b.jsonl").write_text('{"request_id": "x"}\n')  # a record missing its fields
    (root / "d.parquet").write_bytes(b"PAR1 not really")
    (root / "e.jsonl").write_bytes(b"\x1f\x8b\x08\x00 gzip, not text \xff\xfe\n")
    return root, 120


def test_a_bad_file_stops_the_read_naming_it(tmp_path: Path) -> None:
    root, _ = _bad_tree(tmp_path)
    with pytest.raises(RecordError, match=r"b\.jsonl, row 1, field '\w+': is missing"):
        read_dataset([root])
    with pytest.raises(RecordError, match=r"e\.jsonl: not UTF-8 text"):
        read_dataset([root / "e.jsonl"])


def test_skip_bad_leaves_out_and_lists_the_bad_files(tmp_path: Path) -> None:
    root, good_rows = _bad_tree(tmp_path)
    data = read_dataset([root], skip_bad=True)
    assert data.rows == good_rows
    assert [p.name for p in data.files] == ["a.jsonl", "c.parquet"]
    assert [p.name for p, _ in data.skipped] == ["b.jsonl", "d.parquet", "e.jsonl"]
    assert "not a readable Parquet file" in data.skipped[1][1]


def test_an_empty_dataset_reads_as_an_empty_file_does(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text("")
    (tmp_path / "b.jsonl").write_text("\n")
    data = read_dataset([tmp_path])
    empty = read_records(tmp_path / "a.jsonl")
    assert data.rows == 0
    pd.testing.assert_frame_equal(data.frame, empty)


def test_describe_names_the_paths_and_counts_files(tree: PluginTree) -> None:
    one = tree.root / "replica-0" / "records-000000.jsonl"
    assert describe([one], resolve([one])) == str(one)
    assert describe([tree.root], resolve([tree.root])) == f"{tree.root} (18 files)"
