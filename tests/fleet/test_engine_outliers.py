"""`fleet outliers` through the query engine: the verdicts of the in-memory path on the same
files, every record counted, one fleet per model, quantiles within the stated 1 %."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fleetwatch.cli import main
from fleetwatch.fleet.outliers import Side, table_from_records
from fleetwatch.fleet.outliers.sources.engine import NEEDS, tables_from_engine
from fleetwatch.records.dataset import read_dataset
from fleetwatch.records.engine.reductions import RELATIVE_ERROR
from fleetwatch.records.engine.scan import open_scan
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet
from tests.fleet.test_by_model import BIG, SMALL, two_models
from tests.records.lacking import Lacking
from tests.records.plugin_tree import compacted, write_tree


def _outliers(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    code = main(["fleet", "outliers", *argv, "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)


def _verdicts(doc: dict) -> tuple[str, set[tuple[str, str, str, str]]]:
    """The verdict and each finding as (model, replica, signal, side)."""
    groups = doc.get("models", [{"model": "", **doc}])
    found = {
        (g["model"], f["replica"], f["signal"], f["side"]) for g in groups for f in g["findings"]
    }
    return doc["verdict"], found


FLEETS = {
    "one slow replica": lambda: synthetic_fleet(6, 240, seed=7, slowdown={2: 1.6}),
    "healthy": lambda: synthetic_fleet(6, 240, seed=11),
    "two healthy models": lambda: two_models(seed=1),
    "a slow small-model replica": lambda: two_models(seed=2, small={1: 1.7}),
    "a slow big-model replica": lambda: two_models(seed=3, big={0: 1.7}),
}


@pytest.mark.parametrize("name", FLEETS)
def test_the_engine_gives_the_in_memory_verdicts(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = write_tree(tmp_path / "fleet", FLEETS[name]())
    engine = _verdicts(_outliers([str(tree.root)], capsys))
    memory = _verdicts(_outliers([str(tree.root), "--engine", "memory"], capsys))
    assert engine == memory
    if name.startswith("healthy") or name.startswith("two healthy"):
        assert engine[0] == "no outlier"
    else:
        assert engine[0] == "outliers"


def test_two_models_blame_only_the_planted_replica(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for seed, small, big, planted in ((4, {2: 1.8}, None, (SMALL, "small-2")),
                                      (5, None, {1: 1.8}, (BIG, "big-1"))):  # fmt: skip
        tree = write_tree(tmp_path / f"fleet-{seed}", two_models(seed=seed, small=small, big=big))
        _, found = _verdicts(_outliers([str(tree.root)], capsys))
        blamed = {(m, r) for m, r, _, side in found if side == Side.REPLICA.value}
        assert blamed == {planted}


def test_every_record_is_counted_and_quantiles_are_within_one_percent(tmp_path: Path) -> None:
    frame = two_models(seed=6)
    tree = write_tree(tmp_path / "fleet", frame)
    with open_scan([tree.root], columns=NEEDS) as scan:
        tables = dict(tables_from_engine(scan.engine))
        assert scan.rows == len(frame)
    assert sum(float(t.volume.sum()) for t in tables.values()) == len(frame)
    whole = read_dataset([tree.root]).frame
    for model, table in tables.items():
        exact = table_from_records(whole[whole["model"] == model])
        for signal in ("ttft", "tpot", "e2e"):
            got = table.values[signal].to_numpy()
            want = exact.values[signal].reindex(table.values.index).to_numpy()
            assert np.all(np.abs(got / want - 1.0) <= RELATIVE_ERROR + 1e-12), (model, signal)
        for col in ("error_rate", "throughput"):
            want = exact.values[col].reindex(table.values.index)
            pd.testing.assert_series_equal(table.values[col], want, check_names=False, rtol=1e-9)
        pd.testing.assert_series_equal(
            table.volume, exact.volume.astype("float64"), check_names=False
        )


def test_records_naming_no_model_are_one_fleet_with_a_model_of_that_name(
    tmp_path: Path,
) -> None:
    """The engine groups the stored model column: a record naming no model (a null, which only
    the engine reads) counts under "(no model)", one fleet with the records of a model so named,
    a replica holding both kinds one replica, as when every such record names it."""
    from fleetwatch.records.engine.reductions import UNNAMED

    frame = two_models(seed=8).astype({"model": object})
    named = frame.assign(model=np.where(frame["model"] == BIG, UNNAMED, frame["model"]))
    got = {}
    for label in ("named", "mixed"):
        tree = write_tree(tmp_path / label, named)
        if label == "mixed":  # every other record of the big model's JSON lines names none
            for path in tree.root.glob("*/*.jsonl"):
                lines = path.read_text().splitlines()
                lines[::2] = [x.replace(f'"model":"{UNNAMED}"', '"model":null') for x in lines[::2]]
                path.write_text("\n".join(lines) + "\n")
            assert '"model":null' in "".join(p.read_text() for p in tree.root.glob("*/*.jsonl"))
        with open_scan([tree.root], columns=NEEDS) as scan:
            got[label] = dict(tables_from_engine(scan.engine))
    assert sorted(got["named"]) == sorted(got["mixed"]) == sorted([SMALL, UNNAMED])
    for model, table in got["named"].items():
        other = got["mixed"][model]
        pd.testing.assert_series_equal(table.volume, other.volume)
        pd.testing.assert_frame_equal(table.values, other.values, rtol=1e-12)


def test_a_model_with_no_value_of_a_signal_has_no_quantile_of_it(tmp_path: Path) -> None:
    """A second model whose requests all failed, and a third whose replies are one token each
    (no TPOT): their tables hold NaN where the in-memory path has no value, as it does."""
    frame = synthetic_fleet(4, 200, seed=3)
    failed = synthetic_fleet(3, 60, seed=4).assign(model="all-failed", status="error")
    failed["replica"] = "f-" + failed["replica"].astype(str)
    short = synthetic_fleet(3, 60, seed=5).assign(model="one-token", output_tokens=1)
    short["replica"] = "s-" + short["replica"].astype(str)
    short["finished_s"] = short["first_token_s"]
    whole = pd.concat([frame, failed, short], ignore_index=True)
    tree = write_tree(tmp_path / "fleet", whole)
    with open_scan([tree.root], columns=NEEDS) as scan:
        tables = dict(tables_from_engine(scan.engine))
    assert set(tables) == {"m", "all-failed", "one-token"}
    assert tables["all-failed"].values[["ttft", "tpot", "e2e"]].isna().all().all()
    assert tables["one-token"].values["tpot"].isna().all()
    assert tables["one-token"].values[["ttft", "e2e"]].notna().all().all()
    assert tables["m"].values[["ttft", "tpot", "e2e"]].notna().all().all()


def test_cells_by_merged_prompt_buckets_equal_the_cells_keyed_by_model(tmp_path: Path) -> None:
    """Where each replica serves one model the cells are counted by the models' edges merged,
    the model not read: the same cells as counted with the model in the key, each request in
    the prompt bucket ``searchsorted(edges, u, side="right")`` of its model's own edges (edges
    that differ between the models and fall between integers, as interpolated quantiles do)."""
    from fleetwatch.fleet.outliers.sources import engine as reduced
    from fleetwatch.records.io import add_derived

    frame = two_models(seed=9)
    tree = write_tree(tmp_path / "fleet", frame)
    own = {SMALL: [150.5, 300.0, 301.25, 900.0], BIG: [120.0, 300.0, 640.75]}
    edges = {(m, s): np.array(e) for m, e in own.items() for s in ("ttft", "tpot", "e2e")}
    with open_scan([tree.root], columns=NEEDS) as scan:
        summary = reduced._summary(scan.engine)
        models = summary["model"].unique().tolist()
        replicas = summary["replica"].astype(str).unique().tolist()
        owners = dict(zip(summary["replica"].astype(str), summary["model"], strict=True))
        keyed = reduced._cells(scan.engine, edges, models, replicas)
        merged = reduced._cells(scan.engine, edges, models, replicas, owners=owners)
    pd.testing.assert_frame_equal(merged, keyed)
    whole = add_derived(read_dataset([tree.root]).frame)
    ok = whole[whole["status"] == "ok"]
    u = (ok["prompt_tokens"] - ok["cached_prompt_tokens"].fillna(0)).to_numpy()
    for signal in ("ttft", "tpot", "e2e"):
        for model, bounds in own.items():
            mine = ((ok["model"] == model) & ok[f"{signal}_s"].notna()).to_numpy()
            want = np.bincount(np.searchsorted(bounds, u[mine], side="right"))
            cells = merged[(merged["model"] == model) & (merged["signal"] == signal)]
            got = cells.groupby("pb")["n"].sum().reindex(range(len(want)), fill_value=0)
            assert got.tolist() == want.tolist(), (model, signal)


def test_cells_counted_from_each_files_replica_equal_the_grouping_sets_of_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compacted dataset (two Parquet files a replica): the cells' keys are streamed as
    integers, each row's replica its file's, and counted here (in batches of 100 rows, so
    counts of many batches add up): the same cells, row for row, as the grouping sets over the
    replica's name; and the same tables."""
    from fleetwatch.fleet.outliers.sources import engine as reduced
    from fleetwatch.records.engine import counting
    from fleetwatch.records.engine.duck import DuckEngine

    monkeypatch.setattr(counting, "_BATCH", 100)
    whole = two_models(seed=6)
    files = compacted(tmp_path / "compacted", whole)
    streamed: list[str] = []
    with DuckEngine(files, columns=NEEDS) as engine:
        real = engine.arrow_batches

        def spied(sql: str, rows: int) -> object:
            streamed.append(sql)
            return real(sql, rows)

        engine.arrow_batches = spied  # type: ignore[method-assign]
        summary = reduced._summary(engine)
        models = summary["model"].unique().tolist()
        replicas = summary["replica"].astype(str).unique().tolist()
        owners = dict(zip(summary["replica"].astype(str), summary["model"], strict=True))
        edges = reduced._edges(reduced._uncached_counts(engine), 8)
        coded = reduced._cells(engine, edges, models, replicas, owners=owners)
        assert len(streamed) == 1 and "fw_file" in streamed[0]
        named = reduced._cells(Lacking(engine, "by_file"), edges, models, replicas, owners=owners)  # type: ignore[arg-type]
        assert len(streamed) == 1
        pd.testing.assert_frame_equal(coded, named)
        assert len(coded) > 100 and set(coded["replica"]) == set(replicas)
        got = dict(tables_from_engine(engine))
        want = dict(tables_from_engine(Lacking(engine, "by_file")))  # type: ignore[arg-type]
    assert set(got) == set(want) == {SMALL, BIG}
    for model in got:
        for part in ("values", "stderr", "matched", "workload", "samples"):
            pd.testing.assert_frame_equal(getattr(got[model], part), getattr(want[model], part))


