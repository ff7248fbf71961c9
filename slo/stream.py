"""Backtests over Parquet record files larger than memory: batches streamed through the binning.

``pyarrow.parquet.ParquetFile.iter_batches`` reads the columns the spec's SLOs need (plus the
timestamps every record is checked on), ``batch_rows`` rows at a time. Each batch is checked with
the same rules as ``fleetwatch.records.read_records`` (errors name the file-wide row), turned into
each SLO's events (``fleetwatch.slo.events``) and counted into that SLO's bins (``fleetwatch.slo.bins``); the batch is
then dropped. The timelines and alerts are computed from the bins, so the result is identical to
reading the whole file.

Memory bound: one batch (``batch_rows`` x the columns read, about 30 bytes a row for an
availability SLO; the file is read through a 1 MiB buffer, not pre-buffered) plus, per SLO, 16 bytes per bin from the first to the last event (bins of the
common divisor of the evaluation interval and the windows: 30 days of 30 s bins are 1.4 MB) and
the timeline's prefix sums (8 more bytes per bin) and firing state (1 byte per evaluation per
alert). The number of records does not enter it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fleetwatch.core.records.schema import DEFAULTS, FIELDS, ITL_BOUNDS
from fleetwatch.records import RecordError, validate_frame
from fleetwatch.records.engine import Engine
from fleetwatch.slo.backtest import Backtest, backtest_counts, new_counts
from fleetwatch.slo.bins import BinCounts
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.events import needed_columns, sli_events, sli_sql
from fleetwatch.slo.spec import SLOSpec

__all__ = [
    "BATCH_ROWS",
    "StreamedCounts",
    "backtest_parquet",
    "distinct_rows",
    "engine_counts",
    "stream_counts",
]

BATCH_ROWS = 1 << 18


@dataclass(frozen=True, slots=True)
class StreamedCounts:
    """Per SLO of a spec, its events binned; the records' first and last finish times."""

    counts: tuple[BinCounts, ...]
    first_finish_s: float
    last_finish_s: float
    records: int


class _Batch(Mapping[str, Any]):
    """A batch as ``sli_events`` reads it: the DataFrame's columns, and the gap counts as the
    pyarrow list array (no Python object per row)."""

    def __init__(self, frame: Any, extra: Mapping[str, Any]) -> None:
        self._frame, self._extra = frame, extra

    def __getitem__(self, name: str) -> Any:
        return self._extra[name] if name in self._extra else self._frame[name]

    def __contains__(self, name: object) -> bool:
        return name in self._extra or name in self._frame.columns

    def __iter__(self) -> Iterator[str]:
        return iter([*self._frame.columns, *self._extra])

    def __len__(self) -> int:
        return len(self._frame.columns) + len(self._extra)


def _check_gaps(column: Any, out_tokens: Any, path: str, offset: int) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_null(column.type):
        return
    width = len(ITL_BOUNDS) + 1
    lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    present = ~np.isnan(lengths.astype(np.float64))
    wrong = present & (np.nan_to_num(lengths.astype(np.float64)) != width)
    message = f"must hold {width} gap counts (one per ITL bucket)"
    if not wrong.any():
        counts = np.asarray(column.flatten().to_numpy(zero_copy_only=False)).reshape(-1, width)
        negative = np.zeros(present.size, dtype=bool)
        over = np.zeros(present.size, dtype=bool)
        negative[present] = (counts < 0).any(axis=1)
        limit = np.maximum(np.asarray(out_tokens, dtype=np.int64)[present] - 1, 0)
        over[present] = counts.sum(axis=1) > limit
        wrong = negative | over
        message = (
            "gap counts must be non-negative integers"
            if negative.any() and np.argmax(negative) <= np.argmax(wrong)
            else "counts more inter-token gaps than output_tokens - 1"
        )
    if wrong.any():
        row = offset + int(np.argmax(wrong)) + 1
        raise RecordError(message, path=path, row=row, field="itl_buckets")


def _open_schema(path: str | os.PathLike[str]) -> Any:
    import pyarrow.parquet as pq

    if not Path(path).exists():
        raise RecordError("no such file", path=str(path))
    try:
        return pq.read_schema(path)
    except Exception as exc:
        raise RecordError(f"not a readable Parquet file ({exc})", path=str(path)) from None


