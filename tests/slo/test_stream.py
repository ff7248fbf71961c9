"""Out-of-core backtests: a Parquet file streamed in tiny row groups gives what the whole frame
gives, and its bad rows are named by their row in the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fleetwatch.core.records.schema import FIELDS, ITL_BOUNDS
from fleetwatch.records import RecordError, read_records, write_records
from fleetwatch.scenarios.slo_records import Incident, synthetic_records
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.load import load_spec
from fleetwatch.slo.report import backtest_spec, report_spec
from fleetwatch.slo.stream import backtest_parquet, stream_counts

H = 3600.0
SPEC = """
service: s
evaluation_interval: 30s
slos:
  - {name: avail, objective: 99.9, period: 1d, sli: {kind: availability, bad: [error]},
     selector: {traffic_class: chat}, min_events: 5}
  - {name: ttft, objective: 99, period: 1d, sli: {kind: latency, signal: ttft, threshold: 0.5}}
  - {name: itl, objective: 99, period: 1d, sli: {kind: latency, signal: itl, threshold: 0.1}}
  - {name: goodput, objective: 95, period: 1d, sli: {kind: goodput, ttft: 0.5, tpot: 0.05}}
"""


def _frame():
    rng = np.random.default_rng(21)
    frame = synthetic_records(
        rng, n=6000, start_s=1_700_000_000.0, duration_s=8 * H, classes=("chat", "batch"),
        incidents=[Incident(1_700_000_000.0 + 3 * H, 1_700_000_000.0 + 3.5 * H,
                            error_ratio=0.3, latency_factor=4.0)],
    )  # fmt: skip
    out = frame["output_tokens"].to_numpy()
    gaps = np.zeros((len(frame), len(ITL_BOUNDS) + 1), dtype=np.int64)
    slow = ITL_BOUNDS.index(0.15)
    for i, n in enumerate(np.maximum(out - 1, 0)):
        k = int(rng.integers(0, 3)) if n else 0
        gaps[i, 4] = n - min(k, n)
        gaps[i, slow] = min(k, n)
    frame["itl_buckets"] = list(map(tuple, gaps.tolist()))
    return frame


def _same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.intervals == y.intervals
        assert (x.timeline.times == y.timeline.times).all()
        assert (x.timeline.cum_total == y.timeline.cum_total).all()
        assert (x.timeline.cum_bad == y.timeline.cum_bad).all()
        for s, t in zip(x.tracks, y.tracks, strict=True):
            assert (s.firing == t.firing).all()


def test_tiny_row_groups_stream_to_the_same_backtest_and_report(tmp_path: Path) -> None:
    spec = load_spec(SPEC)
    path = tmp_path / "records.parquet"
    write_records(path, _frame())
    frame = read_records(path)
    tiny = tmp_path / "tiny.parquet"
    pq.write_table(pq.read_table(path), tiny, row_group_size=97)
    assert pq.ParquetFile(tiny).num_row_groups > 50
    whole = backtest_spec(spec, frame)
    assert any(bt.intervals for bt in whole)
    _same(backtest_spec(spec, tiny), whole)
    _same(backtest_parquet(spec, tiny, batch_rows=13), whole)
    assert report_spec(spec, tiny) == report_spec(spec, frame)
    streamed = stream_counts(spec, tiny, batch_rows=50)
    assert streamed.records == len(frame)


def test_old_files_without_gap_counts_stream_until_an_itl_slo_needs_them(tmp_path: Path) -> None:
    path = tmp_path / "old.parquet"
    write_records(path, _frame().drop(columns=["itl_buckets"]))
    spec = load_spec(SPEC)
    no_itl = load_spec(SPEC.replace(
        "  - {name: itl, objective: 99, period: 1d, sli: {kind: latency, signal: itl, threshold: 0.1}}\n", ""
    ))  # fmt: skip
    assert len(backtest_spec(no_itl, path)) == 3
    with pytest.raises(SLOSpecError, match="itl_buckets"):
        backtest_spec(spec, path)


def test_a_bad_row_is_named_by_its_row_in_the_file(tmp_path: Path) -> None:
    frame = _frame()
    frame = frame[[f.name for f in FIELDS if f.name in frame.columns]].copy()
    frame["status"] = frame["status"].astype(str)
    frame.loc[4321, "finished_s"] -= 1e6  # before its arrival
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, row_group_size=100)
    with pytest.raises(RecordError) as info:
        backtest_spec(load_spec(SPEC), path)
    assert (info.value.row, info.value.field) == (4322, "finished_s")
    with pytest.raises(RecordError) as whole:
        read_records(path)
    assert (whole.value.row, whole.value.field) == (4322, "finished_s")


def test_the_cli_streams_parquet_and_checks_selectors_from_distinct_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    import fleetwatch.records
    from fleetwatch.cli import main

    path = tmp_path / "records.parquet"
    frame = _frame().drop(columns=["itl_buckets"])
    write_records(path, frame)
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace(
        "  - {name: itl, objective: 99, period: 1d, sli: {kind: latency, signal: itl, threshold: 0.1}}\n", ""
    ))  # fmt: skip
    expected = backtest_spec(load_spec(spec.read_text()), read_records(path))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a Parquet file was read whole")

    monkeypatch.setattr(fleetwatch.records, "read_records", refuse)
    assert main(["slo", "backtest", str(spec), "--records", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [len(s["intervals"]) for s in out["slos"]] == [len(bt.intervals) for bt in expected]
    assert any(s["intervals"] for s in out["slos"])
    assert main(["slo", "report", str(spec), "--records", str(path)]) == 0
    # a selector matching none of the records: one line naming it, the rows and the values held
    spec.write_text(spec.read_text().replace("traffic_class: chat", "traffic_class: voice"))
    assert main(["slo", "backtest", str(spec), "--records", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"matches none of the {len(frame)} records" in err and "'batch', 'chat'" in err
    # and a file with no rows
    empty = tmp_path / "empty.parquet"
    write_records(empty, frame.iloc[:0])
    assert main(["slo", "report", str(spec), "--records", str(empty)]) == 2
    assert "no records" in capsys.readouterr().err


ENGINE_SPEC = """
service: s
evaluation_interval: 30s
slos:
  - {name: avail, objective: 99.9, period: 1d, sli: {kind: availability, bad: [error, rejected]},
     selector: {traffic_class: chat}}
  - {name: avail-all, objective: 99.9, period: 1d, sli: {kind: availability, bad: [error]}}
  - {name: ttft, objective: 99, period: 1d, sli: {kind: latency, signal: ttft, threshold: 0.5}}
  - {name: tpot, objective: 99, period: 1d, sli: {kind: latency, signal: tpot, threshold: 0.05},
     selector: {model: m1}}
  - {name: e2e, objective: 99, period: 1d, sli: {kind: latency, signal: e2e, threshold: 2.0},
     selector: {model: m1, traffic_class: batch}}
  - {name: goodput, objective: 95, period: 1d, sli: {kind: goodput, ttft: 0.5, tpot: 0.05}}
