"""Bounded cost for any input: YAML alias bombs, implausible record times, huge label values,
and Parquet checked exactly as JSON lines are.

The command-line cases run ``fleetwatch`` in a child process that imports everything first and
then measures only the command: its CPU time (bound 1 s; the box is shared, so wall time under
other load is not the command's cost, and is only checked against ``WALL_BOUND_S``), how much its
peak memory grew (bound 100 MB: the larger of the process's peak growth and the peak of Python
allocations in a second, traced run), its exit status (2) and its stderr (one line).
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fleetwatch.records import RecordError, read_records
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.load import MAX_ALIASES, load_spec
from fleetwatch.slo.parse import parse_spec
from fleetwatch.telemetry.metrics import LabelCap

ROOT = Path(__file__).resolve().parents[2]
TIME_BOUND_S = 1.0
WALL_BOUND_S = 10.0
MEMORY_BOUND_BYTES = 100 << 20

_MEASURE = """
import json, resource, sys, time, io, contextlib, tracemalloc
from fleetwatch.cli import main
import pandas, numpy, yaml, fleetwatch.slo.report, fleetwatch.slo.load, fleetwatch.records.io
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
err = io.StringIO()
t0, c0 = time.perf_counter(), time.process_time()
with contextlib.redirect_stderr(err):
    code = main(sys.argv[1:])
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tracemalloc.start()  # again, traced (slower): the peak of Python allocations of one run
with contextlib.redirect_stderr(io.StringIO()):
    main(sys.argv[1:])
