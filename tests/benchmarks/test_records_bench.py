"""The records benchmark's data and baseline (``benchmarks/records_*.py``) on its ``small`` size:
the generator writes valid records in the vLLM plugin's shape (a folder per host and process,
the sink's file names, a file per 10 s), the planted slow replicas are there, the halves split
the files by time, the fast JSON-lines writer writes what the project's writer does, and the
DuckDB SQL baseline computes the per-replica figures numpy computes from the same rows."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from benchmarks.process_cost import measure
from benchmarks.records_datasets import SIZES, Made, ensure
from benchmarks.records_files import json_lines, write_parquet
from benchmarks.records_fleet import FleetShape, replica_columns
from benchmarks.records_sql import Format, script
from fleetwatch.core.records.write import json_line
from fleetwatch.records import read_records
from fleetwatch.records.engine.duck import DuckEngine
from fleetwatch.records.io import from_frame


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    return ensure("small", tmp_path_factory.mktemp("cache"), log=lambda _: None)


@pytest.fixture(scope="module")
def frame(made: Made) -> pd.DataFrame:
    """Every record, read file by file, with the process folder it was read from."""
    files = sorted(made.fleet.rglob("*.jsonl"))
    return pd.concat(
        [read_records(f).assign(folder=f"{f.parent.parent.name}/{f.parent.name}") for f in files],
        ignore_index=True,
    )


def test_files_are_the_plugins_one_folder_per_host_and_process(made: Made) -> None:
    shape = made.dataset.shape
    folders = sorted(p for p in made.fleet.glob("*/*") if p.is_dir())
    assert len(folders) == shape.replicas
    assert sorted({p.parent.name for p in folders}) == [f"host-{h:02d}" for h in range(shape.hosts)]
    seals = int(made.dataset.duration_s / shape.seal_s)
    for folder in folders:
        pid = re.fullmatch(r"vllm-(\d+)", folder.name)
        assert pid is not None
        names = sorted(p.name for p in folder.iterdir())
        assert names == [f"vllm-{pid[1]}-{k:06d}.jsonl" for k in range(1, seals + 1)]
    assert made.files == shape.replicas * seals


def test_every_record_is_valid_and_its_folder_is_its_replicas(
    made: Made, frame: pd.DataFrame
) -> None:
    shape = made.dataset.shape
    by_folder = dict(tuple(frame.groupby("folder")))
    assert len(by_folder) == shape.replicas
    for i in range(shape.replicas):
        rep = shape.replica(i)
        df = by_folder[f"{rep.host}/vllm-{rep.pid}"]
        assert set(df["replica"]) == {rep.name}
        assert set(df["model"]) == {rep.model}
        assert df["finished_s"].is_monotonic_increasing
        assert df["finished_s"].min() >= made.dataset.start_s
        assert df["finished_s"].max() < made.dataset.end_s
        assert abs(len(df) - shape.rate_per_s * made.dataset.duration_s) < 150


def test_the_fast_lines_are_the_projects_json_lines(made: Made) -> None:
    shape = made.dataset.shape
    rep = shape.replica(3)
    cols = replica_columns(shape, 3, made.dataset.start_s, made.dataset.end_s)
    lines = json_lines(rep, cols)
    assert (cols["status"] != "ok").any() and np.isnan(cols["first_token_s"]).any()
    files = sorted((made.fleet / rep.host / f"vllm-{rep.pid}").glob("*.jsonl"))
    on_disk = "".join(f.read_text(encoding="utf-8") for f in files)
    assert on_disk == "".join(lines)
    records = from_frame(pd.concat([read_records(f) for f in files], ignore_index=True))
    assert [json_line(r) for r in records] == lines


def test_errors_and_nulls_are_as_the_plugin_writes_them(frame: pd.DataFrame) -> None:
    bad = (frame["status"] != "ok").mean()
    assert 0.002 < bad < 0.01
    no_token = frame["output_tokens"] == 0
    assert no_token.any()
    assert frame.loc[no_token, "first_token_s"].isna().all()
    assert frame.loc[no_token, "scheduled_s"].isna().all()
    assert (frame.loc[~no_token, "first_token_s"].notna()).all()
    assert frame["tenant"].isna().all() and frame["itl_buckets"].isna().all()


def test_the_planted_replicas_are_the_slow_ones(made: Made, frame: pd.DataFrame) -> None:
    assert len(made.planted) == len(made.dataset.shape.models) == 2
    p50 = frame.groupby(["model", "replica"])["tpot_s"].median()
    for _, part in p50.groupby(level="model"):
        slowest = part.droplevel("model").idxmax()
        assert slowest in made.planted
        others = part.droplevel("model").drop(slowest)
        assert 1.35 < part.max() / others.median() < 1.65


def test_the_halves_split_the_files_at_the_middle(made: Made) -> None:
    mid = made.dataset.mid_s
    before = sorted(p.relative_to(made.before) for p in made.before.rglob("*.jsonl"))
    after = sorted(p.relative_to(made.after) for p in made.after.rglob("*.jsonl"))
    every = sorted(p.relative_to(made.fleet) for p in made.fleet.rglob("*.jsonl"))
    assert sorted(before + after) == every and len(before) == len(after)
    assert read_records(made.before / before[-1])["finished_s"].max() < mid
    assert read_records(made.after / after[0])["finished_s"].min() >= mid


def test_a_complete_dataset_is_reused(made: Made) -> None:
    again = ensure("small", made.root.parent, log=lambda _: None)
    assert again.reused and again.records == made.records


def _baseline(
    command: str, paths: list[Path], fmt: Format = "jsonl", model: str | None = None
) -> list[tuple[Any, ...]]:
    duckdb = pytest.importorskip("duckdb")
    rows: list[tuple[Any, ...]] = (
        duckdb.connect().execute(script(command, [str(p) for p in paths], fmt, model)).fetchall()
    )
    return rows


def test_the_baseline_computes_numpys_per_replica_figures(made: Made, frame: pd.DataFrame) -> None:
    rows = _baseline("outliers", [made.fleet])
    assert len(rows) == made.dataset.shape.replicas
    for model, replica, n, error_rate, ttft, tpot, e2e in rows:
        part = frame[(frame["model"] == model) & (frame["replica"] == replica)]
        assert n == len(part)
        assert error_rate == pytest.approx((part["status"] != "ok").mean(), abs=1e-12)
        for got, col in ((ttft, "ttft_s"), (tpot, "tpot_s"), (e2e, "e2e_s")):
            want = np.percentile(part[col].dropna().to_numpy(), 50)
            assert got == pytest.approx(want, rel=1e-12)


def test_the_baseline_tail_is_numpys_p99_cohort(made: Made, frame: pd.DataFrame) -> None:
    rows = _baseline("tail", [made.fleet])
    for model, part in frame.groupby("model"):
        e2e = part["e2e_s"].to_numpy()
        p99 = np.percentile(e2e, 99)
        tail = part[e2e >= p99]
        got = {r[1]: (r[2], r[4]) for r in rows if r[0] == model}
        shares = tail["replica"].value_counts(normalize=True)
        assert set(got) == set(shares.index)
        for replica, (threshold, share) in got.items():
            assert threshold == pytest.approx(p99, rel=1e-12)
            assert share == pytest.approx(shares[replica], abs=1e-12)


def test_the_baseline_compare_and_backtest_count_every_row(made: Made, frame: pd.DataFrame) -> None:
    halves = _baseline("compare", [made.before, made.after])
    assert sum(r[2] for r in halves) == len(frame)
    model = made.dataset.shape.models[0].name
    bins = _baseline("backtest", [made.fleet], model=model)
    mine = frame[frame["model"] == model]
    assert sum(r[2] for r in bins) == len(mine)
    assert sum(r[1] for r in bins) == (mine["status"] == "ok").sum()


def test_the_parquet_dataset_is_hive_partitioned_and_readable(tmp_path: Path) -> None:
    shape = SIZES["small"].shape
    start = 1796061600.0 + 3000.0  # crosses an hour
    cols = replica_columns(shape, 0, start, start + 1200.0)
    written = write_parquet(tmp_path, shape.replica(0), cols)
    paths = [p.relative_to(tmp_path).as_posix() for p, _ in written.files]
    assert paths == [
        f"date=2026-11-30/hour={h}/replica=host-00-gpu0/part-0.parquet" for h in ("18", "19")
    ]
    df = pd.concat([read_records(p) for p, _ in written.files], ignore_index=True)
    assert len(df) == written.records == len(cols["finished_s"])
    np.testing.assert_array_equal(df["first_token_s"].to_numpy(), cols["first_token_s"])
    with DuckEngine([p for p, _ in written.files]) as engine:  # stamped as compact stamps
        assert engine.vouched() == len(df)
    rows = _baseline("outliers", [tmp_path], "parquet")
    assert [r[:3] for r in rows] == [(shape.models[0].name, "host-00-gpu0", len(df))]


def test_the_shape_draws_each_replica_from_its_own_seed() -> None:
    shape = FleetShape()
    a = replica_columns(shape, 7, 0.0 + 1.7e9, 60.0 + 1.7e9)
    b = replica_columns(shape, 7, 0.0 + 1.7e9, 60.0 + 1.7e9)
    np.testing.assert_array_equal(a["finished_s"], b["finished_s"])
    assert shape.planted() == ["host-06-gpu2", "host-20-gpu6"]


def test_a_measured_run_past_its_limit_is_killed_and_says_so(tmp_path: Path) -> None:
    done = measure(
        [sys.executable, "-c", "pass"], timeout_s=60, rss_cap_mb=10_000, scratch=tmp_path
    )
    assert done.ok and done.rss_mb > 1
    slow = measure(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        timeout_s=0.3,
        rss_cap_mb=10_000,
        scratch=tmp_path,
    )
    assert not slow.ok and slow.first_error() == "timed out after 0.3 s"
