"""The request record: derived durations, round trips, and bad input named by file/row/field."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fleetwatch.core.records import write_records as write_serving
from fleetwatch.core.records.write import record_schema
from fleetwatch.records import (
    RecordError,
    RequestRecord,
    Status,
    from_frame,
    read_records,
    to_frame,
    write_records,
)


def _record(i: int, **overrides: object) -> RequestRecord:
    base: dict[str, object] = dict(
        request_id=f"r{i}",
        replica=f"rep{i % 3}",
        model="m",
        arrival_s=100.0 + i,
        scheduled_s=100.2 + i,
        first_token_s=100.5 + i,
        finished_s=102.5 + i,
        prompt_tokens=64 + i,
        output_tokens=5,
        cached_prompt_tokens=16,
        preemptions=i % 2,
        preemption_stall_s=0.01 * (i % 2),
        max_itl_s=0.6,
        itl_buckets=(0,) * 13 + (3, 1) + (0,) * 8,
        status=Status.OK,
        finish_reason="length",
        traffic_class="chat" if i % 2 else "batch",
        tenant=None if i % 3 else f"t{i}",
    )
    base.update(overrides)
    return RequestRecord(**base)  # type: ignore[arg-type]


RECORDS = [
    *(_record(i) for i in range(6)),
    _record(
        6,
        scheduled_s=None,
        first_token_s=None,
        output_tokens=0,
        cached_prompt_tokens=0,
        status=Status.REJECTED,
        finish_reason=None,
        error_type="queue_full",
        max_itl_s=None,
        itl_buckets=None,
    ),
    _record(7, status=Status.ERROR, finish_reason="error", error_type="RuntimeError"),
]


def test_derived_durations_follow_the_definitions() -> None:
    r = _record(0)
    assert r.queue_s == pytest.approx(0.2)
    assert r.prefill_s == pytest.approx(0.3)
    assert r.decode_s == pytest.approx(2.0)
    assert r.ttft_s == pytest.approx(0.5)
    assert r.e2e_s == pytest.approx(2.5)
    assert r.tpot_s == pytest.approx(2.0 / 4)


def test_tpot_is_undefined_for_fewer_than_two_tokens() -> None:
    assert _record(0, output_tokens=1, itl_buckets=None).tpot_s is None
    assert RECORDS[6].tpot_s is None and RECORDS[6].ttft_s is None


def test_frame_has_explicit_dtypes_and_derived_columns() -> None:
    df = to_frame(RECORDS)
    assert df["prompt_tokens"].dtype == "int64"
    assert df["arrival_s"].dtype == "float64"
    assert str(df["request_id"].dtype) == "string"
    assert isinstance(df["status"].dtype, pd.CategoricalDtype)
    assert df.loc[0, "ttft_s"] == pytest.approx(0.5)
    assert pd.isna(df.loc[6, "ttft_s"])
    assert df.loc[0, "tpot_s"] == pytest.approx(0.5)


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_round_trip_preserves_every_field(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"records{suffix}"
    assert write_records(path, RECORDS) == len(RECORDS)
    df = read_records(path)
    assert from_frame(df) == RECORDS
    pd.testing.assert_frame_equal(df, to_frame(RECORDS))


def test_records_and_their_frame_write_the_same_json_lines(tmp_path: Path) -> None:
    # int-valued floats, float-valued ints, lists for gap counts: written as the frame writes them
    odd = _record(8, arrival_s=100, prompt_tokens=64.0, itl_buckets=[0] * 22 + [4])
    records = [*RECORDS, odd]
    write_records(tmp_path / "direct.jsonl", records)
    write_records(tmp_path / "frame.jsonl", to_frame(records))
    direct = (tmp_path / "direct.jsonl").read_bytes()
    assert direct == (tmp_path / "frame.jsonl").read_bytes()
    assert json.loads(direct.splitlines()[-1])["arrival_s"] == 100.0
    assert from_frame(read_records(tmp_path / "direct.jsonl")) == records


def _write_lines(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


GOOD = RECORDS[0].to_dict()


@pytest.mark.parametrize(
    ("mutate", "row", "field", "words"),
    [
        (lambda r: r.pop("finished_s"), 2, "finished_s", "missing"),
        (lambda r: r.update(prompt_tokens="many"), 2, "prompt_tokens", "integer"),
        (lambda r: r.update(arrival_s="soon"), 2, "arrival_s", "number"),
        (lambda r: r.update(first_token_s=50.0), 2, "first_token_s", "before arrival"),
        (
            lambda r: r.update(finished_s=99.0, scheduled_s=None, first_token_s=None),
            2,
            "finished_s",
            "negative",
        ),
        (lambda r: r.update(status="maybe"), 2, "status", "one of"),
        (lambda r: r.update(output_tokens=-1), 2, "output_tokens", "negative"),
    ],
)
def test_bad_jsonl_names_file_row_and_field(
    tmp_path: Path, mutate: object, row: int, field: str, words: str
) -> None:
    bad = dict(GOOD)
    mutate(bad)  # type: ignore[operator]
    path = _write_lines(tmp_path / "bad.jsonl", [GOOD, bad])
    with pytest.raises(RecordError) as info:
        read_records(path)
    err = info.value
    assert (err.path, err.row, err.field) == (str(path), row, field)
    assert words in str(err)
    assert str(path) in str(err) and f"row {row}" in str(err)


def test_bad_json_line_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps(GOOD) + "\n{not json\n")
    with pytest.raises(RecordError, match="row 2: not valid JSON"):
        read_records(path)


def test_parquet_missing_column_and_bad_value(tmp_path: Path) -> None:
    df = to_frame(RECORDS).drop(columns=["replica"])
    path = tmp_path / "x.parquet"
    df.to_parquet(path)
    with pytest.raises(RecordError, match="field 'replica': missing column"):
        read_records(path)
    df = to_frame(RECORDS)
    df.loc[3, "first_token_s"] = 0.0
    df["status"] = df["status"].astype("string")
    df.to_parquet(path)
    with pytest.raises(RecordError) as info:
        read_records(path)
    assert (info.value.row, info.value.field) == (4, "first_token_s")


def test_failed_write_leaves_existing_file_untouched(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    write_records(path, RECORDS[:2])
    before = path.read_bytes()
    bad = to_frame(RECORDS)
    bad.loc[1, "prompt_tokens"] = -5
    with pytest.raises(RecordError):
        write_records(path, bad)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_constructor_rejects_impossible_records() -> None:
    with pytest.raises(RecordError, match="first_token_s"):
        _record(0, first_token_s=99.0)
    with pytest.raises(RecordError, match="cached_prompt_tokens"):
        _record(0, cached_prompt_tokens=10_000)


def test_files_without_gap_counts_stay_readable(tmp_path: Path) -> None:
    old = dict(GOOD)
    del old["itl_buckets"]
    df = read_records(_write_lines(tmp_path / "old.jsonl", [old, old]))
    assert df["itl_buckets"].isna().all()
    assert from_frame(df)[0].itl_buckets is None


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ([1, 2], "23 gap counts"),
        ([0] * 22 + [-1], "non-negative"),
        ([0] * 22 + [1.5], "non-negative"),
        ("many", "list of 23"),
        ([0] * 22 + [9], "more inter-token gaps"),
    ],
)
def test_bad_gap_counts_are_named(tmp_path: Path, value: object, words: str) -> None:
    bad = dict(GOOD, itl_buckets=value)
    with pytest.raises(RecordError) as info:
        read_records(_write_lines(tmp_path / "bad.jsonl", [GOOD, bad]))
    assert (info.value.row, info.value.field) == (2, "itl_buckets") and words in str(info.value)
    df = to_frame(RECORDS)
    df["itl_buckets"] = [r.itl_buckets for r in RECORDS[:-1]] + [value]
    with pytest.raises(RecordError) as info:
        write_records(tmp_path / "bad.parquet", df)
    assert (info.value.row, info.value.field) == (len(RECORDS), "itl_buckets")


# The serving side's writer (fleetwatch.core.records.write, no pandas): its files read back
# exactly as the DataFrame writer's do, whatever the records hold.
MIXED = [
    _record(0, tenant="t0", intended_s=99.5),
    _record(1, itl_buckets=None, traffic_class="chat", preemptions=1, preemption_stall_s=0.25),
    *(
        _record(
            2 + k, status=s, scheduled_s=None, first_token_s=None, output_tokens=0, itl_buckets=None
        )
        for k, s in enumerate((Status.ERROR, Status.ABORTED, Status.REJECTED))
    ),
]
# Every optional column null in every row: the case a type inferred from values gets wrong.
ALL_NULL = [
    _record(i, tenant=None, finish_reason=None, max_itl_s=None, itl_buckets=None) for i in range(3)
]


@pytest.mark.parametrize("records", [MIXED, ALL_NULL, []], ids=["mixed", "all-null", "empty"])
@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_the_serving_writer_reads_back_as_the_frame_writer(
    tmp_path: Path, records: list[RequestRecord], suffix: str
) -> None:
    assert write_serving(tmp_path / f"serving{suffix}", records) == len(records)
    write_records(tmp_path / f"frame{suffix}", to_frame(records))
    serving, frame = (read_records(tmp_path / f"{n}{suffix}") for n in ("serving", "frame"))
    pd.testing.assert_frame_equal(serving, frame)
    assert from_frame(serving) == records


@pytest.mark.parametrize("writer", ["serving", "frame"])
def test_parquet_columns_have_the_declared_types_even_when_all_null(
    tmp_path: Path, writer: str
) -> None:
    """Both writers type a column null in every row as any other (``record_schema``), so the
    files of a fleet share one schema: Spark refuses to merge a list column with a null one."""
    if writer == "serving":
        write_serving(tmp_path / "r.parquet", ALL_NULL)
    else:
        write_records(tmp_path / "r.parquet", to_frame(ALL_NULL))
    schema = pq.read_schema(tmp_path / "r.parquet")
    assert schema.remove_metadata() == record_schema(schema.names)
    assert schema.field("itl_buckets").type == pa.list_(pa.int64())
    assert schema.field("tenant").type == pa.large_string()
    assert schema.field("scheduled_s").type == pa.float64()
    assert schema.field("prompt_tokens").type == pa.int64()
    assert pq.read_table(tmp_path / "r.parquet").column("status").to_pylist() == ["ok"] * 3


def test_an_unknown_suffix_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="unknown record format"):
        write_serving(tmp_path / "r.csv", MIXED)
    assert list(tmp_path.iterdir()) == []
