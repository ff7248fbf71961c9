"""`records validate` over a fleet's records: a folder, a quoted glob or several paths checked
file by file, summed into the summary the same rows give as one file; a bad file named (exit 2)
or, with ``--skip-bad``, named, counted and left out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fleetwatch.cli import main
from fleetwatch.records import read_records
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet
from tests.records.plugin_tree import PluginTree, plugin_tree, write_tree


def _summary(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["records", "validate", *argv, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


@pytest.fixture
def fleet(tmp_path: Path) -> PluginTree:
    return plugin_tree(tmp_path / "fleet")


def test_a_folder_sums_to_the_summary_of_its_rows_as_one_file(
    fleet: PluginTree, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = _summary([str(fleet.whole)], capsys)
    for argv in ([str(fleet.root)], [f"{fleet.root}/**/*.jsonl", f"{fleet.root}/**/*.parquet"]):
        got = _summary(argv, capsys)
        assert got["files"] == fleet.files and got["rows"] == fleet.rows == whole["rows"]
        for key in ("span_s", "replicas", "models", "status"):
            assert got[key] == whole[key], key
        assert got["bad_files"] == 0
    assert whole["files"] == 1 and whole["file"] == str(fleet.whole)


def test_two_models_on_two_paths_are_both_listed(
    fleet: PluginTree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    frame = synthetic_fleet(3, 50, seed=1)
    frame["model"] = "m-70b"
    frame["replica"] = "big-" + frame["replica"].astype(str)
    other = write_tree(tmp_path / "other", frame)
    got = _summary([str(fleet.root), str(other.root)], capsys)
    assert got["rows"] == fleet.rows + other.rows
    assert got["files"] == fleet.files + other.files
    assert got["models"] == ["m", "m-70b"]
    assert set(frame["replica"]) < set(got["replicas"]) and len(got["replicas"]) == 9


def test_a_bad_file_stops_the_check_and_is_named(
    fleet: PluginTree, capsys: pytest.CaptureFixture[str]
) -> None:
    segments = sorted(fleet.root.rglob("*.jsonl"))
    bad = segments[len(segments) // 2]
    lines = bad.read_text().splitlines()
    lines[1] = (
        lines[1]
        .replace('"status": "ok"', '"status": "maybe"')
        .replace('"status":"ok"', '"status":"maybe"')
    )
    if "maybe" not in lines[1]:
        row = json.loads(lines[1])
        row["status"] = "maybe"
        lines[1] = json.dumps(row)
    bad.write_text("\n".join(lines) + "\n")
    assert main(["records", "validate", str(fleet.root)]) == 2
    out, err = capsys.readouterr()
    assert not out and len(err.strip().splitlines()) == 1
    assert str(bad) in err and "row 2" in err and "field 'status'" in err

    got = _summary([str(fleet.root), "--skip-bad"], capsys)
    assert got["bad_files"] == 1 and got["files"] == fleet.files
    assert got["rows"] == fleet.rows - len(lines)
    assert main(["records", "validate", str(fleet.root), "--skip-bad"]) == 0
    out, err = capsys.readouterr()
    assert "1 bad file(s) skipped" in out and str(bad) in err and "row 2" in err


def test_files_without_records_are_refused_unless_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(3):
        (tmp_path / "empty" / f"r{i}").mkdir(parents=True)
        (tmp_path / "empty" / f"r{i}" / "seg-000001.jsonl").write_text("")
    assert main(["records", "validate", str(tmp_path / "empty")]) == 2
    assert "no records" in capsys.readouterr().err
    got = _summary([str(tmp_path / "empty"), "--allow-empty"], capsys)
    assert got["files"] == 3 and got["rows"] == 0 and got["status"] == {}


def test_a_file_pruned_while_the_check_runs_is_left_out(
    fleet: PluginTree, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sink's pruning removes a segment after the folder was listed: not an error."""
    from fleetwatch.records import dataset

    listed = dataset.resolve([str(fleet.root)])
    victims = [next(p for p in listed if p.suffix == s) for s in (".jsonl", ".parquet")]
    rows = sum(len(read_records(p)) for p in victims)

    def listed_then_pruned(paths: list[str], **kwargs: Any) -> list[Path]:
        for victim in victims:
            victim.unlink()
        return listed

    monkeypatch.setattr(dataset, "resolve", listed_then_pruned)
    got = _summary([str(fleet.root)], capsys)
    assert got["files"] == fleet.files - 2 and got["rows"] == fleet.rows - rows


def test_a_folder_of_bad_files_only_is_refused_even_skipping(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(2):
        (tmp_path / "bad").mkdir(exist_ok=True)
        (tmp_path / "bad" / f"seg-{i}.jsonl").write_text("{not json\n")
    assert main(["records", "validate", str(tmp_path / "bad"), "--skip-bad"]) == 2
    err = capsys.readouterr().err
    assert "no file could be read (2 bad" in err and err.count("seg-") == 2
