"""A JSON-lines file's columns checked whole (``validate.columns_pass``), its rows one by one
only where one may fail: the same columns, and the same first error, as a reading that checks
every line as it meets it (``_line_by_line`` here, the reader's contract written out), on
files holding every kind of fault the checks know, alone, together and at chunk edges."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fleetwatch.core.records.schema import (
    DEFAULTS,
    FIELDS,
    MAX_REQUEST_S,
    RecordError,
    check_type,
    check_values,
)
from fleetwatch.records import io
from fleetwatch.records.io import (
    _dtype,
    add_derived,
    columns_frame,
    parquet_table,
    read_columns,
)
from fleetwatch.records.validate import columns_pass


def _line_by_line(path: Path) -> dict[str, list[Any]]:
    """Every line parsed and checked as it is met, field by field: the first problem raised."""
    name = str(path)
    columns: dict[str, list[Any]] = {spec.name: [] for spec in FIELDS}
    try:
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise RecordError(
                        f"not valid JSON ({exc.msg})", path=name, row=lineno
                    ) from None
                except RecursionError:
                    raise RecordError(
                        "not valid JSON (nested too deeply)", path=name, row=lineno
                    ) from None
                except ValueError as exc:
                    said = str(exc).split(";")[0].split(":")[0]
                    raise RecordError(f"not valid JSON ({said})", path=name, row=lineno) from None
                if not isinstance(obj, dict):
                    raise RecordError("not a JSON object", path=name, row=lineno)
                for spec in FIELDS:
                    if spec.name not in obj and not spec.optional and spec.name not in DEFAULTS:
                        raise RecordError("is missing", path=name, row=lineno, field=spec.name)
                    value = obj.get(spec.name, DEFAULTS.get(spec.name))
                    message = check_type(spec, value)
                    if message is not None:
                        raise RecordError(message, path=name, row=lineno, field=spec.name)
                    columns[spec.name].append(value)
                problem = check_values({k: v[-1] for k, v in columns.items()})
                if problem is not None:
                    raise RecordError(problem[1], path=name, row=lineno, field=problem[0])
    except UnicodeDecodeError:
        raise RecordError("not UTF-8 text, so not JSON lines", path=name) from None
    return columns


def _good(i: int, rng: random.Random) -> dict[str, Any]:
    """A record as the plugin writes it (every key), times and counts varied."""
    arrival = 1.796e9 + i * 0.1 + rng.random()
    scheduled = arrival + rng.random() * 0.05
    first = scheduled + rng.random() * 0.2
    out = rng.randint(0, 300)
    prompt = rng.randint(0, 4000)
    gaps = None
    if rng.random() < 0.5 and out >= 2:
        gaps = [0] * 23
        for _ in range(out - 1):
            gaps[rng.randrange(23)] += 1
    return {
        "request_id": f"req-{i}",
        "replica": f"host-{i % 3}-gpu{i % 8}",
        "model": rng.choice(["m-8b", "m-70b"]),
        "traffic_class": "default",
        "tenant": rng.choice([None, "t1"]),
        "arrival_s": arrival,
        "scheduled_s": scheduled,
        "first_token_s": first,
        "finished_s": first + out * 0.02,
        "intended_s": rng.choice([None, arrival]),
        "prompt_tokens": prompt,
        "output_tokens": out,
        "cached_prompt_tokens": rng.randint(0, prompt),
        "preemptions": rng.choice([0, 0, 1]),
        "preemption_stall_s": rng.choice([0.0, 0.25]),
        "max_itl_s": rng.choice([None, 0.05]),
        "status": rng.choice(["ok", "ok", "error", "aborted", "rejected"]),
        "finish_reason": rng.choice([None, "stop", "length"]),
        "error_type": None,
        "itl_buckets": gaps,
        "trace_id": rng.choice([None, f"{i + 1:032x}"]),
    }


def _set(name: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda r: r.__setitem__(name, value)


def _drop(name: str) -> Callable[[dict[str, Any]], None]:
    return lambda r: r.pop(name, None)


def _shift(name: str, by: float) -> Callable[[dict[str, Any]], None]:
    return lambda r: r.__setitem__(name, r["arrival_s"] + by)


def _gaps(value: Any) -> Callable[[dict[str, Any]], None]:
    def put(r: dict[str, Any]) -> None:
        r["output_tokens"] = max(r["output_tokens"], 100)
        r["itl_buckets"] = value

    return put


HUGE = 10**400
FAULTS: list[Callable[[dict[str, Any]], None]] = [
    *(_drop(spec.name) for spec in FIELDS),
    *(_set(spec.name, None) for spec in FIELDS),
    *(_set(spec.name, v) for spec in FIELDS for v in ("x", True, [1], {"a": 1}, 7, 7.5)),
    *(_set(n, v) for n in ("prompt_tokens", "preemptions") for v in (5.0, -1, 2**63, -(2**63) - 1)),
    *(_set(n, 2**63 - 1) for n in ("output_tokens", "preemptions")),
    _set("cached_prompt_tokens", 10**6),
    *(_set(n, v) for n in ("arrival_s", "max_itl_s") for v in (HUGE, -HUGE, 1e400, -1e400)),
    *(_set(n, math.nan) for n in ("scheduled_s", "max_itl_s", "preemption_stall_s")),
    *(_set(n, v) for n in ("preemption_stall_s", "max_itl_s") for v in (-0.1, MAX_REQUEST_S + 1)),
    *(_set(n, 1.7e12) for n in ("arrival_s", "finished_s", "intended_s", "first_token_s")),
    _set("intended_s", -1.7e12),
    _shift("finished_s", MAX_REQUEST_S + 1),
    _shift("finished_s", MAX_REQUEST_S),  # at the limit: fine
    *(_shift(n, -1e-3) for n in ("scheduled_s", "first_token_s", "finished_s")),
    *(_shift(n, -1e-9) for n in ("scheduled_s", "first_token_s", "finished_s")),  # within eps
    lambda r: r.update(arrival_s=1796000000, scheduled_s=1796000000, first_token_s=1796000001),
    lambda r: r.update(first_token_s=r["scheduled_s"] - 1e-3),
    lambda r: r.update(finished_s=r["first_token_s"] - 1e-3, scheduled_s=None),
    _set("status", "maybe"),
    *(_set("trace_id", v) for v in ("0" * 32, "A" * 32, "f" * 31, "g" * 32, 5)),
    *(_gaps(v) for v in ([0] * 22, [0] * 24, [-1] + [0] * 22, [1.0] + [0] * 22, [1.5] + [0] * 22)),
    *(_gaps(v) for v in ([True] + [0] * 22, ["1"] + [0] * 22, [HUGE] + [0] * 22, "x", {"a": 1})),
    *(_gaps(v) for v in ([2**62] * 23, [1 << 40] + [0] * 22, [99] + [0] * 22, [100] + [0] * 22)),
]
LINES = ["{not json", "[1, 2]", "7", '"text"', "1" * 4400, "[" * 100_000, '{"a": 1} {"b": 2}']


def _write(path: Path, rows: list[Any]) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
    return path


def _outcome(read: Callable[[Path], dict[str, list[Any]]], path: Path) -> object:
    try:
        return read(path)
    except RecordError as exc:
        return ("error", str(exc))


@pytest.mark.parametrize("chunk", [2, 1 << 14])
def test_every_fault_alone_is_the_line_by_line_reading_s_outcome(
    tmp_path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(io, "_CHUNK_LINES", chunk)
    rng = random.Random(7)
    errors = 0
    for k, fault in enumerate([*FAULTS, *LINES]):
        rows: list[Any] = [_good(i, rng) for i in range(5)]
        if isinstance(fault, str):
            rows[3] = fault
        else:
            fault(rows[3])
        path = _write(tmp_path / f"f{k}.jsonl", rows)
        got, want = _outcome(read_columns, path), _outcome(_line_by_line, path)
        assert got == want, fault
        errors += isinstance(want, tuple)
    assert errors > 150 and len(FAULTS) + len(LINES) - errors > 30  # both kinds, many of each


def test_the_first_fault_in_the_file_is_named_among_many(tmp_path: Path) -> None:
    rng = random.Random(11)
    for k in range(300):
        rows: list[Any] = [_good(i, rng) for i in range(rng.randint(1, 12))]
        for _ in range(rng.randint(0, 3)):
            at = rng.randrange(len(rows))
            if rng.random() < 0.15:
                rows[at] = rng.choice([*LINES[:4], "", "   "])
            elif isinstance(rows[at], dict):
                rng.choice(FAULTS)(rows[at])
        path = _write(tmp_path / f"m{k}.jsonl", rows)
        if rng.random() < 0.05:  # a byte that is not UTF-8 after the lines
            path.write_bytes(path.read_bytes() + b"\xff\xfe\n")
        assert _outcome(read_columns, path) == _outcome(_line_by_line, path)


def test_the_plugin_s_records_pass_whole_and_come_back_as_written(tmp_path: Path) -> None:
    rng = random.Random(3)
    rows = [_good(i, rng) for i in range(2000)]
    path = _write(tmp_path / "seg.jsonl", rows)
    got = read_columns(path)
    assert got == _line_by_line(path)
    assert columns_pass(got)  # checked whole, with no row by row
    assert got["request_id"] == [r["request_id"] for r in rows]


def test_a_value_beyond_every_double_is_a_bad_value_not_a_crash(tmp_path: Path) -> None:
    rng = random.Random(5)
    row = _good(0, rng)
    row["arrival_s"] = HUGE
    path = _write(tmp_path / "huge.jsonl", [row])
    with pytest.raises(RecordError, match="row 1, field 'arrival_s': must be finite"):
        read_columns(path)


def test_the_frame_of_checked_columns_is_pandas_own_construction(tmp_path: Path) -> None:
    """``columns_frame`` makes each list straight into its array: the frame pandas makes of
    the same lists with the same dtypes, values, nulls and dtypes alike, whatever the lists."""
    rng = random.Random(13)
    rows = [_good(i, rng) for i in range(400)]
    rows[5]["prompt_tokens"] = 7.0  # an integral float in an integer field
    rows[6]["arrival_s"] = 1796000000  # an integer in a float field
    rows[6]["scheduled_s"] = rows[6]["first_token_s"] = None
    cases = [
        read_columns(_write(tmp_path / "a.jsonl", rows)),
        read_columns(_write(tmp_path / "b.jsonl", rows[:1])),
        {key: [] for key in read_columns(_write(tmp_path / "c.jsonl", rows[:1]))},
    ]
    for columns in cases:
        n = len(columns["request_id"])
        want = add_derived(
            pd.DataFrame(
                {
                    spec.name: pd.Series(columns[spec.name], dtype=_dtype(spec.name))
                    for spec in FIELDS
                }
            )
        )
        got = columns_frame(columns)
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        assert len(got) == n
        assert parquet_table(got).equals(parquet_table(want), check_metadata=True)