def distinct_rows(
    path: str | os.PathLike[str], columns: tuple[str, ...], *, batch_rows: int = BATCH_ROWS
) -> tuple[pd.DataFrame, int]:
    """The distinct combinations of ``columns`` in a Parquet record file and its number of rows,
    read a batch at a time (a column the file leaves out holds its default)."""
    import pyarrow.parquet as pq

    present = set(_open_schema(path).names)
    read = [c for c in columns if c in present]
    pf = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    rows = pf.metadata.num_rows
    seen: list[pd.DataFrame] = []
    if read:
        for batch in pf.iter_batches(batch_size=batch_rows, columns=read):
            part = batch.to_pandas().drop_duplicates()
            seen.append(part)
            if len(seen) > 64:  # keep the list short: fold what was seen so far
                seen = [pd.concat(seen).drop_duplicates()]
    frame = (
        pd.concat(seen).astype(object).drop_duplicates()
        if seen
        else pd.DataFrame(index=range(min(rows, 1)))
    )
    for c in columns:
        if c not in read:
            frame[c] = str(DEFAULTS.get(c, ""))
    return frame.reset_index(drop=True), rows


def stream_counts(
    spec: SLOSpec, path: str | os.PathLike[str], *, batch_rows: int = BATCH_ROWS
) -> StreamedCounts:
    """Bin every SLO's events of a Parquet record file, one batch of rows at a time."""
    import pyarrow.parquet as pq

    name = str(path)
    schema = _open_schema(path)
    present = set(schema.names)
    for spec_field in FIELDS:
        if spec_field.name not in present and not (
            spec_field.optional or spec_field.name in DEFAULTS
        ):
            raise RecordError("missing column", path=name, field=spec_field.name)
    wanted = {"arrival_s", "finished_s"}
    for slo in spec.slos:
        wanted.update(needed_columns(slo))
    if "itl_buckets" in wanted:
        wanted.add("output_tokens")
    columns = sorted(c for c in wanted if c in present)
    step = spec.evaluation_interval_s
    counts = tuple(new_counts(slo, step) for slo in spec.slos)
    placeholders = {
        f.name: "" for f in FIELDS if f.name not in columns and not f.optional and f.kind is str
    }
    placeholders = {k: v for k, v in placeholders.items() if k not in DEFAULTS}
    # no pre-buffering: pyarrow would otherwise fetch every row group's columns up front
    pf = pq.ParquetFile(
        path,
        read_dictionary=["status"] if "status" in columns else None,
        pre_buffer=False,
        buffer_size=1 << 20,
    )
    first, last, offset = math.inf, -math.inf, 0
    for batch in pf.iter_batches(batch_size=batch_rows, columns=columns):
        extra: dict[str, Any] = {}
        if "itl_buckets" in columns:
            extra["itl_buckets"] = batch.column("itl_buckets")
            batch = batch.drop_columns(["itl_buckets"])
        frame = batch.to_pandas()
        for col, value in placeholders.items():
            frame[col] = value
        try:
            validate_frame(frame, path=name)
            if extra:
                out = frame["output_tokens"] if "output_tokens" in frame else np.zeros(len(frame))
                _check_gaps(extra["itl_buckets"], out, name, offset)
        except RecordError as exc:
            row = None if exc.row is None else exc.row + offset
            raise RecordError(exc.message, path=name, row=row, field=exc.field) from None
        if len(frame):
            finished = frame["finished_s"].to_numpy(dtype=np.float64)
            first, last = min(first, float(finished.min())), max(last, float(finished.max()))
            records = _Batch(frame, extra)
            for slo, bins in zip(spec.slos, counts, strict=True):
                bins.add(sli_events(slo, records))
        offset += len(frame)
    if offset == 0:
        raise SLOSpecError("no requests to evaluate (the records file holds none)")
    return StreamedCounts(counts, first, last, offset)