@pytest.mark.parametrize("lacking", [False, True], ids=["every-time", "ok-lacking-a-time"])
def test_spans_from_the_footers_give_the_tables_of_a_summary_reading_the_times(
    tmp_path: Path, lacking: bool
) -> None:
    """A dataset of a file a replica (as ``records compact`` writes it, its stamps' tallies
    left unread): the summary reads no time, each replica's first arrival and last finish come from the footers, and where an ok
    request lacks its first token (so its ttft) the cells' counts tell it, and the prompt sizes
    and cells are counted again per signal: every table equal to the one of a summary that
    reads the times."""
    from fleetwatch.fleet.outliers.sources import engine as reduced
    from fleetwatch.records.engine.duck import DuckEngine

    whole = two_models(seed=4)
    if lacking:  # ok requests of two replicas without a first token: no ttft, no tpot
        at = whole.index[(whole["status"] == "ok")][[3, 700]]
        whole.loc[at, "first_token_s"] = np.nan
    files = compacted(tmp_path / "compacted", whole, parts=1)
    queries: list[str] = []
    again: list[bool] = []
    real_lack = reduced._lack_times
    with DuckEngine(files, columns=NEEDS) as engine:
        spans = engine.spans()
        assert spans is not None and len(spans) == whole["replica"].nunique()
        for (model, replica), (first, last) in spans.items():
            mine = whole[(whole["model"] == model) & (whole["replica"] == replica)]
            assert (first, last) == (mine["arrival_s"].min(), mine["finished_s"].max())
        real_query = engine.query

        def spied(sql: str) -> pd.DataFrame:
            queries.append(sql)
            return real_query(sql)

        engine.query = spied  # type: ignore[method-assign]

        def lack(summary: pd.DataFrame, cells: pd.DataFrame) -> bool:
            again.append(real_lack(summary, cells))
            return again[-1]

        reduced._lack_times = lack  # type: ignore[assignment]
        try:  # files stamped with no tallies: the summary is a scan's
            got = dict(tables_from_engine(Lacking(engine, "tallies")))  # type: ignore[arg-type]
        finally:
            reduced._lack_times = real_lack  # type: ignore[assignment]
        read = queries[0][: queries[0].index(" FROM ")]  # the select list, not the source
        assert "arrival_s" not in read and "first_token_s" not in read
        sizes = [q for q in queries if "coalesce(cached_prompt_tokens, 0)) AS u" in q]
        assert len(sizes) == (2 if lacking else 1)
        want = dict(tables_from_engine(Lacking(engine, "spans")))  # type: ignore[arg-type]
    assert again == [lacking]
    assert set(got) == set(want) == {SMALL, BIG}
    for model in got:
        for part in ("values", "stderr", "matched", "workload"):
            pd.testing.assert_frame_equal(getattr(got[model], part), getattr(want[model], part))
        pd.testing.assert_frame_equal(got[model].samples, want[model].samples)
    if lacking:
        assert got[SMALL].values["ttft"].notna().all()


