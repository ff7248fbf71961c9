"""The Spark engine against a real cluster gives the tables the DuckDB engine gives, over one
dataset in the plugin's shape (JSON lines and Parquet mixed), whole and filtered: the same SQL
text, integer columns equal exactly, floating ones to 1e-12 relative. Bad input is one line
naming the file, and a literal reads the same on both whatever Spark's parser settings."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fleetwatch.core.records.schema import RecordError
from fleetwatch.records.dataset import resolve
from fleetwatch.records.engine.duck import DuckEngine
from fleetwatch.records.engine.spark import SparkEngine
from fleetwatch.records.filters import RecordFilter, sql_string
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet
from tests.records.plugin_tree import write_tree

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

QUOTED_MODEL = "it's-8b"
E2E = "finished_s - arrival_s"
BUCKET = f"CAST(floor(ln({E2E}) / ln(1.02)) AS BIGINT)"
"""A 2 % log bucket of e2e: the fixed-bucket histogram the reductions are built from."""
QUERIES = {
    "counts": "SELECT count(*) AS n, count(first_token_s) AS with_ttft, "
    "count(DISTINCT replica) AS replicas, count(DISTINCT model) AS models FROM records",
    "sums": "SELECT CAST(sum(prompt_tokens) AS BIGINT) AS prompt, "
    "CAST(sum(output_tokens) AS BIGINT) AS output, sum(finished_s - arrival_s) AS e2e_s, "
    "sum(first_token_s - arrival_s) AS ttft_s FROM records",
    "min_max": "SELECT min(arrival_s) AS first_s, max(finished_s) AS last_s, "
    "min(output_tokens) AS fewest, max(prompt_tokens) AS most, min(replica) AS r FROM records",
    "per_replica": "SELECT replica, count(*) AS n, sum(finished_s - first_token_s) AS decode_s, "
    "max(finished_s - arrival_s) AS worst_s, min(first_token_s - arrival_s) AS best_ttft_s "
    "FROM records GROUP BY replica",
    "per_model_class": "SELECT model, traffic_class, count(*) AS n, "
    "CAST(sum(output_tokens) AS BIGINT) AS tokens, sum(finished_s - arrival_s) AS e2e_s "
    "FROM records GROUP BY model, traffic_class",
    "e2e_histogram": f"SELECT replica, bucket, count(*) AS n FROM (SELECT replica, {BUCKET} AS "
    f"bucket FROM records WHERE {E2E} > 0) AS b GROUP BY replica, bucket",
    "case_when": "SELECT replica, CAST(sum(CASE WHEN status = 'ok' THEN 1 ELSE 0 END) AS BIGINT) "
    "AS ok, CAST(sum(CASE WHEN finished_s - arrival_s > 5 THEN 1 ELSE 0 END) AS BIGINT) AS slow, "
    "sum(CASE WHEN output_tokens > 1 THEN (finished_s - first_token_s) / (output_tokens - 1) "
    "ELSE 0 END) AS tpot_s FROM records GROUP BY replica",
    "every_row": "SELECT * FROM records",
}
"""Portable SQL over ``records``: counts, sums, minima and maxima, groups, a log-bucket
histogram, CASE WHEN, and every row and column as read."""


def _kind(column: pd.Series) -> str:
    if pd.api.types.is_bool_dtype(column) or pd.api.types.is_integer_dtype(column):
        return "int"
    if pd.api.types.is_float_dtype(column):
        return "float"
    return "text"


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows in one order: by the text and integer columns, then the floating ones."""
    keys = sorted(frame.columns, key=lambda c: (_kind(frame[c]) == "float", list(frame).index(c)))
    filled = pd.DataFrame(
        {
            c: frame[c].astype(object).where(frame[c].notna(), "")
            if _kind(frame[c]) == "text"
            else frame[c].astype("float64").fillna(-np.inf)
            for c in keys
        }
    )
    order = filled.sort_values(keys, kind="stable").index
    return frame.loc[order].reset_index(drop=True)


