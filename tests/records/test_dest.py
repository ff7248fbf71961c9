"""Compaction into object storage: against moto's standalone S3 server on 127.0.0.1, the dataset
lands under the prefix in the same layout, every record once; a run killed at each stage (the
journal local, in --state) is finished or rolled back by the next, with no record lost or doubled;
prune refuses object storage with one line. moto comes with the dev extra; without it these
tests are skipped, except in CI. Every stage's window is tested on a local folder
(``test_compact``); here, the two whose state differs in object storage: some objects uploaded,
and all uploaded with the sources half removed."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.records.compact import KILL_AT_ENV, compact
from tests.records.conftest import Runs
from tests.records.segment_tree import START_S, count_ids, segment_tree

BUCKET = "fleetwatch"
NOW = START_S + 6 * 3600.0
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _accepting(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server on a free loopback port, with the bucket made; stopped by its pid."""
    try:
        import moto  # noqa: F401
    except ImportError:
        message = "moto not installed: pip install -e '.[dev]'"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    import pyarrow.fs as pafs

    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not _accepting(port):
            assert server.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"moto did not listen: {log.read_text()}"
            time.sleep(0.05)
        endpoint = f"127.0.0.1:{port}"
        pafs.S3FileSystem(
            endpoint_override=endpoint,
            scheme="http",
            region="us-east-1",
            allow_bucket_creation=True,
            **_keys(),
        ).create_dir(BUCKET)
        yield endpoint
    finally:
        os.kill(server.pid, 15)
        server.wait(30)


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)


def _url(endpoint: str, prefix: str) -> str:
    return f"s3://{BUCKET}/{prefix}?endpoint_override={endpoint}&scheme=http&region=us-east-1"


def _objects(endpoint: str, prefix: str) -> dict[str, Counter[str]]:
    """Each Parquet object under the prefix (its key below the prefix) with its request ids."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", region="us-east-1", **_keys())
    found: dict[str, Counter[str]] = {}
    for info in fs.get_file_info(
        pafs.FileSelector(f"{BUCKET}/{prefix}", allow_not_found=True, recursive=True)
    ):
        if info.type == pafs.FileType.File and info.path.endswith(".parquet"):
            ids = pq.read_table(info.path, filesystem=fs, columns=["request_id"]).column(0)
            found[info.path.removeprefix(f"{BUCKET}/{prefix}/")] = Counter(ids.to_pylist())
    return found


def _keys() -> dict[str, str]:
    return {"access_key": "test", "secret_key": "test"}


def _all_ids(objects: dict[str, Counter[str]]) -> Counter[str]:
    total: Counter[str] = Counter()
    for ids in objects.values():
        total.update(ids)
    return total


def test_a_compaction_lands_under_the_prefix_in_the_same_layout(
    s3_endpoint: str, credentials: None, tmp_path: Path
) -> None:
    tree = segment_tree(tmp_path / "src", replicas=2, segments=6, parquet_every=3)
    url = _url(s3_endpoint, "layout")
    result = compact([tree.root], url, now=NOW, state=tmp_path / "state")
    objects = _objects(s3_endpoint, "layout")
    assert result.files_out == len(objects) == 2 * 3
    assert "date=2025-12-01/hour=10/replica=10.0.0.0%3A8000" in {
        k.rsplit("/", 1)[0] for k in objects
    }
    assert _all_ids(objects) == {i: 1 for i in tree.ids}
    assert not any(p.exists() for p in tree.files)
    again = compact([tree.root], url, now=NOW, state=tmp_path / "state")
    assert again.files_in == 0 and _objects(s3_endpoint, "layout") == objects


def test_kept_sources_are_compacted_once_into_object_storage(
    s3_endpoint: str, credentials: None, tmp_path: Path
) -> None:
    tree = segment_tree(tmp_path / "src", replicas=2, segments=6, parquet_every=0)
    url = _url(s3_endpoint, "kept")
    for _ in range(2):
        compact([tree.root], url, now=NOW, state=tmp_path / "state", delete_sources=False)
    assert _all_ids(_objects(s3_endpoint, "kept")) == {i: 1 for i in tree.ids}
    assert all(p.exists() for p in tree.files)


@pytest.mark.parametrize(
    ("stage", "visible", "then"),
    [
        ("after-first-rename", 1, "rolled back batch"),  # one object of six uploaded
        ("mid-delete", 6, "finished batch"),  # all uploaded, one source removed
    ],
)
def test_a_kill_mid_batch_loses_and_duplicates_nothing_in_object_storage(
    s3_endpoint: str, scratch: Path, fleetwatch_process: Runs, stage: str, visible: int, then: str
) -> None:
    tree = segment_tree(scratch / "src", replicas=2, segments=6, parquet_every=0)
    prefix = f"kill-{stage}"
    argv = ["records", "compact", str(tree.root), "--out", _url(s3_endpoint, prefix)]
    argv += ["--state", str(scratch / "state")]
    killed = fleetwatch_process(argv, env={**CREDENTIALS, KILL_AT_ENV: stage})
    assert killed.status == -9, killed.output
    assert len(_objects(s3_endpoint, prefix)) == visible
    done = fleetwatch_process(argv, env=CREDENTIALS)
    assert done.status == 0, done.output
    assert then in done.output
    assert _all_ids(_objects(s3_endpoint, prefix)) == {i: 1 for i in tree.ids}
    assert not count_ids(tree.root) and list((scratch / "state" / "journal").iterdir()) == []


def test_prune_refuses_object_storage_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["records", "prune", "s3://bucket/records", "--older-than", "7d"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "lifecycle" in err and "s3://bucket/records" in err
