"""Query engines over a record dataset: the heavy reductions run where the records are.

An engine exposes one SQL view, ``records``, over the files of a dataset: the stored columns of
the record schema (``COLUMNS``, typed the same in every engine) with the dataset's filter
applied. The reductions an analysis needs are portable SQL over that view (``reductions``): only
counts, sums, minima, maxima and fixed-bucket histograms, so DuckDB and Spark compute the same
exact tables, and the statistics run on those reduced tables in pandas.

- ``duckdb`` (the default): in process, out of core, over local files.
- ``spark``: a Spark cluster through PySpark (a ``spark://`` master or a Spark Connect ``sc://``
  URL), for datasets beyond one machine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    import pandas as pd

__all__ = [
    "COLUMNS",
    "ENGINES",
    "LABELS",
    "REQUIRED",
    "Engine",
    "default_sql",
    "implausible",
    "view_columns",
]

ENGINES = ("duckdb", "spark", "memory")
"""What ``--engine`` accepts: ``memory`` reads every record into pandas (the reference path)."""

COLUMNS: dict[str, str] = {
    "request_id": "VARCHAR",
    "replica": "VARCHAR",
    "model": "VARCHAR",
    "traffic_class": "VARCHAR",
    "tenant": "VARCHAR",
    "arrival_s": "DOUBLE",
    "scheduled_s": "DOUBLE",
    "first_token_s": "DOUBLE",
    "finished_s": "DOUBLE",
    "intended_s": "DOUBLE",
    "prompt_tokens": "BIGINT",
    "output_tokens": "BIGINT",
    "cached_prompt_tokens": "BIGINT",
    "preemptions": "BIGINT",
    "preemption_stall_s": "DOUBLE",
    "max_itl_s": "DOUBLE",
    "status": "VARCHAR",
    "finish_reason": "VARCHAR",
    "error_type": "VARCHAR",
    "trace_id": "VARCHAR",
}
"""The columns of the ``records`` view and their SQL types (``itl_buckets`` is not read)."""


LABELS = ("replica", "model", "status", "traffic_class")
"""The string columns an analysis groups by (categorical in a frame)."""
REQUIRED = ("replica", "arrival_s", "finished_s")
"""Columns every record has: a row without one is not a record (a foreign file)."""


def default_sql(column: str) -> str | None:
    """The record schema's default of ``column`` as a SQL literal (``'ok'``, ``0``, ``0.0``);
    None when the column has none (a value left out is NULL)."""
    from fleetwatch.core.records.schema import DEFAULTS

    if column not in DEFAULTS:
        return None
    d = DEFAULTS[column]
    return f"'{d}'" if isinstance(d, str) else repr(d)


def view_columns(columns: Sequence[str]) -> str:
    """The select list of the ``records`` view: each column, a value a file left out read as
    the record schema's default (as ``records.io.read_records`` fills it)."""
    out = []
    for c in columns:
        d = default_sql(c)
        out.append(c if d is None else f"coalesce({c}, {d}) AS {c}")
    return ", ".join(out)


def implausible(columns: Sequence[str]) -> str:
    """A SQL condition true for a row that ``records.validate.validate_frame`` would refuse
    (negative counts or durations, times that cannot be seconds, requests longer than a week,
    times out of order), over the ``columns`` read; ``FALSE`` when none of them is checked. A
    file holding such a row is then read by the project's own reader for its exact message."""
    from fleetwatch.core.records.schema import MAX_REQUEST_S, MAX_TIMESTAMP_S, TIME_EPS

    have = set(columns)
    out = [
        f"{c} < 0"
        for c in (
            "prompt_tokens",
            "output_tokens",
            "cached_prompt_tokens",
            "preemptions",
            "preemption_stall_s",
            "max_itl_s",
        )
        if c in have
    ]
    out += [f"{c} > {MAX_REQUEST_S!r}" for c in ("preemption_stall_s", "max_itl_s") if c in have]
    if {"cached_prompt_tokens", "prompt_tokens"} <= have:
        out.append("cached_prompt_tokens > prompt_tokens")
    times = [
        c
        for c in ("arrival_s", "scheduled_s", "first_token_s", "finished_s", "intended_s")
        if c in have
    ]
    out += [f"abs({c}) > {MAX_TIMESTAMP_S!r}" for c in times]
    if {"arrival_s", "finished_s"} <= have:
        out.append(f"finished_s - arrival_s > {MAX_REQUEST_S!r}")
    order = ("arrival_s", "scheduled_s", "first_token_s", "finished_s")
    for i, early in enumerate(order):
        for late in order[i + 1 :]:
            if {early, late} <= have:
                out.append(f"{late} < {early} - {TIME_EPS!r}")
    return " OR ".join(f"({c})" for c in out) or "FALSE"


class Engine(Protocol):
    """A query engine holding the ``records`` view of one dataset."""

    name: str
    columns: tuple[str, ...]
    """The stored columns the ``records`` view holds."""
    counted: tuple[int, int] | None
    """Rows in the dataset and rows the filter keeps, once checked (``check``, or a command's
    first query: ``records.engine.folded``); None before."""
    in_file_order: bool
    """Rows a query does not sort come in the files' order, the same on every run (so a pass
    that sums floats in row order need not sort them)."""

    def query(self, sql: str) -> pd.DataFrame:
        """The result of ``sql`` (portable SQL over the view ``records``) as a DataFrame."""
        ...

    def batches(self, sql: str, rows: int) -> Iterator[pd.DataFrame]:
        """The result of ``sql``, about ``rows`` rows at a time (memory: one batch)."""
        ...

    def frames(
        self,
        columns: Sequence[str],
        where: str | None = None,
        order: Sequence[str] = (),
        rows: int = 1 << 18,
        replicas: Sequence[str] = (),
    ) -> Iterator[pd.DataFrame]:
        """``records``' ``columns`` (stored, or derived: ``reductions.DERIVED``) of the rows
        ``where`` (SQL) keeps, sorted by ``order`` (columns), from one query, brought to this
        process about ``rows`` rows at a time where the engine streams (DuckDB; Spark brings
        them in one piece), the ``LABELS`` columns categorical: a caller bounds a call's
        rows by ``where``. ``replicas``: when ``where`` keeps only these replicas' rows, an
        engine may read only the files that hold them."""
        ...

    def scalar(self, sql: str) -> object:
        """The one value ``sql`` returns."""
        ...

    def check(self) -> tuple[int, int]:
        """Rows in the dataset and rows the filter keeps (also kept as ``counted``); a file whose
        rows are not records is a ``RecordError`` naming it."""
        ...

    def vouched(self) -> int | None:
        """The dataset's rows when every file's footer vouches for its rows, checked when written
        (``core.records.write.CHECKED_KEY``): they need no check again; None otherwise."""
        ...

    def finished_range(self) -> tuple[float, float] | None:
        """The dataset's first and last ``finished_s`` from its files' statistics, where they
        vouch for their rows (``vouched``) and there is no filter; None otherwise."""
        ...

    def share_memory(self, parts: int) -> None:
        """This engine is one of ``parts`` working at once in this process (compare's two
        runs): hold at most its share of the memory an engine may use here."""
        ...

    def close(self) -> None:
        """Release the engine (a session, a connection)."""
        ...
