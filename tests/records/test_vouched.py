"""Parquet files stamped checked when written (``records compact``, ``write_records``): a dataset
of them is counted from its footers and no row is checked again, and each command gives what it
gives on the same rows unstamped. A stamp that no longer matches its file, a stamp of other checks,
and stamped files beside JSON lines are not trusted: the rows are checked, a bad one named as ever.
The files' layout: floats and ids plain, labels as dictionaries."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from fleetwatch.cli import main
from fleetwatch.core.records.write import CHECKED_KEY, read_stamp, stamp_checked
from fleetwatch.records.compact import compact
from fleetwatch.records.engine.duck import DuckEngine
from fleetwatch.records.engine.folded import check_columns
from fleetwatch.records.engine.scan import open_scan
from fleetwatch.records.filters import RecordFilter
from fleetwatch.records.io import read_records
from tests.records.plugin_tree import PluginTree, plugin_tree

NOW = 4.0e9
"""The injected clock: after every segment's mtime."""
SPEC_TEXT = """version: fleetwatch/slo/v1
service: fleet
evaluation_interval: 30s
slos:
  - name: availability
    objective: 99.9
    period: 30d
    sli: {kind: availability, bad: [error, aborted]}
"""
COMMANDS = ("backtest", "outliers", "tail", "compare")


def _argv(command: str, spec: Path, root: Path) -> list[str]:
    if command == "backtest":
        return ["slo", "backtest", str(spec), f"--records={root}", "--json"]
    if command == "compare":
        return ["fleet", "compare", str(root), str(root), "--json"]
    return ["fleet", command, str(root), "--json"]


def _files(root: Path) -> list[Path]:
    return sorted(root.rglob("*.parquet"))


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> PluginTree:
    return plugin_tree(tmp_path_factory.mktemp("vouched") / "fleet")


