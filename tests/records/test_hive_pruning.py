"""A compacted dataset's partition folders (`date=…/hour=…/replica=…`) are pruned by name: a
filter on time or replica never opens a folder it cannot match, and reads exactly the records
reading everything and filtering gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fleetwatch.core.records.schema import RecordError
from fleetwatch.records import write_records
from fleetwatch.records.dataset import read_dataset, resolve
from fleetwatch.records.engine.scan import open_scan
from fleetwatch.records.filters import RecordFilter
from fleetwatch.records.hive import partition_dir, pruned
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet

T0 = 1_764_583_200.0  # 2025-12-01 10:00 UTC


@pytest.fixture(scope="module")
def hive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three replicas over three hours, one Parquet file per (hour, replica) partition."""
    root = tmp_path_factory.mktemp("hive") / "compacted"
    frame = synthetic_fleet(3, 300, seed=4)
    t0 = float(frame["arrival_s"].min())
    stretch = 3 * 3600.0 * 0.99 / (float(frame["finished_s"].max()) - t0)
    for col in ("arrival_s", "scheduled_s", "first_token_s", "finished_s"):
        frame[col] = T0 + (frame[col] - t0) * stretch
    keys = [
        partition_dir(f, str(r)) for f, r in zip(frame["finished_s"], frame["replica"], strict=True)
    ]
    for key in sorted(set(keys)):
        folder = root / key
        folder.mkdir(parents=True)
        write_records(folder / "part-0.parquet", frame[np.array(keys) == key])
    return root


def test_a_window_reads_only_the_hours_it_covers(hive: Path) -> None:
    files = resolve([hive])
    where = RecordFilter(since_s=T0 + 3600.0, until_s=T0 + 7200.0)
    kept = pruned(files, where)
    assert kept and len(kept) < len(files)
    assert all("hour=11" in str(p) for p in kept)
    whole = read_dataset([hive]).frame
    expect = set(whole.loc[where.mask(whole), "request_id"])
    with open_scan([hive], where=where) as scan:
        assert scan.files == tuple(kept)
        got = set(scan.engine.query("SELECT request_id FROM records")["request_id"])
    assert got == expect and read_dataset([hive], where=where).rows == len(expect)


def test_a_replica_filter_reads_only_its_folders(hive: Path) -> None:
    where = RecordFilter(replicas=frozenset({"replica-1"}))
    kept = pruned(resolve([hive]), where)
    assert kept and all("replica=replica-1" in str(p) for p in kept)
    with open_scan([hive], where=where) as scan:
        assert scan.rows == 300


def test_a_window_outside_every_partition_names_the_filter(hive: Path) -> None:
    where = RecordFilter(since_s=T0 + 10 * 3600.0)
    for read in (lambda: read_dataset([hive], where=where), lambda: open_scan([hive], where=where)):
        with pytest.raises(RecordError, match=r"no records match --since .* every partition"):
            read()