def engine_counts(
    spec: SLOSpec,
    engine: Engine,
    *,
    empty: str = "no requests to evaluate (the records hold none)",
) -> StreamedCounts:
    """Bin every SLO's events in a query engine: one ``GROUP BY`` of each event's bin for the
    SLOs that share an event time and a bin width (``sli_sql``: the events ``sli_events`` takes,
    as SQL; a bin is ``ceil(t / bin_s)`` with IEEE division, as ``BinCounts``), each SLO's events
    and bad events counted apart in it, and the first such scan also counting every record and
    its first and last finish, and checking the records where the engine's are not checked yet
    (``records.engine.folded``). Where they are (counted, or vouched for by their files), the
    records' ends come from the files' statistics (``Engine.finished_range``) or one scan of
    ``finished_s``, and each group's scan reads only the rows its SLOs select. Only the bins'
    counts leave the engine. No record at all is an ``SLOSpecError`` saying ``empty``. An SLO of inter-token gaps (``itl_buckets``, not in the
    view) is refused: read those records whole."""
    from fleetwatch.records.engine.folded import check_columns, checked

    events = [sli_sql(slo) for slo in spec.slos]
    counts = tuple(new_counts(slo, spec.evaluation_interval_s) for slo in spec.slos)
    shared: dict[tuple[str, int], list[int]] = {}
    for i, (event, bins) in enumerate(zip(events, counts, strict=True)):
        shared.setdefault((event.time, bins.bin_s), []).append(i)
    first = last = math.nan
    rows = 0
    check = check_columns(engine)
    counted = None if check else engine.counted
    if counted is not None:  # counted already, or vouched for by the files: read what SLOs select
        rows = counted[1]
        if not rows:
            raise SLOSpecError(empty)
        ends = engine.finished_range()
        if ends is None:
            got = engine.query("SELECT min(finished_s) AS a, max(finished_s) AS z FROM records")
            ends = (float(got["a"].iloc[0]), float(got["z"].iloc[0]))
        first, last = ends
    for g, ((time, bin_s), members) in enumerate(shared.items()):
        k = f"CAST(ceil({time} / CAST({bin_s} AS DOUBLE)) AS BIGINT)"
        each = ", ".join(
            f"count(*) FILTER (WHERE {events[i].where}) AS n{i}, "
            f"count(*) FILTER (WHERE ({events[i].where}) AND {events[i].bad}) AS b{i}"
            for i in members
        )
        if counted is not None and len(members) == 1:  # the scan's WHERE is the SLO's
            i = members[0]
            each = f"count(*) AS n{i}, count(*) FILTER (WHERE {events[i].bad}) AS b{i}"
        if check and not g:  # every row: counted, checked and its finish seen here
            scan = f", min(finished_s) AS a, max(finished_s) AS z, count(*) AS rows{check} "
            scan += "FROM records"
        else:  # only the rows some SLO of the group selects (files pruned by their statistics)
            scan = " FROM records WHERE " + " OR ".join(f"({events[i].where})" for i in members)
        got = engine.query(f"SELECT {k} AS k, {each}{scan} GROUP BY 1")
        if check and not g:
            got = checked(engine, got)
            rows = int(got["rows"].sum())
            if not rows:
                raise SLOSpecError(empty)
            first, last = float(got["a"].min()), float(got["z"].max())
        binned = got[got["k"].notna()]
        for i in members:
            mine = binned[binned[f"n{i}"] > 0]
            counts[i].add_counts(mine["k"], mine[f"n{i}"], mine[f"b{i}"])
    return StreamedCounts(counts, first, last, rows)


def backtest_parquet(
    spec: SLOSpec,
    path: str | os.PathLike[str],
    *,
    start_s: float | None = None,
    end_s: float | None = None,
    batch_rows: int = BATCH_ROWS,
) -> list[Backtest]:
    """A backtest per SLO of a Parquet record file, streamed (see the module docstring)."""
    streamed = stream_counts(spec, path, batch_rows=batch_rows)
    start = streamed.first_finish_s if start_s is None else start_s
    end = streamed.last_finish_s if end_s is None else end_s
    return [
        backtest_counts(slo, bins, spec.evaluation_interval_s, start, end)
        for slo, bins in zip(spec.slos, streamed.counts, strict=True)
    ]
