"""``grouping_sets`` in DuckDB, where each set is the common keys and one of its own, counts by
histograms, and where every key is an integer, in this process from the keys streamed as Arrow
batches: the same exact counts, rows with a NULL key left out alike, as the grouping sets every
engine runs (forced here through the same connection under another engine's name)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fleetwatch.records.engine import counting
from fleetwatch.records.engine.duck import DuckEngine
from fleetwatch.records.engine.reductions import ZERO_BUCKET, bucket_sql, grouping_sets
from tests.records.plugin_tree import plugin_tree

KEYS = {
    "s": "CASE WHEN prompt_tokens > 500 THEN 1 WHEN prompt_tokens > 100 THEN 0 END",
    "b0": bucket_sql("(first_token_s - arrival_s)"),
    "b1": bucket_sql("(finished_s - arrival_s)"),
    "k": "status",
    "t": "CAST(output_tokens AS DOUBLE)",
}


class _Portable:
    """The engine under another name: ``grouping_sets`` takes the path every engine runs."""

    name = "portable"

    def __init__(self, engine: DuckEngine) -> None:
        self.engine = engine

    def query(self, sql: str) -> Any:
        return self.engine.query(sql)


@pytest.mark.parametrize(
    ("keys", "sets"),
    [
        (("s", "b0", "b1"), [("s", "b0"), ("s", "b1")]),  # a common key, NULL for some rows
        (("k", "t", "b0"), [("k",), ("t",), ("b0",)]),  # strings, floats, NULL buckets
    ],
    ids=["strata", "one-key-each"],
)
def test_histograms_count_what_grouping_sets_count(
    tmp_path: Path, keys: tuple[str, ...], sets: list[tuple[str, ...]]
) -> None:
    tree = plugin_tree(tmp_path / "fleet")
    chosen = {k: KEYS[k] for k in keys}
    with DuckEngine(sorted(p for p in tree.root.rglob("records-*"))) as engine:
        rows = int(engine.query("SELECT count(*) AS n FROM records")["n"].iloc[0])
        for where, least in (("TRUE", 1), ("FALSE", 0)):  # and a source of no row
            source = f"FROM records WHERE {where}"
            fast = grouping_sets(_Spied(engine), source, chosen, sets)
            portable = grouping_sets(_Portable(engine), source, chosen, sets)
            for s, got, want in zip(sets, fast, portable, strict=True):
                want = want.sort_values(list(s)).reset_index(drop=True)
                assert list(got.columns) == [*s, "n"]
                assert least <= len(got) == len(want) and int(got["n"].sum()) <= rows
                for c in (*s, "n"):
                    assert got[c].astype(object).tolist() == want[c].astype(object).tolist(), c


def test_a_nan_key_is_left_out_as_grouping_sets_leave_it(tmp_path: Path) -> None:
    tree = plugin_tree(tmp_path / "fleet")
    keys = {"t": "CASE WHEN output_tokens > 100 THEN 'nan'::DOUBLE ELSE output_tokens END"}
    with DuckEngine(sorted(p for p in tree.root.rglob("records-*"))) as engine:
        (fast,) = grouping_sets(_Spied(engine), "FROM records WHERE TRUE", keys, [("t",)])
        (want,) = grouping_sets(_Portable(engine), "FROM records WHERE TRUE", keys, [("t",)])
    assert fast["t"].notna().all() and len(fast) == len(want) > 0
    assert int(fast["n"].sum()) == int(want["n"].sum())


class _Spied:
    """DuckDB, asserting the histograms' path is the one taken."""

    name = "duckdb"

    def __init__(self, engine: DuckEngine) -> None:
        self.engine = engine

    def query(self, sql: str) -> Any:
        assert "histogram(" in sql and "GROUPING SETS" not in sql
        return self.engine.query(sql)


INTEGER_KEYS = {
    "s": "CAST(CASE WHEN prompt_tokens > 500 THEN 1 WHEN prompt_tokens > 100 THEN 0 END AS BIGINT)",
    "b0": bucket_sql("(first_token_s - arrival_s)", 1.0005),
    "b1": bucket_sql("(first_token_s - arrival_s - 0.05)", 1.0005),  # some at or below zero
    "w": "CAST(output_tokens AS BIGINT) * 400000000000000 - 7",  # with o: past 2 ** 62
    "o": "CAST(output_tokens AS BIGINT)",
    "c": (  # values below ZERO_BUCKET, at it and above it
        "CAST(CASE WHEN output_tokens % 3 = 0 THEN -1000000 WHEN output_tokens % 3 = 1 "
        "THEN -2000000 - output_tokens ELSE output_tokens END AS BIGINT)"
    ),
    "none": "CAST(NULL AS BIGINT)",  # NULL in every row: its sets count nothing
    "h": "CAST(1152921504606846976 + CAST(output_tokens AS BIGINT) % 4 AS BIGINT)",  # 2**60 on
    "x": (  # spanning all of BIGINT, ZERO_BUCKET beside its least value
        "CASE output_tokens % 4 WHEN 0 THEN 9223372036854775807 WHEN 1 THEN "
        "CAST(-9223372036854775808 AS BIGINT) WHEN 2 THEN -1000000 "
        "ELSE CAST(output_tokens AS BIGINT) END"
    ),
}


