"""`fleet tail` through the query engine: exact thresholds and medians from order statistics in
the engine, the requests summed a group of replicas at a time, and the report the in-memory
attribution gives, however the replicas are grouped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fleetwatch.fleet.by_model import ByModel
from fleetwatch.fleet.tail import attribute_tail, attribute_tail_by_model
from fleetwatch.fleet.tail.cohorts import decompose, ok_requests
from fleetwatch.fleet.tail.engine import NEEDS, plan_in_engine, tail_in_engine
from fleetwatch.fleet.tail.examples import in_engine
from fleetwatch.records.dataset import read_dataset
from fleetwatch.records.engine.duck import DEFERRED
from fleetwatch.records.engine.scan import open_scan
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet
from tests.fleet.test_by_model import two_models
from tests.records.lacking import Lacking
from tests.records.plugin_tree import write_tree
from tests.rounding import rounded


@pytest.fixture(scope="module")
def one_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    frame = synthetic_fleet(6, 400, seed=21, slowdown={3: 1.7})
    return write_tree(tmp_path_factory.mktemp("tail-engine") / "fleet", frame).root


@pytest.mark.parametrize("target", ["e2e", "ttft"])
@pytest.mark.parametrize("chunk_rows", [1, 500, 10_000_000])
def test_grouped_replicas_give_the_in_memory_report(
    one_model: Path, target: str, chunk_rows: int
) -> None:
    whole = read_dataset([one_model]).frame
    expect = attribute_tail(whole, target=target).to_dict()  # type: ignore[arg-type]
    with open_scan([one_model], columns=NEEDS) as scan:
        got = tail_in_engine(scan.engine, target=target, chunk_rows=chunk_rows)  # type: ignore[arg-type]
    assert rounded(got.to_dict()) == rounded(expect)


def test_the_plan_is_exact(one_model: Path) -> None:
    whole = read_dataset([one_model]).frame
    req = ok_requests(whole)
    y, parts = decompose(req, "e2e")
    with open_scan([one_model], columns=NEEDS) as scan:
        plan, counts = plan_in_engine(scan.engine, "m", 99.0, "e2e", 0.9)
    assert plan.threshold == float(np.percentile(y, 99.0))
    body = y < plan.threshold
    assert plan.per_prompt == float(
        np.median(parts["prefill"][body] / np.maximum(req.uncached[body], 1.0))
    )
    assert sum(counts.values()) == len(req) and len(counts) == 6


def test_each_model_is_attributed_apart(tmp_path: Path) -> None:
    frame = two_models(seed=9, big={2: 1.8})
    root = write_tree(tmp_path / "fleet", frame).root
    expect = attribute_tail_by_model(read_dataset([root]).frame)
    with open_scan([root], columns=NEEDS) as scan:
        got = tail_in_engine(scan.engine, chunk_rows=400)
    assert isinstance(got, ByModel) and isinstance(expect, ByModel)
    assert rounded(got.to_dict()) == rounded(expect.to_dict())


def _recorded_tail(
    root: Path, way: str
) -> tuple[list[int], list[set[str]], list[str], list[int], Any]:
    """``tail_in_engine`` in chunks of 900 rows, a group's rows brought by ``way`` (``table``,
    or ``frames`` from an engine lacking ``table``): each group's size and replicas, the
    queries that brought groups, the rows of the listed requests' query, and the report."""
    import fleetwatch.fleet.tail.engine as tail_engine

    sizes: list[int] = []
    owners: list[set[str]] = []
    queries: list[str] = []
    listed: list[int] = []
    with open_scan([root], columns=NEEDS) as scan:
        engine = scan.engine if way == "table" else Lacking(scan.engine, "table")
        frames, table, groups = scan.engine.frames, scan.engine.table, tail_engine._groups

        def recorded_frames(*args: Any, **kwargs: Any) -> Any:
            if "request_id" in args[0]:  # the listed requests' ids
                got = list(frames(*args, **kwargs))
                listed.append(sum(len(f) for f in got))
                yield from got
                return
            queries.append("frames")
            yield from frames(*args, **{**kwargs, "rows": 50})  # a group comes in batches

        def recorded_table(*args: Any, **kwargs: Any) -> Any:
            queries.append("table")
            return table(*args, **kwargs)

        def recorded_groups(*args: Any) -> Any:
            for req in groups(*args):
                sizes.append(len(req))
                owners.append({req.replicas[c] for c in np.unique(req.codes)})
                yield req

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(scan.engine, "frames", recorded_frames)
            patch.setattr(scan.engine, "table", recorded_table)
            patch.setattr(tail_engine, "_groups", recorded_groups)
            report = tail_in_engine(engine, chunk_rows=900)  # type: ignore[arg-type]
        assert sum(sizes) == scan.rows
    return sizes, owners, queries, listed, report