def assert_same_table(spark: pd.DataFrame, duck: pd.DataFrame) -> None:
    """The same table: columns in order, rows in any order, integers (a NULL-holding integer
    column comes back from Spark as float with NaN) and text exactly, floats to 1e-12."""
    assert list(spark.columns) == list(duck.columns)
    assert len(spark) == len(duck)
    spark, duck = _sorted(spark), _sorted(duck)
    for c in duck.columns:
        kinds = {_kind(spark[c]), _kind(duck[c])}
        s_null, d_null = spark[c].isna().to_numpy(), duck[c].isna().to_numpy()
        assert (s_null == d_null).all(), c
        s_val, d_val = spark[c][~s_null], duck[c][~d_null]
        if kinds == {"int"} or (kinds == {"int", "float"} and s_null.any()):
            assert s_val.astype("int64").tolist() == d_val.astype("int64").tolist(), c
        elif kinds == {"float"}:
            np.testing.assert_allclose(
                s_val.to_numpy(dtype=float),
                d_val.to_numpy(dtype=float),
                rtol=1e-12,
                atol=0,
                err_msg=c,
            )
        else:
            assert kinds == {"text"}, f"{c}: Spark gives {_kind(spark[c])}, DuckDB {_kind(duck[c])}"
            assert s_val.astype(str).tolist() == d_val.astype(str).tolist(), c


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Six replicas in the plugin's shape (two JSON-lines segments and one Parquet each), two
    models (one name holding a quote), two traffic classes, errors on one replica."""
    frame = synthetic_fleet(6, 240, seed=7, slowdown={2: 1.6}, error_rate={4: 0.1})
    frame["model"] = [QUOTED_MODEL if i % 4 else "llama-70b" for i in range(len(frame))]
    frame["traffic_class"] = ["chat" if i % 2 else "batch" for i in range(len(frame))]
    tree = write_tree(tmp_path_factory.mktemp("spark-lane") / "fleet", frame)
    return resolve([tree.root])


FILTERS = {
    "whole": None,
    "filtered": RecordFilter(
        since_s=1010.0,
        models=frozenset({QUOTED_MODEL}),
        replicas=frozenset({"replica-2", "replica-4", "replica-5"}),
    ),
}


@pytest.fixture(scope="module", params=sorted(FILTERS))
def engines(
    request: pytest.FixtureRequest, dataset: list[Path], spark: SparkSession
) -> Iterator[tuple[SparkEngine, DuckEngine]]:
    where = FILTERS[request.param]
    with (
        SparkEngine(dataset, where=where, session=spark) as s,
        DuckEngine(dataset, where=where) as d,
    ):
        yield s, d


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_spark_and_duckdb_give_the_same_table(
    engines: tuple[SparkEngine, DuckEngine], name: str
) -> None:
    spark, duck = engines
    expected = duck.query(QUERIES[name])
    assert len(expected) > 0
    assert_same_table(spark.query(QUERIES[name]), expected)


def test_check_counts_the_rows_and_the_rows_kept_as_duckdb_does(
    engines: tuple[SparkEngine, DuckEngine],
) -> None:
    spark, duck = engines
    total, kept = spark.check()
    assert (total, kept) == duck.check()
    assert total == 6 * 240 and 0 < kept <= total
    assert spark.scalar("SELECT count(*) FROM records") == kept


def test_parquet_lacking_columns_reads_them_as_null_like_duckdb(
    tmp_path: Path, dataset: list[Path], spark: SparkSession
) -> None:
    """A Parquet file written without the optional columns (an older writer): NULL of the
    column's type, in both engines, beside files that have them."""
    full = pq.read_table(next(p for p in dataset if p.suffix == ".parquet"))
    kept = ["request_id", "replica", "model", "arrival_s", "first_token_s", "finished_s", "status"]
    lean = tmp_path / "lean.parquet"
    pq.write_table(full.select(kept).cast(pa.schema([full.schema.field(c) for c in kept])), lean)
    files = [lean, *[p for p in dataset if p.suffix == ".jsonl"][:2]]
    sql = (
        "SELECT replica, count(*) AS n, count(tenant) AS tenants, count(prompt_tokens) AS "
        "prompts, CAST(sum(prompt_tokens) AS BIGINT) AS prompt, count(intended_s) AS intended "
        "FROM records GROUP BY replica"
    )
    with SparkEngine(files, session=spark) as s, DuckEngine(files) as d:
        assert_same_table(s.query(sql), d.query(sql))
        assert_same_table(s.query("SELECT * FROM records"), d.query("SELECT * FROM records"))
        assert s.check() == d.check()


def _unmerged(tmp_path: Path, dataset: list[Path]) -> list[Path]:
    """Files a fleet kept before ``record_schema``: one batch's gap counts a list, another's a
    null column (a batch with none), which Spark's schema merging refuses (CANNOT_MERGE_SCHEMAS),
    beside a file of narrower integers."""
    full = pq.read_table(next(p for p in dataset if p.suffix == ".parquet"))
    n = full.num_rows
    gaps = pa.array([[1, 0, 2]] * n, type=pa.list_(pa.int64()))
    listed, nulled, narrow = (tmp_path / f"{k}.parquet" for k in ("listed", "nulled", "narrow"))
    pq.write_table(full.append_column("itl_buckets", gaps), listed)
    pq.write_table(full.append_column("itl_buckets", pa.nulls(n)), nulled)
    at = full.schema.get_field_index("prompt_tokens")
    pq.write_table(
        full.set_column(at, "prompt_tokens", full["prompt_tokens"].cast(pa.int32())), narrow
    )
    return [listed, nulled, narrow]


def _read_as_duckdb_reads_them(engine: SparkEngine, files: list[Path]) -> None:
    with engine as s, DuckEngine(files) as d:
        assert_same_table(s.query("SELECT * FROM records"), d.query("SELECT * FROM records"))
        rows = sum(pq.read_metadata(f).num_rows for f in files)
        assert s.check() == d.check() == (rows, rows)


