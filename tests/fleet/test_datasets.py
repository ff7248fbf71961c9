"""`fleet tail`, `fleet outliers` and `fleet compare` on a dataset (a folder per replica of
JSON-lines segments and a Parquet file, as the plugin leaves them, with a half-written temporary
file and a foreign file beside them): the same verdicts and JSON as the single file of the same
rows; bad files stop the command naming them or, with --skip-bad, are skipped and counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.records import read_records, write_records
from fleetwatch.records.dataset import read_dataset
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet
from tests.records.plugin_tree import PluginTree, plugin_tree, write_tree
from tests.rounding import rounded


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> PluginTree:
    return plugin_tree(tmp_path_factory.mktemp("datasets") / "fleet")


def _json(argv: list[str], capsys: pytest.CaptureFixture[str], status: int = 0) -> object:
    assert main(argv) == status, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


def test_every_row_of_the_dataset_is_read(tree: PluginTree) -> None:
    assert read_dataset([tree.root]).rows == tree.rows == len(read_records(tree.whole))


def test_tail_of_a_directory_is_the_tail_of_its_single_file(
    tree: PluginTree, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = rounded(_json(["fleet", "tail", str(tree.whole), "--json"], capsys))
    assert rounded(_json(["fleet", "tail", str(tree.root), "--json"], capsys)) == whole
    glob = f"{tree.root}/**/records-*"
    assert rounded(_json(["fleet", "tail", glob, "--json"], capsys)) == whole
    replicas = sorted(str(p) for p in tree.root.iterdir())
    assert rounded(_json(["fleet", "tail", *replicas, "--json"], capsys)) == whole
    memory = _json(["fleet", "tail", str(tree.root), "--engine", "memory", "--json"], capsys)
    assert rounded(memory) == whole


def test_outliers_of_a_directory_are_those_of_its_single_file(
    tree: PluginTree, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = _json(["fleet", "outliers", str(tree.whole), "--json"], capsys)
    doc = _json(["fleet", "outliers", f"{tree.root}/**/*.jsonl", f"{tree.root}/*/*.parquet",
                 "--json"], capsys)  # fmt: skip
    assert isinstance(doc, dict) and isinstance(whole, dict)
    assert {f["replica"] for f in doc["findings"]} == {"replica-2"}
    doc.pop("source", None), whole.pop("source", None)
    assert doc == whole


def test_compare_of_two_directories_is_that_of_their_single_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = write_tree(tmp_path / "before", synthetic_fleet(4, 300, seed=1))
    slower = synthetic_fleet(4, 300, seed=2, slowdown={i: 1.3 for i in range(4)})
    after = write_tree(tmp_path / "after", slower)
    opts = ["--draws", "200", "--json"]
    whole = _json(["fleet", "compare", str(before.whole), str(after.whole), *opts], capsys)
    doc = _json(["fleet", "compare", str(before.root), f"{after.root}/**/*", *opts], capsys)
    assert rounded(doc) == rounded(whole)
    memory = ["--engine", "memory"]
    in_memory = _json(
        ["fleet", "compare", str(before.root), str(after.root), *opts, *memory], capsys
    )
    assert rounded(in_memory) == rounded(whole)
    assert isinstance(doc, dict) and "regress" in json.dumps(doc)


def test_compare_takes_exactly_two_runs(
    tree: PluginTree, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fleet", "compare", str(tree.root), str(tree.root), str(tree.whole)]) == 2
    assert "unexpected extra argument" in _one_line_error(capsys).lower()


def test_a_corrupt_file_in_a_directory_is_one_line_naming_it(
    tree: PluginTree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "fleet"
    write_tree(root, synthetic_fleet(4, 60, seed=3))
    (root / "replica-1" / "records-000009.jsonl").write_text('{"request_id": 1\n')
    for argv in (["fleet", "tail", str(root)], ["fleet", "outliers", str(root)],
                 ["fleet", "compare", str(root), str(tree.root)]):  # fmt: skip
        assert main(argv) == 2
        line = _one_line_error(capsys)
        assert "replica-1/records-000009.jsonl, row 1" in line and "not valid JSON" in line


def test_skip_bad_skips_and_counts_the_bad_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "fleet"
    good = write_tree(root, synthetic_fleet(5, 120, seed=4, slowdown={1: 1.8}))
    (root / "replica-0" / "records-000009.jsonl").write_text("not json\n")
    (root / "replica-3" / "records-000009.parquet").write_bytes(b"PAR1 truncated")
    whole = _json(["fleet", "tail", str(good.whole), "--json"], capsys)
    assert main(["fleet", "tail", str(root), "--json", "--skip-bad"]) == 0
    captured = capsys.readouterr()
    assert rounded(json.loads(captured.out)) == rounded(whole)
    warning = captured.err.strip().splitlines()
    assert len(warning) == 1 and f"skipped 2 bad record file(s) of {good.files + 2}" in warning[0]
    assert main(["fleet", "outliers", str(root), "--skip-bad", "--json"]) == 0
    assert "skipped 2 bad record file(s)" in capsys.readouterr().err


def test_the_sinks_temporary_file_alone_is_no_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / ".records-000001.jsonl.5e2a.tmp").write_text('{"half')
    assert main(["fleet", "tail", str(tmp_path)]) == 2
    assert "is a directory holding no record files" in _one_line_error(capsys)


def test_outliers_take_records_or_another_source_not_both(
    tree: PluginTree, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["fleet", "outliers", str(tree.root), "--metrics-dir", str(tree.root)]
    assert main(argv) == 2
    assert "give exactly one input" in _one_line_error(capsys)


def test_a_dataset_and_its_single_parquet_file_agree(
    tree: PluginTree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = tmp_path / "whole.parquet"
    write_records(whole, read_records(tree.whole))
    doc = rounded(_json(["fleet", "tail", str(whole), "--json"], capsys))
    assert rounded(_json(["fleet", "tail", str(tree.root), "--json"], capsys)) == doc
