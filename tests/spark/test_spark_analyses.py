"""The analyses on Spark give DuckDB's verdicts: `fleet outliers`, `fleet tail`, `fleet compare`
and `slo backtest` through the command line with `--engine spark` against the lane's cluster,
on one dataset in the plugin's shape (two models, a planted slow replica, JSON lines and Parquet
mixed); and the reduced tables the outliers are judged from are equal, row for row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pytest

from fleetwatch.cli import main
from fleetwatch.fleet.outliers.sources import engine as reduced
from fleetwatch.records.dataset import resolve
from fleetwatch.records.engine.duck import DuckEngine
from fleetwatch.records.engine.spark import SparkEngine
from fleetwatch.scenarios.slo_records import Incident, synthetic_records
from tests.fleet.test_by_model import two_models
from tests.records.plugin_tree import PluginTree, write_tree
from tests.rounding import rounded

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tests.spark.conftest import Cluster

pytestmark = pytest.mark.spark

SPEC = str(Path(__file__).resolve().parents[2] / "slo" / "examples" / "chat.yaml")
T0, H = 1_700_000_000.0, 3600.0


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> PluginTree:
    return write_tree(
        tmp_path_factory.mktemp("spark-fleet") / "fleet", two_models(seed=8, big={1: 1.8})
    )


@pytest.fixture(scope="module")
def slo_tree(tmp_path_factory: pytest.TempPathFactory) -> PluginTree:
    frame = synthetic_records(
        np.random.default_rng(5), n=4_000, start_s=T0, duration_s=6 * H,
        incidents=[Incident(T0 + 3 * H, T0 + 3.5 * H, error_ratio=0.5)], classes=("chat", "batch"),
    )  # fmt: skip
    return write_tree(tmp_path_factory.mktemp("spark-slo") / "fleet", frame)


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> object:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return rounded(json.loads(out))


@pytest.mark.parametrize(
    "argv",
    [
        ["fleet", "outliers", "{F}", "--json"],
        ["fleet", "tail", "{F}", "--json"],
        ["fleet", "compare", "{F}/small-0", "{F}/small-1", "--draws", "200", "--json"],
        ["slo", "backtest", SPEC, "--records", "{S}", "--json"],
    ],
    ids=["outliers", "tail", "compare", "backtest"],
)
def test_spark_gives_the_verdicts_duckdb_gives(
    argv: list[str],
    fleet: PluginTree,
    slo_tree: PluginTree,
    spark: SparkSession,
    spark_cluster: Cluster,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = [a.replace("{F}", str(fleet.root)).replace("{S}", str(slo_tree.root)) for a in argv]
    duck = _json(args, capsys)
    on_spark = _json([*args, "--engine", "spark", "--spark-master", spark_cluster.master], capsys)
    assert on_spark == duck
    if argv[1] == "outliers":
        assert isinstance(duck, dict) and duck["verdict"] == "outliers"
        blamed = {(f["model"], f["replica"]) for m in duck["models"] for f in m["findings"]}
        assert blamed == {("llama-70b", "big-1")}


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    keys = [c for c in ("model", "replica", "signal", "pb", "b", "u") if c in frame.columns]
    out = frame.astype({c: str for c in ("model", "replica", "signal") if c in frame.columns})
    return out.sort_values(keys).reset_index(drop=True)


def test_the_reduced_tables_are_equal(fleet: PluginTree, spark: SparkSession) -> None:
    files = resolve([fleet.root])
    with (
        DuckEngine(files, columns=reduced.NEEDS) as duck,
        SparkEngine(files, columns=reduced.NEEDS, session=spark) as sp,
    ):
        assert duck.check() == sp.check() == (fleet.rows, fleet.rows)
        for name in ("_summary", "_uncached_counts"):
            a, b = (_sorted(getattr(reduced, name)(e)) for e in (duck, sp))
            pd.testing.assert_frame_equal(a, b, check_dtype=False, rtol=1e-12)
        edges = reduced._edges(reduced._uncached_counts(duck), 8)
        summary = reduced._summary(duck)
        names = (summary["model"].unique().tolist(), summary["replica"].unique().tolist())
        a, b = (_sorted(reduced._cells(e, edges, *names)) for e in (duck, sp))
        assert len(a) > 100
        pd.testing.assert_frame_equal(a, b, check_dtype=False, rtol=1e-12)
