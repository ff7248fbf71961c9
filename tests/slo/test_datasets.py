"""`slo report` and `slo backtest` on a dataset: a directory, a glob or --records repeated read
as one set of records, with the same result as the single file of the same rows (JSON lines read
whole, or one Parquet file streamed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fleetwatch.cli import main
from fleetwatch.records import read_records, write_records
from fleetwatch.scenarios.slo_records import Incident, synthetic_records
from tests.records.plugin_tree import PluginTree, write_tree

EXAMPLES = Path(__file__).resolve().parents[2] / "slo" / "examples"
SPEC = str(EXAMPLES / "chat.yaml")
H = 3600.0
T0 = 1_700_000_000.0


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> PluginTree:
    frame = synthetic_records(
        np.random.default_rng(5), n=6_000, start_s=T0, duration_s=6 * H,
        incidents=[Incident(T0 + 3 * H, T0 + 3.5 * H, error_ratio=0.5)], classes=("chat", "batch"),
    )  # fmt: skip
    return write_tree(tmp_path_factory.mktemp("slo-datasets") / "fleet", frame)


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> object:
    assert main(argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("command", ["report", "backtest"])
def test_a_directory_gives_the_result_of_its_single_file(
    tree: PluginTree, tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = _json(["slo", command, SPEC, "--records", str(tree.whole), "--json"], capsys)
    assert _json(["slo", command, SPEC, "--records", str(tree.root), "--json"], capsys) == whole
    glob = f"{tree.root}/**/records-*"
    assert _json(["slo", command, SPEC, "--records", glob, "--json"], capsys) == whole
    streamed = tmp_path / "whole.parquet"
    write_records(streamed, read_records(tree.whole))
    assert _json(["slo", command, SPEC, "--records", str(streamed), "--json"], capsys) == whole


def test_repeated_records_read_all_of_them(
    tree: PluginTree, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = _json(["slo", "backtest", SPEC, "--records", str(tree.whole), "--json"], capsys)
    folders = sorted(tree.root.iterdir())
    argv = ["slo", "backtest", SPEC, "--json"]
    for folder in folders:
        argv += ["--records", str(folder)]
    assert _json(argv, capsys) == whole
    last_only = _json(["slo", "backtest", SPEC, "--records", str(folders[-1]), "--json"], capsys)
    assert last_only != whole


def test_skip_bad_skips_and_counts(
    tree: PluginTree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    argv = ["slo", "report", SPEC, "--records", str(tree.root), "--records", str(bad), "--json"]
    assert main(argv) == 2
    assert "bad.jsonl, row 1: not valid JSON" in capsys.readouterr().err
    whole = _json(["slo", "report", SPEC, "--records", str(tree.whole), "--json"], capsys)
    assert main([*argv, "--skip-bad"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == whole
    assert f"skipped 1 bad record file(s) of {tree.files + 1}" in captured.err


def test_a_dataset_of_empty_files_is_refused_as_an_empty_file_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.jsonl").write_text("")
    (tmp_path / "b.jsonl").write_text("")
    assert main(["slo", "backtest", SPEC, "--records", str(tmp_path)]) == 2
    assert "no records to evaluate (every file is empty)" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["report", "backtest"])
def test_the_query_engine_gives_what_reading_the_records_whole_gives(
    tree: PluginTree, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = _json(["slo", command, SPEC, "--records", str(tree.root), "--json"], capsys)
    memory = ["slo", command, SPEC, "--records", str(tree.root), "--engine", "memory", "--json"]
    assert _json(memory, capsys) == engine
    since = ["--since", str(T0 + 2 * H), "--replica", "r1"]
    engine = _json(["slo", command, SPEC, "--records", str(tree.root), *since, "--json"], capsys)
    assert _json([*memory, *since], capsys) == engine
