"""Dataset filters: parsing ``--since``/``--until`` against an injected now, filtering a mixed
JSON-lines and Parquet dataset as pandas filters the same rows, the Parquet pushdown reading the
rows a post-filter keeps, the commands refusing a filter that keeps nothing, and the filter's SQL
literals reading back as themselves."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fleetwatch.cli import main
from fleetwatch.core.records.schema import RecordError
from fleetwatch.records import read_records, write_records
from fleetwatch.records.dataset import read_dataset
from fleetwatch.records.engine.duck import DuckEngine
from fleetwatch.records.filters import RecordFilter, parse_time, record_filter, sql_string
from fleetwatch.records.options import filter_from_options
from fleetwatch.scenarios.slo_records import Incident, synthetic_records
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet
from tests.records.plugin_tree import PluginTree, write_tree

NOW = 1_796_000_000.0
SPEC = str(Path(__file__).resolve().parents[2] / "slo" / "examples" / "chat.yaml")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> PluginTree:
    frame = synthetic_fleet(4, 120, seed=3)
    frame["model"] = ["a" if i % 3 else "b" for i in range(len(frame))]
    frame["traffic_class"] = ["chat" if i % 2 else "batch" for i in range(len(frame))]
    return write_tree(tmp_path_factory.mktemp("filters") / "fleet", frame)


def test_absolute_iso_and_relative_times() -> None:
    assert parse_time("--since", "1733000000", now=NOW) == 1_733_000_000.0
    assert parse_time("--since", "1733000000.5", now=NOW) == 1_733_000_000.5
    assert parse_time("--since", "2026-12-01T10:00:00Z", now=NOW) == 1_796_119_200.0
    assert parse_time("--since", "2026-12-01T12:00:00+02:00", now=NOW) == 1_796_119_200.0
    assert parse_time("--since", "-1h", now=NOW) == NOW - 3600
    assert parse_time("--until", "-10m", now=NOW) == NOW - 600
    assert parse_time("--until", "-90s", now=NOW) == NOW - 90
    assert parse_time("--until", "-1d", now=NOW) == NOW - 86400


@pytest.mark.parametrize(
    "text", ["yesterday", "-1x", "-", "2026-12-01T10:00:00", "2026-13-01T00:00:00Z", "nan", "-5"]
)
def test_a_malformed_time_names_the_option_and_the_value(text: str) -> None:
    with pytest.raises(RecordError) as err:
        parse_time("--until", text, now=NOW)
    assert str(err.value).startswith(f"--until '{text}'")
    assert "\n" not in str(err.value)


def test_since_after_until_is_refused() -> None:
    with pytest.raises(RecordError, match=r"--since .* is after --until"):
        record_filter(since="2000", until="1000", now=NOW)


def test_no_option_is_no_filter_and_now_is_read_only_for_a_duration() -> None:
    def now() -> float:
        raise AssertionError("the clock was read")

    assert filter_from_options(None, None, None, None, None, now=now) is None
    f = filter_from_options("1000", None, ["a"], None, None, now=now)
    assert f == RecordFilter(since_s=1000.0, models=frozenset({"a"}))
    assert filter_from_options("-1m", None, None, None, None, now=lambda: NOW) == RecordFilter(
        since_s=NOW - 60
    )


def _reference(frame: pd.DataFrame, f: RecordFilter) -> pd.DataFrame:
    keep = pd.Series(True, index=frame.index)
    if f.since_s is not None:
        keep &= frame["finished_s"] >= f.since_s
    if f.until_s is not None:
        keep &= frame["finished_s"] < f.until_s
    for column, values in (
        ("model", f.models),
        ("traffic_class", f.traffic_classes),
        ("replica", f.replicas),
    ):
        if values:
            keep &= frame[column].astype(str).isin(values)
    return frame[keep].reset_index(drop=True)


def _filters(frame: pd.DataFrame) -> list[RecordFilter]:
    lo, hi = frame["finished_s"].quantile([0.25, 0.7])
    return [
        RecordFilter(models=frozenset({"b"})),
        RecordFilter(models=frozenset({"a", "b"}), traffic_classes=frozenset({"chat"})),
        RecordFilter(replicas=frozenset({"replica-1", "replica-3"})),
        RecordFilter(since_s=float(lo)),
        RecordFilter(until_s=float(hi)),
        RecordFilter(since_s=float(lo), until_s=float(hi), models=frozenset({"a"})),
    ]


def test_filtering_a_mixed_dataset_keeps_the_rows_pandas_keeps(tree: PluginTree) -> None:
    whole = read_records(tree.whole)
    for f in _filters(whole):
        data = read_dataset([tree.root], where=f)
        expected = _reference(whole, f)
        assert 0 < data.rows < len(whole)
        assert data.rows_before_filter == len(whole)
        pd.testing.assert_frame_equal(data.frame, expected)


def test_parquet_pushdown_reads_the_rows_a_post_filter_keeps(tmp_path: Path) -> None:
    source = synthetic_fleet(3, 200, seed=5)
    source["model"] = ["a" if i % 4 else "b" for i in range(len(source))]
    path = tmp_path / "r.parquet"
    write_records(path, source)
    whole = read_records(path)
    for f in _filters(whole):
        pushed = read_records(path, where=f)
        pd.testing.assert_frame_equal(pushed, f.apply(whole))
        pd.testing.assert_frame_equal(pushed, _reference(whole, f))


def test_a_filter_keeping_nothing_is_one_line_naming_it(
    tree: PluginTree, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fleet", "tail", str(tree.root), "--model", "nope"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "no records match --model nope" in lines[0], captured.err


def test_a_bad_time_is_one_line_exit_2(
    tree: PluginTree, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fleet", "tail", str(tree.root), "--since", "2000", "--until", "1000"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1
    assert "--since" in captured.err


def test_tail_of_one_model_is_the_tail_of_a_dataset_of_that_model_only(
    tree: PluginTree, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    only = tmp_path / "only-b.jsonl"
    whole = read_records(tree.whole)
    write_records(only, whole[whole["model"] == "b"].reset_index(drop=True))
    assert main(["fleet", "tail", str(only), "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)
    assert main(["fleet", "tail", str(tree.root), "--model", "b", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == expected
    assert "records match --model b" in captured.err


@pytest.mark.parametrize("command", ["report", "backtest"])
def test_slo_on_one_parquet_file_filtered_is_slo_on_the_rows_kept(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    t0, hour = 1_700_000_000.0, 3600.0
    source = synthetic_records(
        np.random.default_rng(5), n=3_000, start_s=t0, duration_s=4 * hour,
        incidents=[Incident(t0 + 3 * hour, t0 + 3.5 * hour, error_ratio=0.5)],
        classes=("chat", "batch"),
    )  # fmt: skip
    path = tmp_path / "r.parquet"
    write_records(path, source)
    since = t0 + hour
    only = tmp_path / "kept.parquet"
    whole = read_records(path)
    write_records(only, whole[whole["finished_s"] >= since].reset_index(drop=True))
    argv = ["slo", command, SPEC, "--json"]
    assert main([*argv, "--records", str(only)]) == 0, capsys.readouterr().err
    expected = json.loads(capsys.readouterr().out)
    assert main([*argv, "--records", str(path), "--since", f"{since:.0f}"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == expected, captured.err


AWKWARD = [
    "it's", "'", "''", "a'b'c", "", 'say "hi"', "${env:HOME}", "-- x", "/* */", "naïve 💡",
    "back\\slash", "\\'", "C:\\runs\\a.jsonl",
]  # fmt: skip


def test_a_literal_reads_back_as_itself_and_never_holds_a_doubled_quote() -> None:
    """Spark 4.0 and earlier read ``'it''s'`` as ``its``: a quote is written as ``chr(39)``
    (Spark reading the same literals: tests/spark)."""
    import duckdb

    sql = "SELECT " + ", ".join(f"{sql_string(v)} AS v{i}" for i, v in enumerate(AWKWARD))
    row = duckdb.connect().execute(sql).fetchone()
    assert row is not None and list(row) == AWKWARD
    assert "''" not in sql_string("it's") and sql_string("plain") == "'plain'"


def test_a_nul_is_refused_in_a_literal() -> None:
    with pytest.raises(RecordError, match="a NUL cannot be matched"):
        sql_string("nul\x00")


def test_a_filter_on_a_name_holding_a_quote_keeps_its_rows_in_duckdb(tmp_path: Path) -> None:
    frame = synthetic_fleet(2, 30, seed=5)
    frame["model"] = ["it's-8b" if i % 2 else "llama" for i in range(len(frame))]
    path = tmp_path / "records.jsonl"
    write_records(path, frame)
    where = RecordFilter(models=frozenset({"it's-8b"}))
    with DuckEngine([path], where=where) as engine:
        assert engine.check() == (60, 30)