def test_files_whose_schemas_do_not_merge_are_read_as_duckdb_reads_them(
    tmp_path: Path, dataset: list[Path], spark: SparkSession
) -> None:
    files = _unmerged(tmp_path, dataset)
    _read_as_duckdb_reads_them(SparkEngine(files, session=spark), files)


def test_a_malformed_json_lines_file_is_one_line_naming_it(
    tmp_path: Path, dataset: list[Path], spark: SparkSession
) -> None:
    bad = tmp_path / "cut.jsonl"
    bad.write_text(
        Path(dataset[0]).read_text().splitlines()[0] + "\n" + '{"request_id": "x", "ar\n'
    )
    with pytest.raises(RecordError) as caught, SparkEngine([*dataset[:2], bad], session=spark) as e:
        e.check()
    assert caught.value.path == str(bad)
    assert str(caught.value).startswith(f"{bad}: records could not be read: a line is not")
    assert "\n" not in str(caught.value)


def test_a_foreign_json_file_is_named_by_check_as_duckdb_names_it(
    tmp_path: Path, dataset: list[Path], spark: SparkSession
) -> None:
    foreign = tmp_path / "events.jsonl"
    foreign.write_text('{"event": "deploy", "at": 1}\n{"event": "rollback", "at": 2}\n')
    files = [*dataset[:2], foreign]
    with pytest.raises(RecordError) as from_spark, SparkEngine(files, session=spark) as e:
        e.check()
    with pytest.raises(RecordError) as from_duck, DuckEngine(files) as d:
        d.check()
    assert from_spark.value.path == str(foreign)
    assert str(from_spark.value) == str(from_duck.value)


@pytest.mark.parametrize(
    ("name", "content"), [("gone.parquet", None), ("fake.parquet", b"not parquet at all\n")]
)
def test_a_missing_or_broken_parquet_file_is_one_line_naming_it(
    tmp_path: Path, spark: SparkSession, name: str, content: bytes | None
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(RecordError) as caught, SparkEngine([path], session=spark) as e:
        e.check()
    assert caught.value.path == str(path)
    assert "\n" not in str(caught.value)


AWKWARD = [
    "it's",
    "'",
    "''",
    "a'b'c",
    "",
    'say "hi"',
    "${env:HOME}",
    "-- not a comment",
    "/* */",
    "naïve 💡",
]


def test_a_literal_reads_as_itself_on_both_engines_whatever_spark_parses_quotes_as(
    dataset: list[Path], spark: SparkSession
) -> None:
    """``sql_string`` never doubles a quote: Spark with its legacy reading of ``''`` (two
    adjacent literals, as Spark 4.0 and earlier read them) gets the same value DuckDB does."""
    sql = "SELECT " + ", ".join(f"{sql_string(v)} AS v{i}" for i, v in enumerate(AWKWARD))
    legacy = {"spark.sql.legacy.consecutiveStringLiterals.enabled": "true"}
    with SparkEngine(dataset[:1], session=spark, conf=legacy) as s, DuckEngine(dataset[:1]) as d:
        assert s.query(sql).iloc[0].tolist() == AWKWARD
        assert d.query(sql).iloc[0].tolist() == AWKWARD
        assert s.scalar("SELECT 'it''s'") == "its"  # why a doubled quote is not portable
        where = RecordFilter(models=frozenset({QUOTED_MODEL}))
        n = f"SELECT count(*) FROM records WHERE {where.sql()}"
        assert s.scalar(n) == d.scalar(n) > 0


def test_spark_connect_gives_the_same_tables(connect_url: str, dataset: list[Path]) -> None:
    """The sc:// path: a session of the engine's own on a Connect server in front of the
    cluster, stopped by close; bad input there is the same one line."""
    where = FILTERS["filtered"]
    with (
        SparkEngine(dataset, where=where, master=connect_url) as s,
        DuckEngine(dataset, where=where) as d,
    ):
        assert type(s.spark).__module__.startswith("pyspark.sql.connect")
        assert s.check() == d.check()
        for name in ("per_model_class", "e2e_histogram", "every_row"):
            assert_same_table(s.query(QUERIES[name]), d.query(QUERIES[name]))


def test_spark_connect_names_a_malformed_file(
    tmp_path: Path, connect_url: str, dataset: list[Path]
) -> None:
    bad = tmp_path / "cut.jsonl"
    bad.write_text("not json\n")
    with pytest.raises(RecordError) as caught, SparkEngine([bad], master=connect_url) as e:
        e.check()
    assert caught.value.path == str(bad)
    assert "\n" not in str(caught.value)


def test_spark_connect_reads_files_whose_schemas_do_not_merge(
    tmp_path: Path, dataset: list[Path], connect_url: str
) -> None:
    """As ``test_files_whose_schemas_do_not_merge_are_read_as_duckdb_reads_them``, through a
    Connect session, which merges the schemas when the frame is first analysed."""
    files = _unmerged(tmp_path, dataset)
    _read_as_duckdb_reads_them(SparkEngine(files, master=connect_url), files)