"""


def test_the_engine_bins_every_sli_as_the_events_of_the_records_are_binned(
    tmp_path: Path,
) -> None:
    """``engine_counts`` (one GROUP BY in the engine for the SLOs sharing an event time and bin)
    equals ``stream_counts`` over the same rows for every kind of SLI and selector: latencies exactly at their thresholds (good:
    a bucket counts values at most its bound), one-token outputs (no TPOT), requests with no
    first token, times exactly on a bin's edge."""
    from fleetwatch.records.engine.duck import DuckEngine
    from fleetwatch.slo.stream import engine_counts

    frame = _frame().drop(columns=["itl_buckets"])
    rng = np.random.default_rng(3)
    n = len(frame)
    frame["model"] = np.where(rng.random(n) < 0.5, "m1", "m2").astype(object)
    at = rng.random(n) < 0.05  # TTFT exactly 0.5 s, and finishes on a 30 s edge
    frame.loc[at, "first_token_s"] = frame.loc[at, "arrival_s"] + 0.5
    edge = np.ceil(frame.loc[at, "finished_s"] / 30.0) * 30.0
    frame.loc[at, "finished_s"] = np.maximum(edge, frame.loc[at, "first_token_s"])
    one = rng.random(n) < 0.05
    frame.loc[one, "output_tokens"] = 1
    path = tmp_path / "r.parquet"
    write_records(path, frame)
    spec = load_spec(ENGINE_SPEC)
    expect = stream_counts(spec, path)
    from fleetwatch.slo.events import sli_sql

    with DuckEngine([path]) as engine:
        queries: list[str] = []
        query = engine.query

        def counted(sql: str) -> Any:
            queries.append(sql)
            return query(sql)

        engine.query = counted  # type: ignore[method-assign]
        got = engine_counts(spec, engine)
    assert len(queries) == len({sli_sql(slo).time for slo in spec.slos}) < len(spec.slos)
    assert (got.first_finish_s, got.last_finish_s, got.records) == (
        expect.first_finish_s,
        expect.last_finish_s,
        expect.records,
    )
    for slo, a, b in zip(spec.slos, got.counts, expect.counts, strict=True):
        lo, hi = min(a.first, b.first), max(a.last, b.last)
        ta, ba = a.window(lo, hi)
        tb, bb = b.window(lo, hi)
        assert ta.sum() > 0, slo.name
        assert (ta == tb).all() and (ba == bb).all(), slo.name
