"""``grouping_sets`` in DuckDB, where each set is the common keys and one of its own, counts by
histograms: the same exact counts, rows with a NULL key left out alike, as the grouping sets every
engine runs (forced here through the same connection under another engine's name)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleetwatch.records.engine.duck import DuckEngine
from fleetwatch.records.engine.reductions import bucket_sql, grouping_sets
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
