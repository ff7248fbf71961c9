"""Record sinks: rotating, atomic, readable by the foundation's reader; fed from engine runs."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from fleetwatch.records import RecordError, RequestRecord, read_records
from fleetwatch.telemetry.instrument import instrument
from fleetwatch.telemetry.sink import RecordSinkError, RotatingRecordSink


def _rec(i: int) -> RequestRecord:
    return RequestRecord(
        request_id=f"r{i}", replica="a", model="m", arrival_s=float(i), finished_s=i + 1.0
    )


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_rotates_by_count_and_files_read_back(tmp_path, fmt):
    sink = RotatingRecordSink(tmp_path, fmt=fmt, max_records=4)
    sink.write([_rec(i) for i in range(10)])
    sink.close()
    assert [p.name for p in sorted(tmp_path.iterdir())] == [
        f"records-00000{i}.{fmt}" for i in (1, 2, 3)
    ]
    ids = [rid for p in sorted(tmp_path.iterdir()) for rid in read_records(p)["request_id"]]
    assert ids == [f"r{i}" for i in range(10)]


def test_rotates_by_age_with_an_injected_clock(tmp_path):
    now = [0.0]
    sink = RotatingRecordSink(tmp_path, max_records=1000, max_age_s=10.0, clock=lambda: now[0])
    sink.write([_rec(0)])
    now[0] = 11.0
    sink.write([_rec(1)])
    assert len(sink.files) == 1 and len(read_records(sink.files[0])) == 2


def test_an_empty_write_seals_an_aged_file_without_new_traffic(tmp_path):
    now = [0.0]
    sink = RotatingRecordSink(tmp_path, max_records=1000, max_age_s=10.0, clock=lambda: now[0])
    sink.write([_rec(0)])
    sink.write(())
    assert sink.files == []
    now[0] = 11.0
    sink.write(())
    assert len(sink.files) == 1 and len(read_records(sink.files[0])) == 1


def test_a_file_that_cannot_be_written_loses_only_its_records_and_says_how_many(tmp_path):
    where = tmp_path / "blocked"
    where.write_text("a file where the directory should be")
    sink = RotatingRecordSink(where, max_records=3)
    with pytest.raises(RecordSinkError) as info:
        sink.write([_rec(i) for i in range(5)])
    assert info.value.lost == 3
    where.unlink()
    sink.write([_rec(5)])
    sink.close()
    [written] = sink.files
    assert list(read_records(written)["request_id"]) == ["r3", "r4", "r5"]


def test_numbering_continues_after_existing_files(tmp_path):
    (tmp_path / "records-000007.jsonl").write_text("")
    sink = RotatingRecordSink(tmp_path)
    sink.write([_rec(0)])
    sink.close()
    assert sink.files[0].name == "records-000008.jsonl"


def test_bad_format_is_a_record_error(tmp_path):
    with pytest.raises(RecordError, match="jsonl or parquet"):
        RotatingRecordSink(tmp_path, fmt="csv")  # type: ignore[arg-type]


def test_engine_run_to_record_files_in_wall_clock_seconds(make_engine, mixed_workload, tmp_path):
    engine = make_engine(num_blocks=12, error_rate=0.3)
    sink = RotatingRecordSink(tmp_path, fmt="parquet", max_records=4)
    inst = instrument(
        engine, registry=CollectorRegistry(), record_sink=sink, env={}, wall_clock=lambda: 1.7e9
    )
    _, run = mixed_workload(engine)
    inst.detach()
    df = read_records(tmp_path / "records-000001.parquet")
    df2 = read_records(tmp_path / "records-000002.parquet")
    assert len(df) + len(df2) == len(run.final) == 6
    assert (df["arrival_s"] > 1.6e9).all()
    assert set(df["status"]) | set(df2["status"]) == {"ok", "error", "aborted"}