traced = tracemalloc.get_traced_memory()[1]
grew = max((after - before) * 1024, traced)
print(json.dumps({"code": code, "took": cpu, "wall": wall, "grew": grew, "err": err.getvalue()}))
"""


def _measure(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


def _nine_way_bomb() -> str:
    """Nine levels of nine aliases inside 'version' (whose error message shows the value)."""
    levels = ["&a [lol,lol,lol,lol,lol,lol,lol,lol,lol]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        levels.append(f"&{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "version: [" + ", ".join(levels) + "]\n"


def _binary_bomb() -> str:
    """Forty levels of two aliases: few aliases, 2**40 values once expanded."""
    parts = ["&l0 [x,x]"] + [f"&l{i} [*l{i - 1},*l{i - 1}]" for i in range(1, 40)]
    return "service: [" + ", ".join(parts) + "]\n"


def _many_aliases() -> str:
    return (
        "service: &s x\nlabels: {" + ", ".join(f"k{i}: *s" for i in range(MAX_ALIASES + 1)) + "}\n"
    )


@pytest.mark.parametrize("make", [_nine_way_bomb, _binary_bomb, _many_aliases])
def test_an_alias_bomb_fails_fast_small_in_one_line_with_status_2(
    make: Any, tmp_path: Path
) -> None:
    text = make()
    assert make is _many_aliases or len(text) <= 700
    spec = tmp_path / "bomb.yaml"
    spec.write_text(text)
    got = _measure("slo", "validate", str(spec))
    print(
        f"{make.__name__}: {len(text)} bytes, {got['took']:.3f} s CPU, {got['wall']:.3f} s wall, "
        f"+{got['grew'] / 2**20:.2f} MB"
    )
    assert got["code"] == 2
    assert got["took"] < TIME_BOUND_S and got["grew"] < MEMORY_BOUND_BYTES, got
    assert got["wall"] < WALL_BOUND_S, got
    assert got["err"].count("\n") == 1 and "alias" in got["err"], got["err"]


def test_error_messages_show_a_bounded_part_of_the_value() -> None:
    bomb: Any = ["lol"] * 9
    for _ in range(9):
        bomb = [bomb] * 9  # 9**10 values, shared: cheap to hold, ruinous to repr
    for doc in (
        {"version": bomb},
        {"service": bomb},
        {"service": "x" * 10**7},
        {"service": "s", "slos": bomb},
    ):
        t0 = time.perf_counter()
        with pytest.raises(SLOSpecError) as info:
            parse_spec(doc)
        assert time.perf_counter() - t0 < WALL_BOUND_S
        assert len(str(info.value)) < 300, str(info.value)[:300]


def test_a_spec_larger_than_a_mebibyte_is_refused_before_parsing() -> None:
    with pytest.raises(SLOSpecError, match="larger than"):
        load_spec("# " + "x" * (1 << 20))


def _records(tmp_path: Path, extra: dict[str, Any]) -> Path:
    rows = [
        {
            "request_id": f"r{i}",
            "replica": "a",
            "model": "m",
            "arrival_s": 1.7e9 + i,
            "finished_s": 1.7e9 + i + 2.0,
            "prompt_tokens": 5,
            "output_tokens": 3,
        }
        for i in range(1000)
    ]
    rows.append({**rows[0], "request_id": "odd", **extra})
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ({"finished_s": 1.7e9 + 1e7}, "finished_s", "not plausible"),
        ({"arrival_s": 1.7e12, "finished_s": 1.7e12 + 2000}, "arrival_s", "milliseconds"),
    ],
)
def test_an_implausible_record_time_is_a_one_line_error_with_status_2(
    extra: dict[str, Any], field: str, words: str, tmp_path: Path
) -> None:
    path = _records(tmp_path, extra)
    got = _measure("slo", "report", str(ROOT / "slo/examples/chat.yaml"), "--records", str(path))
    print(
        f"{field}: {got['took']:.3f} s CPU, {got['wall']:.3f} s wall, +{got['grew'] / 2**20:.2f} MB"
    )
    assert got["code"] == 2
    assert got["took"] < TIME_BOUND_S and got["grew"] < MEMORY_BOUND_BYTES, got
    assert got["wall"] < WALL_BOUND_S, got
    assert got["err"].count("\n") == 1
    assert "row 1001" in got["err"] and f"'{field}'" in got["err"] and words in got["err"]


def test_records_spanning_two_clocks_are_refused_before_any_array_is_sized(tmp_path: Path) -> None:
    # each record is plausible; together they span 1.7e9 s (an engine clock next to epoch time)
    path = _records(tmp_path, {"arrival_s": 10.0, "finished_s": 12.0})
    spec = tmp_path / "all.yaml"
    spec.write_text(
        "version: fleetwatch/slo/v1\nservice: s\nslos:\n"
        "  - {name: availability, objective: 99.9, sli: {kind: availability}}\n"
    )
    got = _measure("slo", "report", str(spec), "--records", str(path))
    assert got["code"] == 2 and "one clock" in got["err"], got
    assert got["took"] < TIME_BOUND_S and got["grew"] < MEMORY_BOUND_BYTES, got
    assert got["wall"] < WALL_BOUND_S, got


def test_label_values_are_cut_and_counted() -> None:
    from prometheus_client import CollectorRegistry

    from fleetwatch.telemetry.metrics.serving import ServingMetrics

    metrics = ServingMetrics("m", "r0", tenant_label=True)
    registry = CollectorRegistry()
    registry.register(metrics)
    for i in range(3):
        metrics.series("chat" + "x" * 10_000, f"tenant-{i}-" + "y" * 500).prompt_tokens += 1
    names = {key for key in metrics._series}
    assert names == {("chat" + "x" * 124, f"tenant-{i}-" + "y" * 119) for i in range(3)}
    base = {"model": "m", "replica": "r0"}
    for label, n in (("traffic_class", 3), ("tenant", 3)):
        got = registry.get_sample_value(
            "fleetwatch_telemetry_label_truncated_total", {**base, "label": label}
        )
        assert got == n
    cap = LabelCap("x", 2, max_length=3)
    assert [cap.get(v) for v in ("abcdef", "abcxyz", "q", "r")] == ["abc", "abc", "q", "other"]
    assert (cap.truncated, cap.folded) == (2, 1)


# --- Parquet is checked exactly as JSON lines are --------------------------------------------

_BAD_VALUES: list[Any] = [
    -1,
    2**64 - 1,
    2**63,
    math.inf,
    -math.inf,
    math.nan,
    True,
    "x",
    None,
    1.5,
    1.7e12,
    -5.0,
    1e7,
]
_VALID = {
    "request_id": "r1",
    "replica": "a",
    "model": "m",
    "traffic_class": "default",
    "arrival_s": 100.0,
    "scheduled_s": 100.5,
    "first_token_s": 101.0,
    "finished_s": 103.0,
    "prompt_tokens": 10,
    "output_tokens": 4,
    "cached_prompt_tokens": 2,
    "preemptions": 0,
    "preemption_stall_s": 0.0,
    "max_itl_s": 0.5,
    "status": "ok",
}


def _verdict(path: Path) -> str:
    try:
        read_records(path)
    except RecordError as exc:
        return f"row {exc.row} field {exc.field}"
    return "ok"


def _write_both(tmp_path: Path, row: dict[str, Any], name: str) -> tuple[Path, Path]:
    jsonl = tmp_path / f"{name}.jsonl"
    jsonl.write_text(json.dumps(row) + "\n")
    parquet = tmp_path / f"{name}.parquet"
    columns = {
        k: pa.array([v], type=pa.uint64() if isinstance(v, int) and v >= 2**63 else None)
        for k, v in row.items()
    }
    pq.write_table(pa.table(columns), parquet)
    return jsonl, parquet


@pytest.mark.parametrize("seed", range(8))
def test_parquet_and_jsonl_give_the_same_verdict_for_the_same_record(
    seed: int, tmp_path: Path
) -> None:
    rng = random.Random(seed)
    for case in range(40):
        row = dict(_VALID)
        for field in rng.sample(sorted(row), rng.choice([1, 1, 2])):
            row[field] = rng.choice(_BAD_VALUES)
        jsonl, parquet = _write_both(tmp_path, row, f"case-{case}")
        assert _verdict(jsonl) == _verdict(parquet), row


_FLOAT_BAD = [math.inf, -1.0, 1.7e12, 1e7, 50.0, 200.0]
_INT_BAD = [-1, 2**62, 1000]


@pytest.mark.parametrize("seed", range(4))
def test_in_a_many_row_file_both_report_the_same_first_bad_row(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    for case in range(10):
        rows = [dict(_VALID, request_id=f"r{i}") for i in range(6)]
        for _ in range(rng.randrange(1, 4)):
            row = rng.choice(rows)
            field = rng.choice([k for k, v in _VALID.items() if isinstance(v, int | float)])
            bad = _INT_BAD if isinstance(_VALID[field], int) else _FLOAT_BAD
            row[field] = rng.choice(bad)
        jsonl = tmp_path / f"many-{case}.jsonl"
        jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
        parquet = tmp_path / f"many-{case}.parquet"
        pq.write_table(pa.Table.from_pylist(rows), parquet)
        assert _verdict(jsonl) == _verdict(parquet), rows


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("prompt_tokens", 2**64 - 1),
        ("finished_s", math.inf),
        ("max_itl_s", -0.5),
        ("preemption_stall_s", -1.0),
        ("max_itl_s", math.nan),
        ("output_tokens", True),
        ("request_id", 7),
    ],
)
def test_parquet_refuses_what_json_lines_refuse(field: str, value: Any, tmp_path: Path) -> None:
    jsonl, parquet = _write_both(tmp_path, {**_VALID, field: value}, "bad")
    assert _verdict(jsonl) == _verdict(parquet) == f"row 1 field {field}"


def test_a_valid_record_reads_the_same_from_both(tmp_path: Path) -> None:
    jsonl, parquet = _write_both(tmp_path, _VALID, "good")
    a, b = read_records(jsonl), read_records(parquet)
    pd.testing.assert_frame_equal(a, b)
