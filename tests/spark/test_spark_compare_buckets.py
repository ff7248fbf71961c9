"""`fleet compare` from fine fixed buckets on Spark: the per-(stratum, bucket) counts of every
metric equal DuckDB's row for row, and so does the report built from them (plain GROUP BY
counts on both engines, never one engine's approximate percentile against the other's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

from fleetwatch.fleet.compare import engine as compare
from fleetwatch.fleet.compare.run import METRICS
from fleetwatch.records.dataset import read_dataset, resolve
from fleetwatch.records.engine.duck import DuckEngine
from fleetwatch.records.engine.reductions import DERIVED
from fleetwatch.records.engine.spark import SparkEngine
from tests.fleet.test_by_model import two_models
from tests.records.plugin_tree import PluginTree, write_tree
from tests.rounding import rounded

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[PluginTree, PluginTree]:
    root = tmp_path_factory.mktemp("spark-compare-buckets")
    return (
        write_tree(root / "before", two_models(seed=11)),
        write_tree(root / "after", two_models(seed=12, big={0: 1.4, 1: 1.4})),
    )


def _sorted(hist: compare.Histogram) -> list[tuple[int, int, int]]:
    return sorted(zip(*(x.tolist() for x in hist), strict=True))


def test_spark_counts_the_buckets_duckdb_counts_and_reports_alike(
    runs: tuple[PluginTree, PluginTree], spark: SparkSession
) -> None:
    before, after = (resolve([t.root]) for t in runs)
    exprs = [DERIVED[m] for m in METRICS]
    with (
        DuckEngine(before, columns=compare.NEEDS) as db,
        DuckEngine(after, columns=compare.NEEDS) as da,
        SparkEngine(before, columns=compare.NEEDS, session=spark) as sb,
        SparkEngine(after, columns=compare.NEEDS, session=spark) as sa,
    ):
        duck = compare._histograms(compare.Run(db), exprs, "CAST(0 AS BIGINT)")
        on_spark = compare._histograms(compare.Run(sb), exprs, "CAST(0 AS BIGINT)")
        for d, s in zip(duck, on_spark, strict=True):
            assert _sorted(d) == _sorted(s)
        e2e = duck[METRICS.index("e2e_s")]
        assert int(np.sum(e2e[2])) == runs[0].rows - _not_ok(runs[0])
        reports = [
            rounded(compare.compare_in_engines(b, a, draws=200, exact_rows=0).to_dict())
            for b, a in ((db, da), (sb, sa))
        ]
    assert reports[0] == reports[1]
    assert all(m["decision"]["bucket_resolution"] for m in reports[0]["models"])


def _not_ok(tree: PluginTree) -> int:
    frame = read_dataset([tree.whole]).frame
    return int((frame["status"].astype(str) != "ok").sum())
