"""Request records to SLI events, counted when and as the engine's exporter observes them.

An SLO's events are times and bad flags (or, for ITL, counts of events and of bad events at each
time). Each is placed at the instant the fleetwatch exporter records it, so offline windows hold
the events Prometheus windows hold:

- availability: every finished request, at its finish; bad when its status is one of the SLI's
  bad outcomes;
- ttft: requests with a first token, at the first token (the exporter observes TTFT then);
- tpot (two or more output tokens) and e2e: at the finish;
- itl: every inter-token gap, as the exporter's per-gap histogram counts them, from the records'
  per-request gap counts (``itl_buckets``); a request's gaps count at its finish, at most one
  decode later than the exporter saw each gap (records keep counts, not each gap's instant);
- goodput: every finished request, at its finish; good when it finished ok with TTFT <= a and
  TPOT <= b (TPOT undefined for one-token outputs: judged on TTFT alone).

Latency events are bad when the value is above the threshold (a histogram's ``le`` bucket counts
values at most the bound). Durations are computed from the stored timestamps with the same
arithmetic as the exporter and ``fleetwatch.records.add_derived``, so bucket decisions agree.

``records`` may be a records DataFrame or any mapping of column name to array (one streamed
batch); only the columns ``needed_columns`` names are read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fleetwatch.core.records.schema import ITL_BOUNDS
from fleetwatch.records.engine.reductions import DERIVED
from fleetwatch.records.filters import sql_string
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.spec import AvailabilitySLI, GoodputSLI, LatencySLI, ServiceLevelObjective

__all__ = [
    "EVENT_TIME",
    "EventSQL",
    "SLIEvents",
    "goodput_mask",
    "itl_counts",
    "latency_values",
    "needed_columns",
    "sli_events",
    "sli_sql",
]

EVENT_TIME = {"ttft": "first_token_s", "tpot": "finished_s", "e2e": "finished_s"}
"""The stored column holding the instant the exporter observes each latency signal."""

FloatArray = np.ndarray[Any, np.dtype[np.float64]]
IntArray = np.ndarray[Any, np.dtype[np.int64]]
BoolArray = np.ndarray[Any, np.dtype[np.bool_]]
Records = pd.DataFrame | Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class SLIEvents:
    """Event times (seconds) and bad flags of one SLO.

    With ``count`` (ITL), ``count[i]`` events happened at ``times[i]``, ``bad[i]`` of them bad;
    otherwise each time is one event and ``bad`` is a boolean array, or None when ``bad_at``
    gives the ascending positions of the bad events instead (``sli_events`` finds them so for
    availability, without a mask the length of the records).
    """

    times: FloatArray
    bad: BoolArray | IntArray | None
    count: IntArray | None = None
    bad_at: IntArray | None = None

    def __post_init__(self) -> None:
        if (self.bad is None) == (self.bad_at is None) or (
            self.bad is None and self.count is not None
        ):
            raise ValueError("SLIEvents takes bad flags, or (unit events) bad positions: one")

    def __len__(self) -> int:
        return int(self.times.size)

    def bad_positions(self) -> IntArray:
        """Ascending positions of the bad events (unit events)."""
        if self.bad_at is not None:
            return self.bad_at
        assert self.bad is not None and self.count is None
        return np.flatnonzero(self.bad)

    def bad_weights(self) -> IntArray:
        """Bad events at each time (events with ``count``)."""
        assert self.bad is not None and self.count is not None
        return np.asarray(self.bad, dtype=np.int64)

    @property
    def events(self) -> int:
        """How many events (gaps, for ITL)."""
        return int(self.times.size if self.count is None else self.count.sum())


def _floats(records: Records, name: str) -> FloatArray:
    col = records[name]
    if isinstance(col, pd.Series):
        if col.dtype == np.float64:
            return col.to_numpy()  # no copy
        return col.to_numpy(dtype=np.float64, na_value=np.nan)
    return np.asarray(col, dtype=np.float64)


def latency_values(records: Records, signal: str) -> FloatArray:
    """TTFT, TPOT or e2e per request in seconds, NaN where undefined."""
    first = _floats(records, "first_token_s")
    if signal == "ttft":
        return first - _floats(records, "arrival_s")
    finished = _floats(records, "finished_s")
    if signal == "e2e":
        return finished - _floats(records, "arrival_s")
    out_tokens = _floats(records, "output_tokens")
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = (finished - first) / (out_tokens - 1.0)
    return np.where(out_tokens >= 2, tpot, np.nan)


def goodput_mask(records: Records, ttft_max: float, tpot_max: float) -> BoolArray:
    """Requests that finished ok with TTFT <= ``ttft_max`` and TPOT <= ``tpot_max`` seconds."""
    ttft = latency_values(records, "ttft")
    tpot = latency_values(records, "tpot")
    ok = _status_in(records, ("ok",))
    with np.errstate(invalid="ignore"):
        return np.asarray(ok & (ttft <= ttft_max) & (np.isnan(tpot) | (tpot <= tpot_max)))


_CHUNK = 1 << 19  # status codes compared a chunk at a time


def _status_codes(records: Records, values: tuple[str, ...]) -> tuple[Any, list[int]] | None:
    """For a categorical status column: its codes and the codes of ``values``; else None."""
    col = records["status"]
    if isinstance(col, pd.Series) and isinstance(col.dtype, pd.CategoricalDtype):
        col = col.array
    if not isinstance(col, pd.Categorical):
        return None
    return np.asarray(col.codes), [i for i, c in enumerate(col.categories) if str(c) in values]


def _codes_in(codes: Any, wanted: list[int], out: BoolArray, hit: BoolArray) -> BoolArray:
    """``codes`` among ``wanted`` (not empty), into ``out``: a comparison per wanted code, far
    cheaper than a lookup table indexed by code."""
    np.equal(codes, wanted[0], out=out)
    for code in wanted[1:]:
        out |= np.equal(codes, code, out=hit)
    return out


def _status_positions(
    records: Records, values: tuple[str, ...], chunk: int | None = None
) -> IntArray:
    """Ascending positions of the records whose status is one of ``values``; from a categorical
    column ``chunk`` codes at a time (default ``_CHUNK``), never a mask the length of the records."""
    step = _CHUNK if chunk is None else chunk
    found = _status_codes(records, values)
    if found is None:
        return np.flatnonzero(_status_in(records, values))
    codes, wanted = found
    if not wanted:
        return np.zeros(0, dtype=np.int64)
    buf = np.empty(min(step, codes.size), dtype=bool)
    hit = np.empty_like(buf)
    parts = [np.zeros(0, dtype=np.int64)]
    for i in range(0, codes.size, step):
        part = codes[i : i + step]
        at = np.flatnonzero(_codes_in(part, wanted, buf[: part.size], hit[: part.size]))
        if at.size:
            parts.append(at + i)
    return np.concatenate(parts)


def _status_in(records: Records, values: tuple[str, ...]) -> BoolArray:
    found = _status_codes(records, values)
    if found is None:
        col = records["status"]
        return np.isin(np.asarray(col, dtype=object).astype(str), values)
    codes, wanted = found
    if not wanted:
        return np.zeros(codes.size, dtype=bool)
    hit = np.empty(codes.size if len(wanted) > 1 else 0, dtype=bool)
    return _codes_in(codes, wanted, np.empty(codes.size, dtype=bool), hit)


def itl_counts(column: Any) -> tuple[BoolArray, IntArray]:
    """Per-request gap counts as a matrix: (rows that have them, counts of those rows, one
    column per ``ITL_BOUNDS`` bucket and one above). Takes a column of lists (DataFrame) or a
    pyarrow list array (streamed Parquet)."""
    width = len(ITL_BOUNDS) + 1
    if hasattr(column, "flatten") and hasattr(column, "is_null"):  # pyarrow (Chunked)Array
        present = ~np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        flat = np.asarray(column.flatten().to_numpy(zero_copy_only=False), dtype=np.int64)
        return present, flat.reshape(-1, width)
    values = np.asarray(column, dtype=object)
    present = np.asarray(~pd.isna(pd.Series(values)).to_numpy(), dtype=bool)
    rows = values[present]
    if rows.size == 0:
        return present, np.zeros((0, width), dtype=np.int64)
    return present, np.stack([np.asarray(v, dtype=np.int64) for v in rows])


def needed_columns(slo: ServiceLevelObjective) -> tuple[str, ...]:
    """The stored record columns ``sli_events`` reads for ``slo``."""
    cols = {"finished_s"}
    if slo.selector.traffic_class is not None:
        cols.add("traffic_class")
    if slo.selector.model is not None:
        cols.add("model")
    sli = slo.sli
    if isinstance(sli, AvailabilitySLI):
        cols.add("status")
    elif isinstance(sli, LatencySLI):
        cols.update(
            {
                "ttft": ("arrival_s", "first_token_s"),
                "tpot": ("first_token_s", "output_tokens"),
                "e2e": ("arrival_s",),
                "itl": ("itl_buckets",),
            }[sli.signal]
        )
    elif isinstance(sli, GoodputSLI):
        cols.update(("status", "arrival_s", "first_token_s", "output_tokens"))
    return tuple(sorted(cols))


def _itl_events(slo: ServiceLevelObjective, records: Records, mask: BoolArray) -> SLIEvents:
    sli = slo.sli
    assert isinstance(sli, LatencySLI)
    where = f"{slo.path}.sli"
    above = [i for i, b in enumerate(ITL_BOUNDS) if abs(b - sli.threshold_s) <= 1e-12 * max(1, b)]
    if not above:
        raise SLOSpecError(
            f"an ITL threshold must be one of the records' gap-bucket bounds (the exporter's ITL "
            f"buckets) to be evaluated gap by gap; {sli.threshold_s:g} s is not "
            f"({', '.join(f'{b:g}' for b in ITL_BOUNDS)})",
            path=f"{where}.threshold",
        )
    column = records.get("itl_buckets")
    present: BoolArray = np.zeros(len(mask), dtype=bool)
    counts: IntArray = np.zeros((0, len(ITL_BOUNDS) + 1), dtype=np.int64)
    if column is not None:
        present, counts = itl_counts(column)
    missing = int(np.count_nonzero(mask & ~present))
    if missing:
        raise SLOSpecError(
            f"an ITL SLO counts every inter-token gap, which needs the records' per-request gap "
            f"counts (field 'itl_buckets', written by fleetwatch telemetry); {missing} of "
            f"{int(mask.sum())} selected records have none",
            path=f"{where}.signal",
        )
    keep = mask[present]
    counts = np.asarray(counts[keep], dtype=np.int64)
    total = counts.sum(axis=1)
    bad = counts[:, above[0] + 1 :].sum(axis=1)
    times = _floats(records, "finished_s")[present][keep]
    has = total > 0
    return SLIEvents(times[has], bad[has], total[has])


def sli_events(
    slo: ServiceLevelObjective, records: Records, *, chunk: int | None = None
) -> SLIEvents:
    """The events of ``slo`` in ``records``. ``chunk``: status codes compared at a time when
    finding bad events by position (default 2**19); the events are the same for any chunk."""
    if chunk is not None and chunk < 1:
        raise ValueError(f"chunk must be >= 1 record, got {chunk}")
    n = len(records["finished_s"])
    mask: BoolArray | None = None
    for wanted, column in (
        (slo.selector.traffic_class, "traffic_class"),
        (slo.selector.model, "model"),
    ):
        if wanted is not None:
            sel = np.asarray(np.asarray(records[column], dtype=object) == wanted, dtype=bool)
            mask = sel if mask is None else mask & sel
    sli = slo.sli
    if isinstance(sli, LatencySLI) and sli.signal == "itl":
        return _itl_events(slo, records, np.ones(n, dtype=bool) if mask is None else mask)
    if isinstance(sli, AvailabilitySLI):
        times = _floats(records, "finished_s")
        if mask is None:
            return SLIEvents(times, None, bad_at=_status_positions(records, sli.bad, chunk))
        bad = _status_in(records, sli.bad)
    elif isinstance(sli, LatencySLI):
        times = _floats(records, EVENT_TIME[sli.signal])
        value = latency_values(records, sli.signal)
        defined = ~np.isnan(value)
        mask = defined if mask is None else mask & defined
        bad = value > sli.threshold_s
    elif isinstance(sli, GoodputSLI):
        times = _floats(records, "finished_s")
        bad = ~goodput_mask(records, sli.ttft_s, sli.tpot_s)
    else:
        raise _not_over_records(slo)
    if mask is None or mask.all():
        return SLIEvents(times, np.asarray(bad, dtype=bool))
    return SLIEvents(times[mask], np.asarray(bad[mask], dtype=bool))


def _not_over_records(slo: ServiceLevelObjective) -> SLOSpecError:
    return SLOSpecError(
        "a ratio SLI names raw Prometheus metrics and cannot be evaluated over request "
        "records; evaluate it in Prometheus",
        path=f"{slo.path}.sli",
    )


_LATENCY_SQL = {signal: DERIVED[f"{signal}_s"] for signal in ("ttft", "tpot", "e2e")}
"""``latency_values`` as SQL over a query engine's ``records`` view (NULL where undefined)."""