def test_spans_are_said_only_where_the_footers_say_them_exactly(tmp_path: Path) -> None:
    """No span where a file holds two replicas, where a filter keeps some rows only, or where
    JSON lines are in the dataset: their first and last times are a query's."""
    from fleetwatch.records import write_records
    from fleetwatch.records.engine.duck import DuckEngine
    from fleetwatch.records.filters import RecordFilter

    whole = synthetic_fleet(3, 40, seed=5)
    both = tmp_path / "both.parquet"
    write_records(both, whole)
    with DuckEngine([both]) as engine:
        assert engine.spans() is None
    tree = write_tree(tmp_path / "tree", whole)
    with DuckEngine(sorted(tree.root.rglob("records-*"))) as engine:
        assert engine.spans() is None  # JSON lines beside the Parquet segments
    parquet = sorted(tree.root.rglob("*.parquet"))
    with DuckEngine(parquet) as engine:
        assert engine.spans() is not None
    with DuckEngine(parquet, where=RecordFilter(since_s=float(whole["finished_s"].median()))) as e:
        assert e.spans() is None


@pytest.mark.parametrize("untimed", [True, False], ids=["ok-lacking-a-time", "every-time"])
def test_a_summary_from_the_stamps_tallies_gives_the_tables_of_a_scanned_one(
    tmp_path: Path, untimed: bool
) -> None:
    """A compacted dataset whose stamps tally each file's rows (failures of two types and of
    none, truncations, empty and one-token outputs, with or without ok requests lacking a first
    token): the summary runs no query, each replica's ``lacking`` is that of a scan reading the
    times, and every table equals the one of a summary counted by a scan."""
    from fleetwatch.fleet.outliers.sources import engine as reduced
    from fleetwatch.records.engine.duck import DuckEngine

    whole = two_models(seed=4)
    rng = np.random.default_rng(3)
    n = len(whole)
    failed = rng.random(n) < 0.05
    status = whole["status"].astype(object)
    status[failed] = "error"
    whole["status"] = status.astype("category")
    kinds = np.array(["timeout", "oom", None], dtype=object)[rng.integers(0, 3, n)]
    whole["error_type"] = pd.array(np.where(failed, kinds, None), dtype="string")
    whole.loc[rng.random(n) < 0.03, "output_tokens"] = 0
    whole.loc[rng.random(n) < 0.03, "output_tokens"] = 1
    whole["finish_reason"] = pd.array(
        np.where(rng.random(n) < 0.3, "stop", "length"), dtype="string"
    )
    if untimed:
        ok = whole.index[~failed]
        whole.loc[ok[[5, 900]], "first_token_s"] = np.nan
    files = compacted(tmp_path / "compacted", whole)
    queries: list[str] = []
    with DuckEngine(files, columns=NEEDS) as engine:
        assert engine.tallies() is not None
        real = engine.query

        def spied(sql: str) -> pd.DataFrame:
            queries.append(sql)
            return real(sql)

        engine.query = spied  # type: ignore[method-assign]
        tallied = reduced._summary(engine, times=False)
        assert queries == []
        scanned = reduced._summary(Lacking(engine, "tallies"), times=False)  # type: ignore[arg-type]
        timed = reduced._summary(Lacking(engine, "tallies"), times=True)  # type: ignore[arg-type]
        assert len(queries) == 2
        got = dict(tables_from_engine(engine))
        want = dict(tables_from_engine(Lacking(engine, "tallies")))  # type: ignore[arg-type]
    order = ["model", "replica"]
    tallied = tallied.sort_values(order).reset_index(drop=True)
    scanned = scanned.sort_values(order).reset_index(drop=True)
    timed = timed.sort_values(order).reset_index(drop=True)
    assert tallied["lacking"].tolist() == timed["lacking"].tolist()  # exact, as a scan's
    assert tallied["lacking"].max() == (2 if untimed else 1)
    pd.testing.assert_frame_equal(tallied.drop(columns="lacking"), scanned.drop(columns="lacking"))
    assert set(got) == set(want) == {SMALL, BIG}
    for model in got:
        for part in ("values", "stderr", "matched", "workload", "samples"):
            pd.testing.assert_frame_equal(getattr(got[model], part), getattr(want[model], part))
        assert {"error_type=timeout", "error_type=oom"} <= set(got[model].values.columns)
