"""Write one replica's records (``records_fleet.replica_columns``) as the vLLM plugin writes them,
or as one compacted Parquet file per hour.

JSON lines: ``<host>/vllm-<pid>/vllm-<pid>-NNNNNN.jsonl``, numbered from 1, one file per
``seal_s`` of finish time, every line exactly ``fleetwatch.core.records.write.json_line``'s: every
stored field in ``FIELDS`` order, compact, null where unset, floats as ``repr`` writes them. The
lines come from one format string per replica (about 6 µs a line here) rather than ``json.dumps`` of a
record (about 25 µs): the format is fixed, only the values change; a test holds the two equal.

Parquet: ``date=YYYY-MM-DD/hour=HH/replica=<name>/part-0.parquet`` (UTC hour of ``finished_s``),
zstd, one row group, the columns and types ``fleetwatch.core.records.write`` gives a Parquet
file, the replica kept as a column too (a file read alone still names its replica).
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.records_fleet import Columns, FleetShape, Replica

__all__ = ["Written", "hour_folder", "json_lines", "write_jsonl", "write_parquet"]


@dataclass(frozen=True, slots=True)
class Written:
    """What one replica's writer wrote: records, bytes, and each file with the first second of
    finish time it covers (a sealed file's or an hour's)."""

    records: int
    bytes: int
    files: list[tuple[Path, float]]


_INTS = ("prompt_tokens", "output_tokens", "cached_prompt_tokens", "preemptions")


def _line_format(rep: Replica) -> str:
    return (
        '{"request_id":"chatcmpl-%016x%016x","replica":"' + rep.name + '","model":"' + rep.model
        + '","traffic_class":"default","tenant":null,"arrival_s":%s,"scheduled_s":%s,'
        '"first_token_s":%s,"finished_s":%s,"intended_s":null,"prompt_tokens":%d,'
        '"output_tokens":%d,"cached_prompt_tokens":%d,"preemptions":%d,'
        '"preemption_stall_s":0.0,"max_itl_s":null,"status":"%s","finish_reason":"%s",'
        '"error_type":%s,"itl_buckets":null,"trace_id":null}\n'
    )  # fmt: skip


def _floats_or_null(values: np.ndarray[Any, Any]) -> list[Any]:
    """Python floats (``%s`` writes their ``repr``), the string ``null`` where NaN."""
    out: list[Any] = values.tolist()
    for i in np.flatnonzero(np.isnan(values)).tolist():
        out[i] = "null"
    return out


def json_lines(rep: Replica, cols: Columns) -> list[str]:
    """One JSON line per record, in the columns' order."""
    fmt = _line_format(rep)
    ids = cols["request_id"]
    error_type = [f'"{e}"' if e is not None else "null" for e in cols["error_type"].tolist()]
    rows = zip(
        ids[:, 0].tolist(),
        ids[:, 1].tolist(),
        cols["arrival_s"].tolist(),
        _floats_or_null(cols["scheduled_s"]),
        _floats_or_null(cols["first_token_s"]),
        cols["finished_s"].tolist(),
        *(cols[name].tolist() for name in _INTS),
        cols["status"].tolist(),
        cols["finish_reason"].tolist(),
        error_type,
        strict=True,
    )
    return [fmt % row for row in rows]


def write_jsonl(
    root: Path, shape: FleetShape, rep: Replica, cols: Columns, start_s: float
) -> Written:
    """The replica's sealed files under ``root``: file ``k`` (from 1) holds the records that
    finished in ``[start_s + (k-1) seal_s, start_s + k seal_s)``."""
    lines = json_lines(rep, cols)
    folder = root / rep.host / f"vllm-{rep.pid}"
    folder.mkdir(parents=True, exist_ok=True)
    finished = cols["finished_s"]
    seals = int(np.ceil((finished[-1] - start_s) / shape.seal_s)) + 1 if len(finished) else 0
    edges = np.searchsorted(finished, start_s + shape.seal_s * np.arange(seals + 1)).tolist()
    files: list[tuple[Path, float]] = []
    size = 0
    for k, (a, b) in enumerate(itertools.pairwise(edges)):
        if a == b:
            continue
        text = "".join(lines[a:b])
        path = folder / f"vllm-{rep.pid}-{len(files) + 1:06d}.jsonl"
        path.write_text(text, encoding="utf-8")
        files.append((path, start_s + k * shape.seal_s))
        size += len(text)
    return Written(len(lines), size, files)


def _arrow_table(rep: Replica, cols: Columns, rows: slice) -> Any:
    import pyarrow as pa

    n = rows.stop - rows.start
    ids = cols["request_id"][rows]
    hexed = [f"chatcmpl-{a:016x}{b:016x}" for a, b in ids.tolist()]

    def floats(name: str) -> Any:
        v = cols[name][rows]
        return pa.array(v, pa.float64(), mask=np.isnan(v))

    def constant(value: str | None, kind: Any = None) -> Any:
        return pa.nulls(n, kind or pa.string()) if value is None else pa.repeat(value, n)

    return pa.table(
        {
            "request_id": pa.array(hexed, pa.string()),
            "replica": constant(rep.name),
            "model": constant(rep.model),
            "traffic_class": constant("default"),
            "tenant": constant(None),
            "arrival_s": pa.array(cols["arrival_s"][rows]),
            "scheduled_s": floats("scheduled_s"),
            "first_token_s": floats("first_token_s"),
            "finished_s": pa.array(cols["finished_s"][rows]),
            "intended_s": constant(None, pa.float64()),
            **{name: pa.array(cols[name][rows], pa.int64()) for name in _INTS},
            "preemption_stall_s": pa.array(np.zeros(n)),
            "max_itl_s": constant(None, pa.float64()),
            **{
                name: pa.array(cols[name][rows], pa.string())
                for name in ("status", "finish_reason", "error_type")
            },
            "itl_buckets": constant(None, pa.list_(pa.int64())),
            "trace_id": constant(None, pa.string()),
        }
    )


def hour_folder(hour_start_s: float) -> str:
    """``date=YYYY-MM-DD/hour=HH`` of the UTC hour beginning at ``hour_start_s``."""
    t = dt.datetime.fromtimestamp(hour_start_s, dt.UTC)
    return f"date={t:%Y-%m-%d}/hour={t:%H}"


def write_parquet(root: Path, rep: Replica, cols: Columns) -> Written:
    """The replica's records as one Parquet file per UTC hour of finish time, as ``records
    compact`` writes them (its layout, stamped checked: the generator's rows pass the record
    checks, ``tests/benchmarks`` checks it on a small dataset)."""
    import pyarrow.parquet as pq

    from fleetwatch.core.records.write import parquet_layout, stamp_checked

    finished = cols["finished_s"]
    hours = np.floor(finished / 3600.0)
    cuts = np.flatnonzero(np.diff(hours)) + 1
    edges = [0, *cuts.tolist(), len(finished)]
    files: list[tuple[Path, float]] = []
    size = 0
    for a, b in itertools.pairwise(edges):
        hour_s = float(hours[a]) * 3600.0
        folder = root / hour_folder(hour_s) / f"replica={rep.name}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "part-0.parquet"
        table = _arrow_table(rep, cols, slice(a, b))
        pq.write_table(stamp_checked(table), path, **parquet_layout(table))
        files.append((path, hour_s))
        size += path.stat().st_size
    return Written(len(finished), size, files)