@dataclass(frozen=True, slots=True)
class EventSQL:
    """An SLO's events as SQL over the ``records`` view: the events are the rows ``where``
    keeps, each at ``time``, bad where ``bad`` is true (``sli_events``, row for row). ``bad``
    is a ``FILTER`` condition, which keeps a row only where it is true: NULL is not bad, with
    no ``coalesce`` to compute a row (over a dictionary-coded status, DuckDB decides ``IN`` once
    a distinct value, a ``coalesce`` of it once a row: a tenth of a backtest's scan)."""

    time: str
    where: str
    bad: str


def sli_sql(slo: ServiceLevelObjective) -> EventSQL:
    """``sli_events`` of ``slo`` as SQL (availability, latency, goodput; an ITL SLO reads the
    per-request gap counts, not in the view, and a ratio SLI is refused as there)."""
    conds = []
    if slo.selector.traffic_class is not None:
        conds.append(f"traffic_class = {sql_string(slo.selector.traffic_class)}")
    if slo.selector.model is not None:  # a record naming no model is the model ""
        model = slo.selector.model
        conds.append(f"model = {sql_string(model)}" if model else "coalesce(model, '') = ''")
    sli = slo.sli
    if isinstance(sli, LatencySLI) and sli.signal == "itl":
        raise SLOSpecError("an ITL SLO reads itl_buckets: use --engine memory", path=slo.path)
    if isinstance(sli, AvailabilitySLI):
        time = "finished_s"
        bad = f"status IN ({', '.join(sql_string(b) for b in sli.bad)})" if sli.bad else "FALSE"
    elif isinstance(sli, LatencySLI):
        time = EVENT_TIME[sli.signal]
        value = _LATENCY_SQL[sli.signal]
        conds.append(f"{value} IS NOT NULL")
        bad = f"{value} > {float(sli.threshold_s)!r}"
    elif isinstance(sli, GoodputSLI):
        time = "finished_s"
        ttft, tpot = _LATENCY_SQL["ttft"], _LATENCY_SQL["tpot"]
        good = (
            f"status = 'ok' AND {ttft} <= {float(sli.ttft_s)!r} "
            f"AND ({tpot} IS NULL OR {tpot} <= {float(sli.tpot_s)!r})"
        )
        bad = f"NOT coalesce({good}, FALSE)"  # an undefined TTFT is not good
    else:
        raise _not_over_records(slo)
    conds.append(f"{time} IS NOT NULL")
    return EventSQL(time, " AND ".join(conds), bad)
