"""`fleet tail` and `fleet compare` read whole (`--engine memory`) bound their memory by a row
cap (`--max-rows`) that is checked before anything is read: a file over it is refused in one line
with exit 2, naming the cap and the flag; the check reads a Parquet footer or scans JSON lines only
until the cap is passed."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

import fleetwatch.records
import fleetwatch.records.io
from fleetwatch.cli import main
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.rowcap import BYTES_PER_ROW, check_rows, count_rows
from fleetwatch.records import RecordError, write_records
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("rowcap")
    write_records(d / "a.jsonl", synthetic_fleet(5, 40, seed=1))  # 200 rows
    write_records(d / "a.parquet", synthetic_fleet(5, 40, seed=1))
    write_records(d / "b.parquet", synthetic_fleet(5, 40, seed=2))
    return d


@pytest.fixture
def nothing_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a record file fails the test: a refused file must not be read at all."""

    def read_records(path: object) -> None:
        raise AssertionError(f"{path} was read")

    monkeypatch.setattr(fleetwatch.records, "read_records", read_records)
    monkeypatch.setattr(fleetwatch.records.io, "read_records", read_records)  # datasets read here


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


@pytest.mark.parametrize("name", ["a.jsonl", "a.parquet"])
def test_tail_refuses_a_file_over_the_cap_before_reading_it(
    files: Path, name: str, capsys: pytest.CaptureFixture[str], nothing_read: None
) -> None:
    assert (
        main(["fleet", "tail", "--engine", "memory", str(files / name), "--max-rows", "199"]) == 2
    )
    line = _one_line_error(capsys)
    assert name in line and "over the cap --max-rows 199" in line
    assert "raise --max-rows" in line


def test_compare_refuses_either_file_over_the_cap(
    files: Path, capsys: pytest.CaptureFixture[str], nothing_read: None
) -> None:
    args = [
        "fleet",
        "compare",
        "--engine",
        "memory",
        str(files / "a.parquet"),
        str(files / "b.parquet"),
    ]
    assert main([*args, "--max-rows", "150"]) == 2
    line = _one_line_error(capsys)
    assert "a.parquet: 200 rows, over the cap --max-rows 150" in line


def test_at_the_cap_the_analyses_run(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["fleet", "tail", "--engine", "memory", str(files / "a.jsonl"), "--max-rows", "200"])
        == 0
    )
    args = [
        "fleet",
        "compare",
        "--engine",
        "memory",
        str(files / "a.parquet"),
        str(files / "b.parquet"),
    ]
    assert main([*args, "--max-rows", "200", "--draws", "100"]) == 0


def test_blank_lines_are_not_rows(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    p.write_bytes(b"{}\n\n  \n{}\r\n{}")  # three rows; the last without a newline
    assert count_rows(p, 10) == 3
    check_rows(str(p), [p], 3)
    with pytest.raises(AnalysisError, match="more than 2 rows"):
        check_rows(str(p), [p], 2)


def test_the_jsonl_check_stops_at_the_cap_and_allocates_little(tmp_path: Path) -> None:
    p = tmp_path / "big.jsonl"
    line = b'{"request_id": "' + b"x" * 200 + b'"}\n'
    with open(p, "wb") as fh:
        for _ in range(20):
            fh.write(line * 10_000)  # 200,000 rows, 44 MB
    tracemalloc.start()
    try:
        assert p.stat().st_size < 45_000 * BYTES_PER_ROW  # under the byte cap: rows counted
        with pytest.raises(AnalysisError, match="more than 45,000 rows"):
            check_rows(str(p), [p], 45_000)
        rows = count_rows(p, 1_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak  # one 1 MiB chunk and its lines, not the file
    assert rows is not None and rows <= 1_000 + 1 + (1 << 20) // len(line)  # stopped early


def test_a_line_longer_than_any_record_is_refused_without_reading_it_whole(
    tmp_path: Path,
) -> None:
    p = tmp_path / "one-line.jsonl"
    p.write_bytes(b"{" + b" " * (3 << 20))
    with pytest.raises(RecordError, match="line 1 is longer than 1 MiB"):
        check_rows(str(p), [p], 10_000)  # 3 MiB is under the byte cap of 10,000 rows


def test_a_non_positive_cap_is_refused(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["fleet", "tail", "--engine", "memory", str(files / "a.jsonl"), "--max-rows", "0"])
        == 2
    )
    assert "--max-rows must be at least 1" in _one_line_error(capsys)


def test_files_the_reader_refuses_are_left_to_its_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    check_rows(str(bad), [bad], 1)  # not counted: the reader names the problem
    assert main(["fleet", "tail", "--engine", "memory", str(bad), "--max-rows", "1"]) == 2
    assert "not a readable Parquet file" in _one_line_error(capsys)
    check_rows("missing.jsonl", [tmp_path / "missing.jsonl"], 1)


def test_few_huge_rows_are_refused_by_their_bytes_before_reading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], nothing_read: None
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    jsonl = tmp_path / "huge.jsonl"
    jsonl.write_bytes((b'{"request_id": "' + b"x" * 500_000 + b'"}\n') * 5)  # 5 rows, 2.5 MB
    assert main(["fleet", "tail", "--engine", "memory", str(jsonl), "--max-rows", "100"]) == 2
    line = _one_line_error(capsys)
    assert "huge.jsonl" in line and "over the 110,000 bytes the cap --max-rows 100" in line
    parquet = tmp_path / "huge.parquet"
    pq.write_table(pa.table({"request_id": ["y" * 50_000] * 10}), parquet)  # 10 rows, 0.5 MB
    assert main(["fleet", "tail", "--engine", "memory", str(parquet), "--max-rows", "20"]) == 2
    line = _one_line_error(capsys)
    assert "uncompressed bytes, over the 22,000 bytes the cap --max-rows 20" in line
    assert "raise --max-rows" in line


def test_the_cap_is_on_the_dataset_total_and_names_the_dataset(
    files: Path, capsys: pytest.CaptureFixture[str], nothing_read: None
) -> None:
    """Two Parquet files of 200 rows each: under a cap of 300 apiece, over it together."""
    pattern = str(files / "*.parquet")
    assert main(["fleet", "tail", "--engine", "memory", pattern, "--max-rows", "300"]) == 2
    line = _one_line_error(capsys)
    assert f"{pattern} (2 files): 400 rows, over the cap --max-rows 300" in line
    args = ["fleet", "tail", "--engine", "memory", str(files / "a.parquet"), str(files / "a.jsonl"),
            "--max-rows", "300"]  # fmt: skip
    assert main(args) == 2
    assert "(2 files): more than 300 rows, over the cap --max-rows 300" in _one_line_error(capsys)


def test_through_the_engine_nothing_is_capped(
    files: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`fleet compare` and `fleet tail` through an engine hold a chunk, not the run: no cap
    applies (--max-rows bounds --engine memory only), every record is compared."""
    run = str(files / "a.jsonl")
    args = ["fleet", "compare", run, run, "--draws", "100", "--json"]
    assert main([*args, "--max-rows", "150"]) == 0
    capped = json.loads(capsys.readouterr().out)
    assert main([*args, "--engine", "memory"]) == 0
    assert capped == json.loads(capsys.readouterr().out)
    assert capped["metrics"][0]["n_before"] > 150
    assert main(["fleet", "compare", "--engine", "memory", run, run, "--max-rows", "150"]) == 2
    assert "a.jsonl: more than 150 rows, over the cap --max-rows 150" in _one_line_error(capsys)