def test_no_chunk_holds_more_than_its_rows(one_model: Path) -> None:
    """Memory is one chunk's requests: no group handed to the sums is larger than the chunk (a
    replica alone may be), every replica is in one group only, and each group is one query
    (the engine reads its replicas' rows: as one Arrow table, or as frames a batch at a time
    where it hands no table; never the dataset at once); the requests listed are read with
    their ids by one query more, of a few rows. Both ways give the same report."""
    reports = []
    for way in ("table", "frames"):
        sizes, owners, queries, listed, report = _recorded_tail(one_model, way)
        assert len(sizes) == 3 and max(sizes) <= 900
        assert queries == [way] * 3
        assert not isinstance(report, ByModel)
        assert len(listed) == 1 and 0 < listed[0] <= report.n_tail  # the tail's rows only
        assert sum(len(o) for o in owners) == len(set().union(*owners)) == 6
        reports.append(report.to_dict())
    assert reports[0] == reports[1]


@pytest.mark.parametrize("fmt", ["parquet", "mixed"])
def test_rows_are_summed_in_one_order_the_same_every_run(
    one_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """DuckDB over Parquet brings a group's rows unsorted (in the files' order, fixed); rows of
    JSON lines (read in parallel, in no set order) are sorted first. Either way two runs give
    the same report to the last bit."""
    from fleetwatch.fleet.tail.engine import ROW_ORDER
    from fleetwatch.records import write_records

    root = one_model
    if fmt == "parquet":
        root = tmp_path / "parquet"
        root.mkdir()
        whole = read_dataset([one_model]).frame
        for replica, rows in whole.groupby("replica", observed=True, sort=True):
            write_records(root / f"{replica}.parquet", rows)
    seen: list[tuple[str, ...]] = []
    runs = []
    for _ in range(2):
        with open_scan([root], columns=NEEDS) as scan:
            assert scan.engine.in_file_order == (fmt == "parquet")

            def recorded(*args: Any, table: Any = scan.engine.table, **kwargs: Any) -> Any:
                seen.append(tuple(kwargs.get("order", ())))  # a group's query
                return table(*args, **kwargs)

            monkeypatch.setattr(scan.engine, "table", recorded)
            runs.append(tail_in_engine(scan.engine, chunk_rows=900).to_dict())  # type: ignore[union-attr]
    assert runs[0] == runs[1]
    assert set(seen) == ({()} if fmt == "parquet" else {ROW_ORDER})


@pytest.mark.parametrize("defer", [(), DEFERRED])
def test_the_tail_lists_requests_to_look_up_with_their_trace_ids(
    tmp_path: Path, defer: tuple[str, ...]
) -> None:
    """The report lists the slowest tail requests and, per suspect, the tail requests it points
    at (most uncached prompt tokens, most output tokens, the over-represented replica's slowest),
    each with its request and trace id; the engine lists exactly what the in-memory path lists,
    and the text names the slowest. So it does where the JSON lines' table holds no id
    (``defer``): the ids are read again from the files of the requests listed."""
    from fleetwatch.fleet.tail.examples import EXAMPLES

    frame = synthetic_fleet(6, 400, seed=21, slowdown={3: 1.7})
    sampled = np.arange(len(frame)) % 3 == 0
    frame["trace_id"] = [f"{i + 1:032x}" if s else None for i, s in enumerate(sampled)]
    root = write_tree(tmp_path / "fleet", frame).root
    whole = read_dataset([root]).frame
    expect = attribute_tail(whole)
    with open_scan([root], columns=NEEDS, defer=defer) as scan:
        assert scan.engine.deferred == defer  # type: ignore[attr-defined]
        got = tail_in_engine(scan.engine)
    assert isinstance(got, type(expect))
    assert got.examples == expect.examples
    listed = got.examples
    assert set(listed) == {"tail", "prompt-length variance", "output length", "one bad replica"}
    by_id = whole.set_index("request_id")
    for name, rows in listed.items():
        assert 0 < len(rows) <= EXAMPLES
        for r in rows:
            assert r["latency_s"] >= got.threshold_s
            assert r["replica"] == by_id.loc[r["request_id"], "replica"]
            want = by_id.loc[r["request_id"], "trace_id"]
            assert r["trace_id"] == (None if pd.isna(want) else want), name
    latencies = [r["latency_s"] for r in listed["tail"]]
    assert latencies == sorted(latencies, reverse=True)
    assert latencies[0] == pytest.approx(float(whole["e2e_s"].max()))
    prompts = [r["uncached_prompt_tokens"] for r in listed["prompt-length variance"]]
    assert prompts == sorted(prompts, reverse=True)
    assert {r["replica"] for r in listed["one bad replica"]} == {"replica-3"}
    assert any(r["trace_id"] for r in listed["tail"])
    assert f"slowest: request {listed['tail'][0]['request_id']}" in got.render()


def test_the_worst_replica_is_found_past_a_replica_of_no_ok_request_and_ties_go_by_name() -> None:
    from fleetwatch.fleet.tail.sums import worst_replica

    names = ["a", "b", "c"]
    assert worst_replica(np.array([10.0, 10.0, 0.0]), np.array([1.0, 9.0, 0.0]), names) == "b"
    tie = worst_replica(np.array([10.0, 10.0, 10.0]), np.array([5.0, 5.0, 0.0]), ["y", "x", "z"])
    assert tie == "x"


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_requests_without_ids_are_passed_over_as_one_query_over_the_tail_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """Where the slowest requests carry no id (the record reader refuses such a file; an
    engine reads it), the ones listed are the next with ids: the candidates the second pass
    kept lack ids, so its rows are picked by one query over the whole tail, and the lists are
    that query's; from JSON lines whose table holds no id too (the tail's files read again)."""
    picked = _fallbacks(monkeypatch)

    frame = synthetic_fleet(6, 400, seed=21, slowdown={3: 1.7})
    slowest = (frame["finished_s"] - frame["arrival_s"]).rank(ascending=False) <= 15
    frame["request_id"] = frame["request_id"].astype(object).where(~slowest, None)
    got, expect = _listed_and_expected(frame, tmp_path, fmt)
    assert got.examples == expect and picked == [1]
    assert len(got.examples["tail"]) == min(got.n_tail - 15, 10) > 0
    assert "None" not in {r["request_id"] for rows in expect.values() for r in rows}


@pytest.mark.parametrize("held", [0, 1 << 21])
def test_the_threshold_is_the_same_from_its_requests_counted_or_fetched(
    one_model: Path, monkeypatch: pytest.MonkeyPatch, held: int
) -> None:
    """The second scan counts the requests of the threshold's buckets by their latency and
    reads the threshold from them; where they are too many (``_HELD``), the threshold is an
    order statistic of its own first: either way the plan and the report are the in-memory
    path's."""
    import fleetwatch.fleet.tail.engine as tail_engine

    monkeypatch.setattr(tail_engine, "_HELD", held)
    whole = read_dataset([one_model]).frame
    expect = attribute_tail(whole)
    y, _ = decompose(ok_requests(whole), "e2e")
    with open_scan([one_model], columns=NEEDS) as scan:
        plan, _ = plan_in_engine(scan.engine, "m", 99.0, "e2e", 0.9)
        got = tail_in_engine(scan.engine)
    assert plan.threshold == float(np.percentile(y, 99.0))
    assert rounded(got.to_dict()) == rounded(expect.to_dict())


def test_a_candidate_alike_another_tail_request_is_listed_as_one_query_over_the_tail_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two of the slowest requests lack ids and each has a twin with one (same replica and
    times), and two of the next slowest sit on a replica of no other candidate: the twins do
    not stand for the requests without ids, so the lists are those of one query over the tail."""
    picked = _fallbacks(monkeypatch)
    frame = synthetic_fleet(6, 3000, seed=21, slowdown={3: 1.7})
    frame["request_id"] = frame["request_id"].astype(object)
    frame["replica"] = frame["replica"].astype(object)
    order = list((frame["finished_s"] - frame["arrival_s"]).sort_values(ascending=False).index)
    twins = frame.loc[order[2:4]].copy()
    twins["request_id"] = ["twin-1", "twin-2"]
    frame.loc[order[2:4], "request_id"] = None
    frame.loc[order[8:10], "replica"] = "replica-0"
    frame = pd.concat([frame, twins], ignore_index=True)
    got, expect = _listed_and_expected(frame, tmp_path)
    assert got.examples == expect and picked == [1]
    assert {"twin-1", "twin-2"} <= {r["request_id"] for r in got.examples["tail"]}


def _fallbacks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A 1 for each listing the command takes from one query over the whole tail."""
    import fleetwatch.fleet.tail.examples as tail_examples

    picked: list[int] = []

    def recorded(*args: Any) -> Any:
        picked.append(1)
        return in_engine(*args)

    monkeypatch.setattr(tail_examples, "in_engine", recorded)
    return picked


def _listed_and_expected(
    frame: pd.DataFrame, tmp_path: Path, fmt: str = "parquet"
) -> tuple[Any, Any]:
    """The report of ``frame`` written a file a replica (Parquet, or JSON lines read with the
    ids deferred), and the lists one query over its whole tail gives (the ids held)."""
    import json

    from fleetwatch.fleet.tail.sql import UNCACHED, base, exprs

    root = tmp_path / "fleet"
    root.mkdir()
    for replica, rows in frame.groupby("replica", observed=True, sort=True):
        rows = rows.reset_index(drop=True)
        if fmt == "parquet":
            rows.to_parquet(root / f"{replica}.parquet")
            continue
        records = rows.astype(object).where(rows.notna(), None).to_dict("records")
        (root / f"{replica}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    with open_scan([root], columns=NEEDS, defer=DEFERRED) as scan:
        got = tail_in_engine(scan.engine)
    with open_scan([root], columns=NEEDS) as scan:
        plan, _ = plan_in_engine(scan.engine, "m", 99.0, "e2e", 0.9)
        expect = in_engine(scan.engine, base("m"), exprs("e2e")["y"], UNCACHED, plan)
    assert not isinstance(got, ByModel)
    return got, expect


def _zero_prefills(frame: pd.DataFrame) -> pd.DataFrame:
    """Most requests of ``frame`` scheduled as their first token came: a prefill of no
    seconds, so the body's median per prompt token is 0 (its bucket the one of values at or
    below zero)."""
    out = frame.copy()
    at = out.index[np.arange(len(out)) % 5 != 0]
    out.loc[at, "scheduled_s"] = out.loc[at, "first_token_s"]
    return out


@pytest.mark.parametrize("target", ["e2e", "ttft"])
@pytest.mark.parametrize("shape", ["two-models", "zero-prefills"])
def test_the_streamed_plan_of_a_compacted_dataset_is_the_grouping_sets_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str, shape: str
) -> None:
    """Files of one replica each (two a replica): the plan comes from two streamed scans (in
    batches of 100 rows), its threshold, medians (from the windows the first scan's counts
    bound), worst replica and origin exactly those of the three scans of grouping sets, each
    model's; the report the in-memory one. Where the requests in or above the threshold's
    buckets are more than the second scan may bring, the grouping sets' path plans from the
    streamed scan's counts (no scan counts them again), the same plan."""
    from fleetwatch.fleet.tail import streamed
    from fleetwatch.records.engine.duck import DuckEngine
    from tests.records.plugin_tree import compacted

    monkeypatch.setattr(streamed, "_BATCH", 100)
    frame = two_models(seed=5, big={1: 1.8})
    if shape == "zero-prefills":
        frame = _zero_prefills(synthetic_fleet(5, 300, seed=8, slowdown={2: 1.6}))
    files = compacted(tmp_path / "compacted", frame)
    expect = attribute_tail_by_model(frame, target=target)  # type: ignore[arg-type]
    with DuckEngine(files, columns=NEEDS) as engine:
        models = sorted(frame["model"].unique()) if "model" in frame.columns else ["m"]
        wants = {}
        for model in models:
            first = streamed.first_counts(engine, model, target)  # type: ignore[arg-type]
            assert first is not None
            got = streamed.streamed_plan(engine, first, model, 99.0, target, 0.9)  # type: ignore[arg-type]
            wants[model] = plan_in_engine(Lacking(engine, "by_file"), model, 99.0, target, 0.9)  # type: ignore[arg-type]
            assert got is not None and got == wants[model]
        report = tail_in_engine(engine, target=target)  # type: ignore[arg-type]
        monkeypatch.setattr(streamed, "_HELD", 0)
        queries: list[str] = []
        real = engine.query

        def spied(sql: str) -> pd.DataFrame:
            queries.append(sql)
            return real(sql)

        engine.query = spied  # type: ignore[method-assign]
        for model in models:  # planned from the streamed scan's counts: no scan counts again
            assert plan_in_engine(engine, model, 99.0, target, 0.9) == wants[model]  # type: ignore[arg-type]
        assert queries and not any("a0" in q for q in queries)
        again = tail_in_engine(engine, target=target)  # type: ignore[arg-type]
    assert rounded(report.to_dict()) == rounded(expect.to_dict())
    assert rounded(again.to_dict()) == rounded(expect.to_dict())
    if shape == "zero-prefills":
        assert got[0].per_prompt == 0.0
