"""The spark engine's parts that need no cluster: which session a master asks for, the names
Spark is given for files (URLs unchanged), and that the module loads without PySpark, saying how
to install it only when an engine is made. The engine against a real cluster: tests/spark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fleetwatch.core.records.schema import RecordError
from fleetwatch.records.engine.spark import SparkEngine, location, session_kind


@pytest.mark.parametrize(
    ("master", "kind"),
    [
        ("spark://10.0.0.5:7077", "classic"),
        ("local", "classic"),
        ("local[4]", "classic"),
        ("local[*]", "classic"),
        ("sc://workspace.example:443/;token=abc", "connect"),
        ("sc://127.0.0.1:15002", "connect"),
    ],
)
def test_a_master_names_a_classic_or_a_connect_session(master: str, kind: str) -> None:
    assert session_kind(master) == kind


@pytest.mark.parametrize("master", ["yarn-ish", "http://host:7077", "local[two]", ""])
def test_any_other_master_is_one_line_saying_what_is_accepted(master: str) -> None:
    with pytest.raises(RecordError, match=r"spark://host:7077.*sc://host:15002.*local\[N\]"):
        session_kind(master)


@pytest.mark.parametrize(
    "url",
    [
        "s3a://bucket/fleet/replica-0/records-000001.jsonl",
        "abfss://records@account.dfs.core.windows.net/fleet/x.parquet",
        "gs://bucket/fleet/x.jsonl",
        "dbfs:/mnt/fleet/x.parquet",
        "file:///srv/fleet/x.jsonl",
    ],
)
def test_a_url_is_given_to_spark_unchanged(url: str) -> None:
    assert location(url) == url


def test_a_local_path_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert location("fleet/x.jsonl") == str(tmp_path / "fleet" / "x.jsonl")
    assert location(Path("fleet") / "y.parquet") == str(tmp_path / "fleet" / "y.parquet")


def test_an_engine_takes_a_master_or_a_session() -> None:
    with pytest.raises(TypeError):
        SparkEngine([])


_WITHOUT_PYSPARK = """
import sys
sys.modules["pyspark"] = None  # as if not installed
import fleetwatch.records.engine.spark as spark
from fleetwatch.core.records.schema import RecordError
try:
    spark.SparkEngine([], master="local[1]")
except RecordError as exc:
    print(exc)
"""


def test_without_pyspark_the_module_loads_and_an_engine_says_how_to_install_it() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PYSPARK], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == (
        "the spark engine needs PySpark: pip install 'fleetwatch[spark]' "
        "(PySpark with its Spark Connect client)"
    )
