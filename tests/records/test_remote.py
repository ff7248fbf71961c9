"""Records in object storage: a compacted dataset under an `s3://` prefix (moto's S3 server on
loopback, as for compaction) read by the query engine as the same files are read locally, its
partitions pruned by the filter; what cannot be read is one line naming the URL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.core.records.schema import RecordError
from fleetwatch.records.compact import compact
from fleetwatch.records.engine.scan import open_scan
from fleetwatch.records.filters import RecordFilter
from fleetwatch.records.remote import location
from tests.records.segment_tree import segment_tree
from tests.records.test_dest import CREDENTIALS, NOW, _url, credentials, s3_endpoint  # noqa: F401

pytestmark = pytest.mark.usefixtures("credentials")


def test_a_url_a_path_folded_is_restored() -> None:
    assert location(Path("s3://bucket/a/b")) == "s3://bucket/a/b"
    assert location("records/a.jsonl") == "records/a.jsonl"
    assert location("C:/records") == "C:/records"


@pytest.fixture(scope="module")
def compacted(s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:  # noqa: F811
    """The same records compacted to a local folder and to an `s3://` prefix."""
    src = tmp_path_factory.mktemp("remote")
    tree = segment_tree(src / "segments", replicas=3, segments=6)
    local = src / "local"
    url = _url(s3_endpoint, "read")
    with pytest.MonkeyPatch.context() as mp:
        for name, value in CREDENTIALS.items():
            mp.setenv(name, value)
        compact([tree.root], str(local), now=NOW, delete_sources=False)
        compact([tree.root], url, now=NOW, state=src / "state")
    return url, local


def test_the_engine_reads_object_storage_as_it_reads_the_folder(
    compacted: tuple[str, Path],
) -> None:
    url, local = compacted
    query = "SELECT replica, count(*) AS n, sum(finished_s - arrival_s) AS e2e FROM records GROUP BY 1 ORDER BY 1"
    with open_scan([url]) as remote, open_scan([local]) as here:
        assert remote.rows == here.rows > 0
        a, b = remote.engine.query(query), here.engine.query(query)
    assert a["n"].tolist() == b["n"].tolist()
    assert a["e2e"].round(9).tolist() == b["e2e"].round(9).tolist()


def test_a_filter_prunes_remote_partitions(compacted: tuple[str, Path]) -> None:
    url, _ = compacted
    with open_scan([url]) as everything:
        replicas = sorted(
            everything.engine.query("SELECT DISTINCT replica FROM records")["replica"]
        )
        all_files = len(everything.files)
    one = RecordFilter(replicas=frozenset(replicas[:1]))
    with open_scan([url], where=one) as scan:
        assert 0 < len(scan.files) < all_files
        assert set(scan.engine.query("SELECT DISTINCT replica FROM records")["replica"]) == set(
            replicas[:1]
        )


def test_the_command_line_reads_a_url(
    compacted: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, local = compacted
    docs = []
    for where in (url, str(local)):
        assert main(["fleet", "outliers", where, "--min-requests", "5", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        doc.pop("source", None)
        docs.append(doc)
    assert docs[0] == docs[1] and docs[0]["verdict"] != "insufficient data"


def test_what_cannot_be_read_is_one_line_naming_the_url(
    s3_endpoint: str,  # noqa: F811
) -> None:
    empty = _url(s3_endpoint, "nothing-here")
    with pytest.raises(RecordError, match=r"s3://.*/nothing-here: holds no Parquet record files"):
        open_scan([empty])
    with pytest.raises(RecordError, match="read through the query engine"):
        from fleetwatch.records.dataset import read_dataset

        read_dataset([empty])
