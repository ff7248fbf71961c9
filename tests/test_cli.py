"""The front door: help lists every package's sub-command; bad input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetwatch import __version__
from fleetwatch.cli import main
from telemetry.records import RequestRecord, write_records


def test_help_lists_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("records", "slo", "fleet", "resilience", "engine", "probe", "telemetry", "demo"):
        assert name in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert __version__ in capsys.readouterr().out


def test_bad_flag_exits_2() -> None:
    assert main(["records", "validate", "--no-such-flag"]) == 2


def test_validate_summarises_a_good_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "r.jsonl"
    write_records(
        path,
        [
            RequestRecord("a", "rep1", "m", 0.0, 1.0, 0.1, 0.2, 10, 3),
            RequestRecord("b", "rep2", "m", 0.5, 3.0, status="error", error_type="X"),  # type: ignore[arg-type]
        ],
    )
    assert main(["records", "validate", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == 2
    assert summary["replicas"] == ["rep1", "rep2"]
    assert summary["status"] == {"error": 1, "ok": 1}
    assert summary["span_s"] == 3.0


def test_validate_bad_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"request_id": "a"}\n')
    assert main(["records", "validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert str(path) in err and "row 1" in err and "field 'replica'" in err