@pytest.fixture(scope="module")
def compacted(tree: PluginTree, tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("compacted") / "dest"
    state = tmp_path_factory.mktemp("state")
    done = compact([tree.root], dest, now=NOW, min_age_s=0, delete_sources=False, state=state)
    assert done.records_in == tree.rows
    return dest


@pytest.fixture(scope="module")
def unstamped(compacted: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The compacted files' rows, written again as pyarrow writes by default: no stamp."""
    root = tmp_path_factory.mktemp("unstamped") / "dest"
    for path in _files(compacted):
        out = root / path.relative_to(compacted)
        out.parent.mkdir(parents=True, exist_ok=True)
        table = pq.read_table(path, partitioning=None)
        pq.write_table(table.replace_schema_metadata({}), out)
    return root


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("spec") / "slo.yaml"
    path.write_text(SPEC_TEXT)
    return path


@pytest.fixture
def check_scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL of every query the engine runs, to find a row check in any."""
    seen: list[str] = []
    own = DuckEngine.query

    def watching(self: DuckEngine, sql: str):  # type: ignore[no-untyped-def]
        seen.append(sql)
        return own(self, sql)

    monkeypatch.setattr(DuckEngine, "query", watching)
    return seen


def test_compacted_files_are_stamped_for_their_rows(compacted: Path, tree: PluginTree) -> None:
    files = _files(compacted)
    assert files
    for path in files:
        meta = pq.read_metadata(path)
        stamp = read_stamp(meta.metadata[CHECKED_KEY.encode()])
        assert stamp is not None and stamp.rows == meta.num_rows
        assert stamp.columns["replica"][0] == 0 and "finished_s" in stamp.columns
    with DuckEngine(files) as engine:
        assert engine.vouched() == tree.rows


def test_the_layout_keeps_floats_plain_and_codes_labels(compacted: Path) -> None:
    meta = pq.read_metadata(_files(compacted)[0]).row_group(0)
    encodings = {
        meta.column(i).path_in_schema: set(meta.column(i).encodings)
        for i in range(meta.num_columns)
    }
    for column in ("arrival_s", "finished_s", "first_token_s"):
        assert "PLAIN" in encodings[column], encodings[column]  # every engine reads it
        assert not encodings[column] & {"RLE_DICTIONARY", "BYTE_STREAM_SPLIT"}
    for column in ("replica", "model", "status", "prompt_tokens"):
        assert "RLE_DICTIONARY" in encodings[column], encodings[column]
    assert "RLE_DICTIONARY" not in encodings["request_id"]
    assert meta.column(0).compression == "ZSTD"


def test_a_vouched_dataset_is_counted_from_its_footers_with_no_row_checked(
    compacted: Path, tree: PluginTree, spec: Path, check_scans: list[str]
) -> None:
    with open_scan([compacted], fold_check=True) as scan:
        assert scan.engine.counted is None
        assert check_columns(scan.engine) == ""
        assert scan.engine.counted == (tree.rows, tree.rows) and scan.rows == tree.rows
    assert main(_argv("backtest", spec, compacted)) == 0
    assert check_scans and not any("fw_rows" in sql for sql in check_scans)


@pytest.mark.parametrize("what", ["replica", "model"])
def test_a_filter_on_a_vouched_dataset_counts_as_the_rows_checked_do(
    compacted: Path, unstamped: Path, tree: PluginTree, what: str
) -> None:
    whole = read_records(tree.whole)
    value = sorted(str(r) for r in whole[what].unique())[0]
    kept = int((whole[what] == value).sum())
    where = RecordFilter(**{f"{what}s": frozenset({value})})  # type: ignore[arg-type]
    with open_scan([unstamped], where=where, fold_check=True) as scan:
        checked = scan.engine.counted
    with open_scan([compacted], where=where, fold_check=True) as scan:
        assert scan.engine.vouched() is not None
        assert scan.engine.counted == checked and checked is not None and checked[1] == kept


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_says_the_same_of_stamped_and_unstamped_files(
    compacted: Path,
    unstamped: Path,
    spec: Path,
    command: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(_argv(command, spec, unstamped)) == 0
    plain = capsys.readouterr().out.replace(str(unstamped), "DATA")
    assert main(_argv(command, spec, compacted)) == 0
    stamped = capsys.readouterr().out.replace(str(compacted), "DATA")
    _same(json.loads(stamped), json.loads(plain))


def _same(got: object, want: object, where: str = "$") -> None:
    """``got`` equals ``want``, floats to 1e-9 relative (a multi-threaded sum's last bits vary
    from run to run on the same files)."""
    if isinstance(want, float) and isinstance(got, float):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12), where
    elif isinstance(want, dict) and isinstance(got, dict):
        assert got.keys() == want.keys(), where
        for k in want:
            _same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list) and isinstance(got, list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, f"{where}[{i}]")
    else:
        assert got == want, where


def _rewrite_with_bad_row(path: Path, out: Path) -> None:
    """``path``'s rows and one finishing 1e7 s after it arrives, written keeping the schema's
    metadata (as a tool that reads and writes Arrow tables does): the stamp rides along."""
    table = pq.read_table(path, partitioning=None)
    row = table.slice(0, 1).to_pylist()[0]
    row |= {"request_id": "odd", "finished_s": row["arrival_s"] + 1e7}
    bad = pa.Table.from_pylist([row], schema=table.schema)
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.concat_tables([table, bad]), out)
    assert CHECKED_KEY.encode() in pq.read_metadata(out).metadata


@pytest.mark.parametrize("command", COMMANDS)
def test_a_stamped_file_rewritten_with_other_rows_is_checked_again(
    compacted: Path,
    spec: Path,
    tmp_path: Path,
    command: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = tmp_path / "dest"
    files = _files(compacted)
    for path in files[1:]:
        out = root / path.relative_to(compacted)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(path.read_bytes())
    odd = root / files[0].relative_to(compacted)
    _rewrite_with_bad_row(files[0], odd)
    with DuckEngine(_files(root)) as engine:
        assert engine.vouched() is None
    assert main(_argv(command, spec, root)) == 2
    err = capsys.readouterr()
    assert err.out == ""
    assert re.search(r"field 'finished_s': is 1e\+07 s after arrival_s", err.err), err.err
    assert str(odd) in err.err and len(err.err.strip().splitlines()) == 1


def test_json_lines_beside_stamped_files_leave_the_rows_to_be_checked(
    compacted: Path, tree: PluginTree
) -> None:
    jsonl = sorted(tree.root.rglob("*.jsonl"))[:1]
    with DuckEngine([*_files(compacted), *jsonl]) as engine:
        assert engine.vouched() is None


def test_a_stamp_of_other_checks_or_not_understood_vouches_for_nothing(
    compacted: Path, tmp_path: Path
) -> None:
    good = {"checks": 1, "rows": 5, "columns": {"finished_s": [0, 1.5, 2.5]}}
    stamp = read_stamp(json.dumps(good))
    assert stamp is not None and stamp.rows == 5
    assert stamp.columns == {"finished_s": (0, 1.5, 2.5)}
    for value in (
        json.dumps(good | {"checks": 0}),
        json.dumps(good | {"rows": True}),
        json.dumps(good | {"rows": -1}),
        json.dumps({"checks": 1, "rows": 5}),
        json.dumps(good | {"columns": {"finished_s": [0, [1], 2]}}),
        json.dumps(good | {"columns": {"finished_s": [-1, 1, 2]}}),
        "[]",
        b"\xff",
        None,
    ):
        assert read_stamp(value) is None, value
    path = _files(compacted)[0]
    table = pq.read_table(path, partitioning=None)
    old = dict(table.schema.metadata or {})
    key = CHECKED_KEY.encode()
    old[key] = json.dumps(json.loads(old[key]) | {"checks": 0}).encode()
    out = tmp_path / "old.parquet"
    pq.write_table(table.replace_schema_metadata(old), out)
    with DuckEngine([out]) as engine:
        assert engine.vouched() is None
    pq.write_table(stamp_checked(table), out)
    with DuckEngine([out]) as engine:
        assert engine.vouched() == table.num_rows


def _one_file(compacted: Path, tmp_path: Path, change: Any) -> Path:
    """The first compacted file's table changed by ``change`` and written back as pyarrow
    writes it, the schema's metadata (the stamp) kept."""
    table = pq.read_table(_files(compacted)[0], partitioning=None)
    out = tmp_path / "changed" / "part.parquet"
    out.parent.mkdir(parents=True)
    changed = change(table)
    pq.write_table(changed.replace_schema_metadata(table.schema.metadata), out)
    assert CHECKED_KEY.encode() in pq.read_metadata(out).metadata
    return out.parent


@pytest.mark.parametrize("command", COMMANDS)
def test_a_value_changed_in_a_stamped_file_is_checked_again(
    compacted: Path, spec: Path, tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    def late(table: pa.Table) -> pa.Table:  # as many rows: one finishes 1e7 s after arriving
        finished = table.column("finished_s").to_pylist()
        finished[0] = table.column("arrival_s")[0].as_py() + 1e7
        at = table.column_names.index("finished_s")
        return table.set_column(at, "finished_s", pa.array(finished, pa.float64()))

    root = _one_file(compacted, tmp_path, late)
    with DuckEngine(_files(root)) as engine:
        assert engine.vouched() is None
    assert main(_argv(command, spec, root)) == 2
    err = capsys.readouterr()
    assert err.out == "" and len(err.err.strip().splitlines()) == 1, err.err
    assert re.search(r"field 'finished_s': is 1e\+07 s after arrival_s", err.err), err.err


def test_a_change_to_a_column_the_engine_does_not_read_leaves_the_rows_vouched_for(
    compacted: Path, tmp_path: Path
) -> None:
    """The footers are compared with the stamp for the columns the engine reads: an engine
    reading the changed column checks every row again, one that does not read it reads no
    value of it, and its rows are still those the stamp vouches for."""

    def more(table: pa.Table) -> pa.Table:  # a prompt past the old greatest, as many rows
        tokens = table.column("prompt_tokens").to_pylist()
        tokens[0] = max(tokens) + 1000
        at = table.column_names.index("prompt_tokens")
        return table.set_column(at, "prompt_tokens", pa.array(tokens, pa.int64()))

    root = _one_file(compacted, tmp_path, more)
    with DuckEngine(_files(root), columns=["model", "status", "prompt_tokens"]) as engine:
        assert engine.vouched() is None
    with DuckEngine(_files(root), columns=["model", "status"]) as engine:
        assert engine.vouched() == pq.read_metadata(_files(root)[0]).num_rows


@pytest.mark.parametrize("command", COMMANDS)
def test_a_stamped_file_without_a_required_column_is_named_as_ever(
    compacted: Path, spec: Path, tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _one_file(compacted, tmp_path, lambda t: t.drop_columns(["replica"]))
    with DuckEngine(_files(root)) as engine:
        assert engine.vouched() is None
    assert main(_argv(command, spec, root)) == 2
    err = capsys.readouterr().err
    assert re.search(r"part\.parquet: \d+ row\(s\) lack one of replica, arrival_s", err), err


def test_float32_times_are_not_vouched_for_by_their_rounded_statistics(
    compacted: Path, tmp_path: Path
) -> None:
    def narrow(table: pa.Table) -> pa.Table:
        at = table.column_names.index("finished_s")
        return table.set_column(at, "finished_s", table.column("finished_s").cast(pa.float32()))

    root = _one_file(compacted, tmp_path, lambda t: stamp_checked(narrow(t)))
    with DuckEngine(_files(root)) as engine:
        assert engine.vouched() is None and engine.finished_range() is None


def test_the_project_writer_of_checked_frames_stamps_them(tree: PluginTree, tmp_path: Path) -> None:
    from fleetwatch.records import write_records

    out = tmp_path / "whole.parquet"
    write_records(out, read_records(tree.whole))
    stamp = read_stamp(pq.read_metadata(out).metadata[CHECKED_KEY.encode()])
    assert stamp is not None and stamp.rows == tree.rows


def _tallied_by_pandas(path: Path) -> dict[str, Any]:
    """What a file's ``Tallies`` should say, counted over its rows by pandas (each column's
    default in a null's place, as the engine reads it)."""
    frame = pq.read_table(path, partitioning=None).to_pandas()
    status = frame["status"].astype(object).where(frame["status"].notna(), "ok")
    ok = status == "ok"
    out = frame["output_tokens"].fillna(0).astype("int64")
    times = frame[["arrival_s", "first_token_s", "finished_s"]]
    errors = frame.loc[status == "error", "error_type"].dropna()
    return {
        "status": {str(k): int(n) for k, n in status.value_counts().items()},
        "error_types": {str(k): int(n) for k, n in errors.value_counts().items()},
        "length": int((frame["finish_reason"] == "length").sum()),
        "ok_empty": int((ok & (out == 0)).sum()),
        "ok_short": int((ok & (out < 2)).sum()),
        "ok_untimed": int((ok & times.isna().any(axis=1)).sum()),
        "sums": {  # Python's integers: exact past 2**63
            "output_tokens": sum(int(v) for v in out),
            "ok_output_tokens": sum(int(v) for v in out[ok]),
            "output_tokens_squared": sum(int(v) ** 2 for v in out),
            "prompt_tokens": sum(int(v) for v in frame["prompt_tokens"].fillna(0)),
            "cached_prompt_tokens": sum(int(v) for v in frame["cached_prompt_tokens"].fillna(0)),
        },
    }


def _varied(path: Path, out: Path) -> None:
    """``path``'s rows with what the tallies count and what the engine fills: failures of two
    types and of none, empty and one-token outputs, ok requests lacking a first token, nulls
    where a column has a default (status, tokens); stamped and written to ``out``."""
    import numpy as np

    frame = pq.read_table(path, partitioning=None).to_pandas()
    n = len(frame)
    at = np.arange(n)
    status = frame["status"].astype(object)
    status[at % 7 == 1] = "error"
    status[at % 11 == 2] = None
    frame["status"] = status
    kinds = np.array(["timeout", "oom", None], dtype=object)[at % 3]
    frame["error_type"] = np.where(at % 7 == 1, kinds, None)
    out_tokens = frame["output_tokens"].astype("Int64")
    out_tokens[at % 13 == 3] = 0
    out_tokens[at % 17 == 4] = 1
    out_tokens[at % 19 == 5] = pd.NA
    frame["output_tokens"] = out_tokens
    cached = frame["cached_prompt_tokens"].astype("Int64")
    cached[at % 5 == 0] = pd.NA
    frame["cached_prompt_tokens"] = cached
    first = frame["first_token_s"].copy()
    first[at % 23 == 6] = np.nan
    frame["first_token_s"] = first
    prompt = frame["prompt_tokens"].copy()
    prompt[:4] = 2**62  # their sum past an int64's
    frame["prompt_tokens"] = prompt
    table = pa.Table.from_pandas(frame, schema=pq.read_schema(path), preserve_index=False)
    pq.write_table(stamp_checked(table), out)


def test_each_stamp_tallies_its_files_rows(compacted: Path, tmp_path: Path) -> None:
    """A compacted file's stamp, and the stamp of a file of every case the tallies count,
    count and sum its rows as pandas counts them over the file: statuses, typed errors,
    truncations, ok requests of no or one output token or lacking a time, and the token sums,
    each column's default in a null's place."""
    files = _files(compacted)
    varied = tmp_path / "varied.parquet"
    _varied(files[0], varied)
    for path in [*files, varied]:
        stamp = read_stamp(pq.read_metadata(path).metadata[CHECKED_KEY.encode()])
        assert stamp is not None and stamp.tallies is not None
        assert stamp.tallies._asdict() == _tallied_by_pandas(path), path
    said = read_stamp(pq.read_metadata(varied).metadata[CHECKED_KEY.encode()])
    assert said is not None and said.tallies is not None
    t = said.tallies
    assert set(t.error_types) == {"timeout", "oom"} and t.status["ok"] < said.rows
    assert min(t.length, t.ok_empty, t.ok_untimed) > 0 and t.ok_short > t.ok_empty
    assert t.sums["prompt_tokens"] > 2**64


def test_tallies_are_said_only_where_the_files_vouch_for_them(
    compacted: Path, tree: PluginTree, tmp_path: Path
) -> None:
    """Every file's tallies, by ``by_file``'s numbers, where the files vouch for their rows and
    no filter cuts them; none with a filter, beside JSON lines, where one file's stamp holds
    none, or no longer matches its file; tallies not understood are none, the stamp kept."""
    files = _files(compacted)
    with DuckEngine(files) as engine:
        said = engine.tallies()
        assert said is not None and len(said) == len(files)
        numbered = engine.by_file("replica")
        assert numbered is not None
        for tallies, replica in zip(said, numbered[1], strict=True):
            assert tallies is not None and replica is not None
        ends = engine.finished_range()
        assert ends is not None
    since = RecordFilter(since_s=(ends[0] + ends[1]) / 2)
    with DuckEngine(files, where=since) as engine:
        assert engine.tallies() is None
    jsonl = sorted(tree.root.rglob("*.jsonl"))[:1]
    with DuckEngine([*files, *jsonl]) as engine:
        assert engine.tallies() is None
    root = tmp_path / "dest"
    for path in files:
        out = root / path.relative_to(compacted)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(path.read_bytes())
    table = pq.read_table(files[0], partitioning=None)
    meta = dict(table.schema.metadata or {})
    key = CHECKED_KEY.encode()
    doc = json.loads(meta[key])
    meta[key] = json.dumps({k: v for k, v in doc.items() if k != "tallies"}).encode()
    first = root / files[0].relative_to(compacted)
    pq.write_table(table.replace_schema_metadata(meta), first)
    with DuckEngine(_files(root)) as engine:
        assert engine.vouched() is not None and engine.tallies() is None
    _rewrite_with_bad_row(files[0], first)
    with DuckEngine(_files(root)) as engine:
        assert engine.vouched() is None and engine.tallies() is None
    every = pa.array([i % 5 == 0 for i in range(table.num_rows)])
    relabelled = table  # a fifth failed, of a type the file did not hold: its extremes moved
    for name, value in (("status", "error"), ("error_type", "zzz")):
        at = table.schema.get_field_index(name)
        kind = table.schema.field(name).type
        relabelled = relabelled.set_column(
            at, name, pc.if_else(every, pa.scalar(value, kind), table.column(name))
        )
    for changed in (relabelled, table.drop_columns(["error_type", "finish_reason"])):
        pq.write_table(changed, first)  # the schema's metadata kept: the stamp rides along
        assert CHECKED_KEY.encode() in pq.read_metadata(first).metadata
        with DuckEngine(_files(root)) as engine:
            assert engine.tallies() is None
    with DuckEngine(files, columns=["model", "status"]) as engine:  # a tallied column unread
        assert engine.vouched() is not None and engine.tallies() is None
    tallies = doc["tallies"]
    for bad in (
        tallies | {"length": -1},
        tallies | {"status": {"ok": doc["rows"] + 1}},
        tallies | {"sums": {"output_tokens": 1}},
        tallies | {"more": 1},
        tallies | {"error_types": {"oom": tallies["status"].get("error", 0) + 1}},
        tallies | {"ok_empty": tallies["ok_short"] + 1},
        [1],
    ):
        stamp = read_stamp(json.dumps(doc | {"tallies": bad}))
        assert stamp is not None and stamp.tallies is None, bad


def test_a_row_group_of_no_failure_leaves_the_file_vouched_and_tallied(
    compacted: Path, tmp_path: Path
) -> None:
    """A file of three row groups whose failures are all in the last: the first two state no
    extremes of the error type (they hold none), and the file is still vouched for and
    tallied, its tallies those pandas counts."""
    table = pq.read_table(_files(compacted)[0], partitioning=None)
    late = pa.array([i >= table.num_rows - 3 for i in range(table.num_rows)])
    for name, value in (("status", "error"), ("error_type", "timeout")):
        at = table.schema.get_field_index(name)
        kind = table.schema.field(name).type
        table = table.set_column(
            at, name, pc.if_else(late, pa.scalar(value, kind), table.column(name))
        )
    out = tmp_path / "groups.parquet"
    pq.write_table(stamp_checked(table), out, row_group_size=table.num_rows // 3)
    meta = pq.read_metadata(out)
    assert meta.num_row_groups >= 3
    at = meta.schema.names.index("error_type")
    assert not meta.row_group(0).column(at).statistics.has_min_max
    with DuckEngine([out]) as engine:
        assert engine.vouched() == table.num_rows
        said = engine.tallies()
    assert said is not None and said[0] is not None
    assert said[0]._asdict() == _tallied_by_pandas(out)
    assert said[0].error_types == {"timeout": 3}