_ODD = ("c", "none", "x"), [("c",), ("c", "none"), ("x",), ("x", "c")]


@pytest.mark.parametrize(
    ("keys", "sets", "dense", "batch"),
    [
        (("s", "b0", "b1"), [("s", "b0"), ("s", "b1")], counting._DENSE, 100),
        (("s", "b0", "b1"), [("s", "b0"), ("s", "b1")], 1, 100),  # every batch by a sort
        (("s", "b0", "b1"), [("s", "b0"), ("s", "b1")], 30_000, 100),  # a grid, then sorted
        (("b1", "w", "o"), [("b1",), ("w", "o"), ("o", "b1")], counting._DENSE, 100),
        (*_ODD, counting._DENSE, 100),
        (*_ODD, counting._DENSE, 1 << 20),  # one batch: its order is the result's
        # a key of no NULL in two sets, its ends found once a batch: wider than the rows the
        # other key's NULLs leave
        (("o", "s", "b1"), [("o", "s"), ("o", "b1"), ("o",)], counting._DENSE, 100),
        # keys near 2**60 in a grid: a cell's number past 64 bits before the offset
        (("h", "o"), [("h", "o"), ("h",)], counting._DENSE, 100),
    ],
    ids=[
        "strata-and-zeros",
        "sorted",
        "grid-then-sorted",
        "wide-keys",
        "odd-keys",
        "odd-keys-one-batch",
        "shared-key-ends",
        "huge-keys",
    ],
)
def test_integer_keys_counted_here_count_what_grouping_sets_count(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    keys: tuple[str, ...],
    sets: list[tuple[str, ...]],
    dense: int,
    batch: int,
) -> None:
    """Counted in batches of ``batch`` rows (the counts of one key in many batches added up:
    in a grid widened as batches widen the keys' spans, and past ``_DENSE`` cells by a sort,
    past ``_BATCH`` pending rows merged on the way), NULL keys left out, ``ZERO_BUCKET``
    kept apart from the buckets above it and in order with values below it, keys wider than a
    ``bincount`` counted by a sort, keys spanning all of BIGINT: each set's rows, sorted by its
    keys, equal the grouping sets' counts."""
    monkeypatch.setattr(counting, "_BATCH", batch)
    monkeypatch.setattr(counting, "_DENSE", dense)
    tree = plugin_tree(tmp_path / "fleet")
    chosen = {k: INTEGER_KEYS[k] for k in keys}
    with DuckEngine(sorted(p for p in tree.root.rglob("records-*"))) as engine:
        streamed = _Streamed(engine)
        for where in ("TRUE", "FALSE"):
            source = f"FROM records WHERE {where}"
            got_all = grouping_sets(streamed, source, chosen, sets, integers=True)
            want_all = grouping_sets(_Portable(engine), source, chosen, sets)
            for s, got, want in zip(sets, got_all, want_all, strict=True):
                want = want.sort_values(list(s), kind="stable").reset_index(drop=True)
                assert list(got.columns) == [*s, "n"]
                assert all(got[c].dtype == np.int64 for c in got.columns)
                assert len(got) == len(want)
                assert len(got) > 1 or where == "FALSE" or "none" in s
                for c in (*s, "n"):
                    assert got[c].tolist() == want[c].astype(np.int64).tolist(), c
                if where == "TRUE" and "b1" in s:  # the zero bucket was there to keep apart
                    assert ZERO_BUCKET in got["b1"].tolist() and got["b1"].nunique() > 2
        assert streamed.streamed == 2


class _Streamed:
    """DuckDB, counting how often the keys were streamed (no query of grouping sets)."""

    name = "duckdb"

    def __init__(self, engine: DuckEngine) -> None:
        self.engine = engine
        self.streamed = 0

    def query(self, sql: str) -> Any:
        raise AssertionError(f"counted in the engine: {sql}")

    def arrow_batches(self, sql: str, rows: int) -> Any:
        self.streamed += 1
        return self.engine.arrow_batches(sql, rows)
