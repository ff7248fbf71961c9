"""DuckDB in process: the ``records`` view over a dataset's files, read where they lie.

JSON lines are read with the record schema's columns given (no inference pass, a key a file lacks
reads as NULL): as lines of text, each small file whole, whose values ``json_extract_string``
takes where every line allows it (``lines``: a third less CPU than the same lines read by
DuckDB's CSV reader, which reads them for a quarter less than ``read_json``), else by
``read_json``. Parquet files are read by name, a column a file lacks read as NULL. Both are cast
to the types of ``COLUMNS`` so every file reads alike. When the dataset has JSON lines, the
columns an analysis reads are materialised once into a table (parsing JSON is most of the cost,
so each reduction does not parse it again), held in a database file of the engine's own
temporary folder (``_SCANNED``, removed when the engine closes, or by the next engine where its
process was killed: ``scratch``): DuckDB writes it compressed a row group at a time, so memory
stays bounded whatever the rows, where a temporary table past the memory limit is spilled whole
and read back (an hour of 200 replicas, 7.2 M rows of 11 columns: 44.6 s of CPU and 790 MB as a
temporary table, 32.8 s and 634 MB in the file, its queries four times cheaper; opening a small
dataset costs some 15 ms more). Columns a caller reads for a handful of rows only (the ids,
``DEFERRED``) can be left out of that table and read again from the files holding the rows
asked for (``with_deferred``). Parquet is scanned in place by every query; its footers are read
once, when the engine opens (``footers``): each file's schema (files of one schema are read by
one scan), stamp and statistics (the columns read without a default to fill, the replicas a file
may hold, whether the files vouch for their rows: ``vouched``).

Errors name the file: a line that is not JSON is DuckDB's own message (it names the file and the
byte), a file of JSON that is not records (no ``replica``, ``arrival_s`` or ``finished_s``: ``REQUIRED``)
is found by ``check`` and named.
"""

from __future__ import annotations

import bisect
import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fleetwatch.core.records.schema import RecordError
from fleetwatch.core.records.write import (
    CHECKED_KEY,
    FINGERPRINTED,
    PARQUET_SUFFIXES,
    TALLIED,
    Tallies,
)
from fleetwatch.records.engine import (
    COLUMNS,
    LABELS,
    REQUIRED,
    default_sql,
    implausible,
    view_columns,
)
from fleetwatch.records.engine.footers import Footers, Vouched, one_value, read_footers
from fleetwatch.records.engine.lines import gone, lines_sql, refused
from fleetwatch.records.engine.scratch import Scratch
from fleetwatch.records.filters import sql_list, sql_string

if TYPE_CHECKING:
    import duckdb
    import pandas as pd
    import pyarrow as pa

    from fleetwatch.records.filters import RecordFilter
    from fleetwatch.records.remote import Remote

__all__ = ["DEFERRED", "MEMORY_LIMIT", "DuckEngine"]

MEMORY_LIMIT = os.environ.get("FLEETWATCH_DUCKDB_MEMORY", "512MB")
"""DuckDB's own memory limit (it spills past it); the process adds Python and pandas."""
_SCANNED = "fw_scanned.scanned"
"""The JSON lines' table: in a database file attached as ``fw_scanned`` (the module's
docstring)."""


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


DEFERRED = ("request_id", "trace_id")
"""The ids: columns a caller that reads them for a handful of rows (the requests to look up) asks
a table of JSON lines not to hold (``DuckEngine(defer=...)``): a string a row, the costliest to
parse and keep (a fifth of the table's CPU for the tail's columns at 1.2 M rows). They are read
again, from the files that hold the rows asked for, when a query asks for them
(``with_deferred``)."""

_MAX_SCHEMAS = 16
"""Parquet schemas read each by a scan of its own; a dataset of more is read by one scan that
matches columns by name in every file."""


def _bytes(limit: str) -> int | None:
    """``512MB``, ``1.5GiB``… as bytes (DuckDB's spelling of a memory limit); None otherwise."""
    text = limit.strip().lower().replace(" ", "")
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    try:
        value = float(number)
    except ValueError:
        return None
    unit = _UNITS.get(text[len(number) :])
    return None if unit is None or value <= 0 else int(value * unit)


_LARGEST_OBJECT = 1 << 20
"""``read_json``'s ``maximum_object_size``: the longest line it reads."""


def _read_json(files: Sequence[Path], columns: Sequence[str], options: str = "") -> str:
    """``read_json`` of the JSON lines ``files``, given ``columns`` (their ``COLUMNS`` types),
    with ``options`` (``, name=value``) added."""
    spec = "{" + ", ".join(f"{sql_string(c)}: '{COLUMNS[c]}'" for c in columns) + "}"
    return (
        f"read_json({sql_list(files)}, format='newline_delimited', columns={spec}, "
        f"maximum_object_size={_LARGEST_OBJECT}{options})"
    )


class DuckEngine:
    """The ``records`` view of ``files`` (only rows ``where`` keeps) in an in-process DuckDB."""

    name = "duckdb"

    def __init__(
        self,
        files: Sequence[Path],
        *,
        where: RecordFilter | None = None,
        columns: Sequence[str] | None = None,
        threads: int | None = None,
        remote: Sequence[Remote] = (),
        defer: Sequence[str] = (),
    ) -> None:
        import duckdb

        self.files = tuple(files)
        self.where = where
        self.counted: tuple[int, int] | None = None
        self.json_read: str | None = None
        """How the JSON lines were read: ``typed``, ``lines`` or ``read_json``
        (``records.engine.lines``); None where there are none."""
        self._enums: set[str] = set()
        self._tmp = Scratch()  # what a killed engine left swept first
        self._threads = threads or max(os.cpu_count() or 1, 1)
        self.con: duckdb.DuckDBPyConnection = duckdb.connect(
            config={
                "memory_limit": MEMORY_LIMIT,
                "temp_directory": self._tmp.name,
                "preserve_insertion_order": True,  # rows in file order: analyses repeat exactly
                "threads": self._threads,
            }
        )
        self.con.execute("SET parquet_metadata_cache = true")  # footers read once, not a query
        try:
            self._open(where, columns, remote, defer)
        except BaseException:  # a bad file, or stopped: nothing left in the temporary folder
            with contextlib.suppress(Exception):  # the error said is the opening's
                self.close()
            raise

    def _open(
        self,
        where: RecordFilter | None,
        columns: Sequence[str] | None,
        remote: Sequence[Remote],
        defer: Sequence[str],
    ) -> None:
        """The dataset's tables and views: the JSON lines' columns into ``_SCANNED``, the
        Parquet files' footers, the object stores' datasets registered."""
        import duckdb

        filtered = () if where is None else where.columns()
        wanted = (
            list(COLUMNS)
            if columns is None
            else list(dict.fromkeys([*REQUIRED, *columns, *filtered]))
        )
        jsonl = [p for p in self.files if p.suffix.lower() not in PARQUET_SUFFIXES]
        parquet = [p for p in self.files if p.suffix.lower() in PARQUET_SUFFIXES]
        self._jsonl = jsonl
        self.deferred: tuple[str, ...] = ()
        if jsonl and not remote:
            self.deferred = tuple(c for c in wanted if c in defer and c not in filtered)
        self.columns = tuple(c for c in wanted if c not in self.deferred)
        parts = []
        try:
            if jsonl:  # read first, so a bad JSON-lines file is named before any Parquet file
                # in parallel, in no set order: readers that sum floats order their rows
                self.con.execute("SET preserve_insertion_order = false")
                numbered = ", file_index AS fw_json" if self.deferred else ""
                held = sql_string(os.path.join(self._tmp.name, "scanned.duckdb"))
                self.con.execute(f"ATTACH {held} AS {_SCANNED.split('.')[0]}")
                table = f"CREATE TABLE {_SCANNED} AS SELECT {view_columns(self.columns)}{numbered}"
                read = None
                for typed in (True, False):  # read as lines of text, for less CPU (``lines``)
                    quick = lines_sql(
                        jsonl,
                        {c: COLUMNS[c] for c in self.columns},
                        numbered=bool(self.deferred),
                        parts=self._threads,  # read at once
                        typed=typed,
                    )
                    try:
                        self.con.execute(f"{table} FROM {quick.sql} AS q")
                    except refused():
                        # the typed reading refuses a line lacking a key, which the untyped
                        # reads; a line both refuse is read_json's to read or to name
                        self.con.execute(f"DROP TABLE IF EXISTS {_SCANNED}")
                        continue
                    if not gone(quick.whole):  # (a file gone since it was listed: named)
                        read = "typed" if typed else "lines"
                    break
                if read is None:
                    self.con.execute(f"DROP TABLE IF EXISTS {_SCANNED}")
                    self.con.execute(f"{table} FROM {_read_json(jsonl, wanted)}")
                self.json_read = read or "read_json"
                self.con.execute("SET preserve_insertion_order = true")
                # the file of a row is looked up only when a row is at fault (``_file_of``)
                parts.append(
                    f"SELECT {', '.join(self.columns)}, NULL::VARCHAR AS filename FROM {_SCANNED}"
                )
        except duckdb.Error as exc:
            raise _record_error(exc, jsonl) from None
        self._scans: list[tuple[list[Path], set[str], bool]] = []
        self._footers: Footers | None = None
        if parquet:
            # the statistics of the columns read: those the checks read and those tallied
            # (``vouched``), those with a default (``_without_nulls``), the labels (``pinned``)
            # and the replica (``_holding``)
            stamped = {*FINGERPRINTED, *TALLIED, *LABELS}
            stats = {c for c in wanted if c in stamped or default_sql(c) is not None}
            self._footers = read_footers(parquet, CHECKED_KEY.encode(), stats)
            groups = (
                self._parquet_groups(parquet) if self._footers is None else self._footers.groups()
            )
            mixed = groups is None or len(groups) > _MAX_SCHEMAS  # one scan matching names
            for group in [parquet] if mixed or groups is None else groups:
                self._scans.append((group, self._parquet_columns(group, union=mixed), mixed))
        self._parts = parts  # the JSON lines' table
        for i, store in enumerate(remote):
            import pyarrow.dataset as ds

            from fleetwatch.records.remote import arrow_schema

            data = ds.dataset(
                list(store.keys), filesystem=store.fs, format="parquet", schema=arrow_schema(wanted)
            )
            self.con.register(f"remote_{i}", data)
            self._parts.append(
                f"SELECT {view_columns(self.columns)}, {sql_string(store.name)} AS filename "
                f"FROM remote_{i}"
            )
        self._full = self._without_nulls()
        self._bounds: (
            tuple[dict[str, list[Path]], list[tuple[Path, str | None, str | None]]] | None
        ) = None  # each file's replicas (``_holding``)
        self._placed: dict[int, dict[Path, list[int]]] = {}
        self._vouched: Vouched | Literal[False] | None = False  # False: not read yet
        # JSON lines are read in parallel in no set order, object storage through Arrow
        self.in_file_order = not jsonl and not remote
        try:
            self._views()
        except duckdb.Error as exc:
            raise _record_error(exc, self.files) from None

    def _views(self) -> None:
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW everything AS {self._everything(None)}")
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW records AS {self._records('everything')}")

    def _everything(
        self,
        keep: set[Path] | None,
        columns: Sequence[str] | None = None,
        jsonl: Sequence[Path] | None = None,
    ) -> str:
        """Every row of the dataset (of the Parquet files ``keep`` holds, when given), each
        column cast to its type, a value a file left out read as the record schema's default
        (``view_columns``), with the file it came from. Each part fills its own: a Parquet
        column whose statistics count no null is read as it is (a ``coalesce`` over a
        dictionary-encoded column costs more than reading it). ``columns`` (the view's when
        None; ``deferred`` ones among them only with ``jsonl``): given ``jsonl``, the JSON lines
        are those files read again, not the table."""
        columns = self.columns if columns is None else columns
        parts = list(self._parts)
        if jsonl is None:
            if tuple(columns) != self.columns:
                raise ValueError("columns other than the view's need the JSON lines to read")
        else:
            parts = (
                [
                    f"SELECT {view_columns(columns)}, NULL::VARCHAR AS filename "
                    f"FROM {_read_json(jsonl, columns)}"
                ]
                if jsonl
                else []
            )
        for scan, (group, have, mixed) in enumerate(self._scans):
            if keep is not None:
                at = self._positions(scan)  # the scan's own files kept, in their order
                group = [group[i] for i in sorted(i for p in keep for i in at.get(p, ()))]
                if not group:
                    continue
            cols = [self._filled(c, c in have) for c in columns]
            union = "union_by_name=true, " if mixed else ""
            parts.append(
                f"SELECT {', '.join(cols)}, filename FROM read_parquet({sql_list(group)}, "
                f"{union}filename=true, hive_partitioning=false)"
            )
        if not parts:
            nulls = ", ".join(f"NULL::{COLUMNS[c]} AS {c}" for c in columns)
            parts.append(f"SELECT {nulls}, NULL::VARCHAR AS filename WHERE FALSE")
        return " UNION ALL ".join(parts)

    def _positions(self, scan: int) -> dict[Path, list[int]]:
        """Each file of the Parquet scan ``scan`` by its places in the scan (made once)."""
        if scan not in self._placed:
            placed: dict[Path, list[int]] = {}
            for i, p in enumerate(self._scans[scan][0]):
                placed.setdefault(p, []).append(i)
            self._placed[scan] = placed
        return self._placed[scan]

    def _filled(self, column: str, stored: bool) -> str:
        """A Parquet scan's select item of ``column`` (``stored``: the files hold it)."""
        kind = COLUMNS[column]
        default = default_sql(column)
        if not stored:
            return f"CAST({'NULL' if default is None else default} AS {kind}) AS {column}"
        if default is None or column in self._full:
            return f"CAST({column} AS {kind}) AS {column}"
        return f"coalesce(CAST({column} AS {kind}), {default}) AS {column}"

    def _without_nulls(self) -> set[str]:
        """The columns with a default that every Parquet file holds, its footer counting no
        null in any row group: read as they are, with no ``coalesce`` (over a
        dictionary-encoded column it costs more than reading it). None of them where the
        footers were not read."""
        if self._footers is None:
            return set()
        files = self._footers.files
        return {
            c
            for c in self.columns
            if default_sql(c) is not None
            and all((s := f.stats.get(c)) is not None and s.nulls == 0 for f in files)
        }

    def _records(self, rows: str, columns: Sequence[str] | None = None) -> str:
        """The ``records`` view over ``rows`` (defaults filled): the filter applied."""
        cond = "TRUE" if self.where is None else self.where.sql()
        named = ", ".join(self.columns if columns is None else columns)
        return f"SELECT {named} FROM {rows} AS filled WHERE {cond}"

    def with_deferred(self, where: str, replicas: Sequence[str] = ()) -> str:
        """A ``FROM`` item of ``records``' rows that ``where`` (SQL over the view's columns)
        may keep, with the ``deferred`` columns too: the JSON-lines files holding such a row
        (numbered in the table) read again with every column, the Parquet files (those that
        may hold ``replicas``, when given) read in place. ``records`` where nothing is
        deferred."""
        if not self.deferred:
            return "records"
        import duckdb

        cond = "TRUE" if self.where is None else self.where.sql()
        try:
            numbers = self.con.execute(
                f"SELECT DISTINCT fw_json FROM {_SCANNED} AS filled WHERE ({cond}) AND ({where}) "
                "ORDER BY 1"
            ).fetchall()
        except duckdb.Error as exc:
            raise _record_error(exc, self.files, search=False) from None
        jsonl = [self._jsonl[int(n)] for (n,) in numbers]
        columns = (*self.columns, *self.deferred)
        keep = self._holding(replicas) if replicas else None
        rows = self._everything(keep, columns, jsonl)
        return f"({self._records(f'({rows})', columns)}) AS part"

    def _holding(self, replicas: Sequence[str]) -> set[Path] | None:
        """The Parquet files that may hold a row of one of ``replicas``: by the least and
        greatest ``replica`` of each file's footer (None, every file, where the footers were
        not read; a file whose row groups do not all state them may hold any). A file of one
        replica is looked up by its name: a group's narrowing costs its own files, not a pass
        over the dataset's."""
        if self._footers is None:
            return None
        if self._bounds is None:
            alone: dict[str, list[Path]] = {}
            ranged: list[tuple[Path, str | None, str | None]] = []
            for f in self._footers.files:
                s = f.stats.get("replica")
                low, high = (s.low, s.high) if s is not None and s.bounded else (None, None)
                if not (isinstance(low, str) and isinstance(high, str)):
                    ranged.append((f.path, None, None))
                elif low == high:
                    alone.setdefault(low, []).append(f.path)
                else:
                    ranged.append((f.path, low, high))
            self._bounds = (alone, ranged)
        alone, ranged = self._bounds
        names = sorted(set(replicas))
        kept = {p for r in names for p in alone.get(r, ())}
        for path, low, high in ranged:
            if low is None or high is None:
                kept.add(path)
                continue
            at = bisect.bisect_left(names, low)  # the first name at or above the least
            if at < len(names) and names[at] <= high:
                kept.add(path)
        return kept

    def _parquet_groups(self, files: Sequence[Path]) -> list[list[Path]] | None:
        """``files`` grouped by their Parquet schema (names, types, order), in order of first
        appearance: each group is read by one scan that binds one file's schema (naming each
        file's columns apart, ``union_by_name``, costs a read of every file's footer each query),
        and a dataset of one writer is one group. None when a file's schema is not told apart."""
        import duckdb

        try:
            rows = self.con.execute(
                "SELECT file_name, name, type, repetition_type, converted_type, logical_type "
                f"FROM parquet_schema({sql_list(files)})"
            ).fetchall()
        except duckdb.Error as exc:
            raise _record_error(exc, self.files) from None
        shapes: dict[str, list[tuple[object, ...]]] = {}
        for row in rows:
            shapes.setdefault(str(row[0]), []).append(tuple(row[1:]))
        if any(str(f) not in shapes for f in files):  # a name DuckDB spells otherwise
            return None
        groups: dict[tuple[tuple[object, ...], ...], list[Path]] = {}
        for f in files:
            groups.setdefault(tuple(shapes[str(f)]), []).append(f)
        return list(groups.values())

    def _parquet_columns(self, files: Sequence[Path], *, union: bool) -> set[str]:
        """The top-level columns of ``files``: of every one when ``union``, else of the first
        (the group's schema)."""
        import duckdb

        if self._footers is not None:
            return self._footers.names(files if union else files[:1])
        read = f"read_parquet({sql_list(files if union else files[:1])}, "
        try:
            rows = self.con.execute(
                f"DESCRIBE SELECT * FROM {read}{'union_by_name=true, ' if union else ''}"
                "hive_partitioning=false)"
            ).fetchall()
        except duckdb.Error as exc:
            raise _record_error(exc, self.files) from None
        return {str(r[0]) for r in rows}

    def query(self, sql: str) -> pd.DataFrame:
        import duckdb

        try:
            frame: pd.DataFrame = self.con.execute(sql).df()
        except duckdb.Error as exc:
            raise _record_error(exc, self.files, search=False) from None
        return frame

    def batches(self, sql: str, rows: int) -> Iterator[pd.DataFrame]:
        """The result of ``sql``, ``rows`` rows at a time (memory: one batch)."""
        import duckdb

        try:
            reader = self.con.sql(sql).to_arrow_reader(rows)
            for batch in reader:
                yield batch.to_pandas()
        except duckdb.Error as exc:
            raise _record_error(exc, self.files, search=False) from None

    def arrow_batches(self, sql: str, rows: int) -> Iterator[pa.RecordBatch]:
        """The result of ``sql`` as Arrow record batches of at least ``rows`` rows but the last
        (memory: about twice ``rows`` rows, the pieces and their joined copy; no conversion to
        pandas, for a caller that works on the columns' arrays). Scanning in parallel, DuckDB hands a batch a file (tens of thousands of rows
        from a compacted dataset's): they are put together here, so a caller's work a batch
        is paid a few hundred times over a hundred million rows, not thousands."""
        import duckdb

        held: list[pa.RecordBatch] = []
        count = 0
        try:
            for batch in self.con.sql(sql).to_arrow_reader(rows):
                held.append(batch)
                count += batch.num_rows
                if count >= rows:
                    yield _joined(held)
                    held, count = [], 0
        except duckdb.Error as exc:
            raise _record_error(exc, self.files, search=False) from None
        if held:
            yield _joined(held)

    def by_file(self, column: str) -> tuple[str, list[str | None]] | None:
        """Where every Parquet file's rows hold one value of ``column`` (its footer's statistics
        say one value and no null: a compacted dataset's files, one replica each): the
        ``records`` view as a source with each row's file as a number, ``fw_file`` (a
        ``FROM`` item), and each file's value by that number (None for a file of no rows). So
        a row's label is an integer read with no string, for counting in this process. None
        where the dataset holds JSON lines or object storage, or Parquet files read in more
        than one scan (files of a few schemas, each read apart)."""
        if self._parts or len(self._scans) != 1 or self._footers is None:
            return None
        group, have, mixed = self._scans[0]
        said = {f.path: f for f in self._footers.files}
        values: list[str | None] = []
        for path in group:
            footer = said.get(path)
            value = None if footer is None else one_value(footer.stats.get(column))
            if value is None and (footer is None or footer.rows):
                return None
            values.append(value)
        cols = ", ".join(self._filled(c, c in have) for c in self.columns)
        union = "union_by_name=true, " if mixed else ""
        rows = (
            f"(SELECT {cols}, file_index AS fw_file FROM read_parquet({sql_list(group)}, "
            f"{union}hive_partitioning=false))"
        )
        cond = "TRUE" if self.where is None else self.where.sql()
        source = f"(SELECT {', '.join(self.columns)}, fw_file FROM {rows} AS filled WHERE {cond})"
        return f"{source} AS records", values

    def frames(
        self,
        columns: Sequence[str],
        where: str | None = None,
        order: Sequence[str] = (),
        rows: int = 1 << 18,
        replicas: Sequence[str] = (),
    ) -> Iterator[pd.DataFrame]:
        """``records``' ``columns`` (stored or ``DERIVED``; a ``deferred`` one read again from the
        files holding the rows, ``with_deferred``) of the rows ``where`` (SQL) keeps, in
        ``order`` (columns; the files' order when none), ``rows`` rows at a time from one
        query (DuckDB sorts out of core), the label columns categorical (a code a row, not a
        string; every batch and every call has the same categories: the column's values, sorted).
        ``replicas``: ``where`` keeps rows of these replicas only, so only the Parquet files that
        may hold them are opened (a query over thousands of files otherwise costs a look at
        every file's statistics, more than reading one replica's rows)."""
        import duckdb

        sql = self._frame_sql(columns, where, order, replicas)
        try:
            for batch in self.con.sql(sql).to_arrow_reader(rows):
                yield batch.to_pandas()
        except duckdb.Error as exc:
            raise _record_error(exc, self.files, search=False) from None

    def table(
        self,
        columns: Sequence[str],
        where: str | None = None,
        order: Sequence[str] = (),
        replicas: Sequence[str] = (),
    ) -> pa.Table:
        """``frames``' rows in one Arrow table, no conversion to pandas (the label columns
        dictionary-encoded): for a caller that bounds the rows by ``where`` and works on the
        columns' arrays."""
        import duckdb

        sql = self._frame_sql(columns, where, order, replicas)
        try:
            return self.con.sql(sql).to_arrow_table()
        except duckdb.Error as exc:
            raise _record_error(exc, self.files, search=False) from None

    def _frame_sql(
        self,
        columns: Sequence[str],
        where: str | None,
        order: Sequence[str],
        replicas: Sequence[str],
    ) -> str:
        """The query of ``frames`` and ``table``: the label columns cast to an ``ENUM`` of the
        column's values (made once a column for the engine's life)."""
        import duckdb

        from fleetwatch.records.engine.reductions import DERIVED

        labels = [c for c in columns if c in LABELS]
        try:
            for c in labels:
                if c not in self._enums:  # once a column for the engine's life
                    pinned = self.pinned(c)
                    values = (
                        f"SELECT DISTINCT {c} FROM records WHERE {c} IS NOT NULL ORDER BY 1"
                        if pinned is None
                        else ", ".join(sql_string(v) for v in pinned)
                    )
                    self.con.execute(f"CREATE TYPE fw_{c} AS ENUM ({values})")
                    self._enums.add(c)
        except duckdb.Error as exc:
            raise _record_error(exc, self.files, search=False) from None
        select = ", ".join(
            f"CAST({c} AS fw_{c}) AS {c}"
            if c in labels
            else f"{DERIVED[c]} AS {c}"
            if c in DERIVED
            else c
            for c in columns
        )
        cond = "" if where is None else f" WHERE {where}"
        sort = f" ORDER BY {', '.join(order)}" if order else ""
        source = "records"
        if any(c in self.deferred for c in columns):
            source = self.with_deferred(where or "TRUE", replicas)
        elif replicas and self._scans:
            keep = self._holding(replicas)
            source = f"({self._records(f'({self._everything(keep)})')}) AS part"
        return f"SELECT {select} FROM {source}{cond}{sort}"

    def pinned(self, column: str) -> list[str] | None:
        """The values of ``column`` in the dataset, sorted, where the footers say them without
        a scan: Parquet files only, no filter, and each file's statistics of the column one
        value and no null (a compacted dataset's files, one replica each); None otherwise."""
        if self._parts or self.where is not None or self._footers is None:
            return None
        return self._footers.pinned(column)

    def spans(self) -> dict[tuple[str, str], tuple[float, float]] | None:
        """Per (model, replica) the first ``arrival_s`` and the last ``finished_s`` of its rows,
        from the footers' statistics, where they say them exactly (``Footers.spans``: a
        compacted dataset's files): Parquet files only, no filter; None otherwise (a query
        finds them)."""
        if self._parts or self.where is not None or self._footers is None:
            return None
        return self._footers.spans()

    def tallies(self) -> list[Tallies | None] | None:
        """Each Parquet file's ``Tallies``, by the number ``by_file`` gives its rows (None for a
        file of no rows), from its stamp: where the engine reads every ``TALLIED`` column and
        the files vouch for their rows (``vouched``: each of those columns' nulls and extremes
        in the footer as the stamp says them), with no filter, read in one scan, and every
        stamp holding its tallies; None otherwise (a query counts them)."""
        if self.where is not None or len(self._scans) != 1 or not set(TALLIED) <= set(self.columns):
            return None
        vouched = self._vouch()
        if vouched is None:
            return None
        out: list[Tallies | None] = []
        for path in self._scans[0][0]:
            stamp = vouched.stamps[path]
            if stamp.tallies is None or not set(TALLIED) <= set(stamp.columns):
                return None
            out.append(stamp.tallies if stamp.rows else None)
        return out

    def scalar(self, sql: str) -> Any:
        """The one value ``sql`` returns."""
        rows = self.con.execute(sql).fetchall()
        row = rows[0] if rows else None
        return None if row is None else row[0]

    def vouched(self) -> int | None:
        """The dataset's rows when it is Parquet files only, each stamped checked when written
        (``CHECKED_KEY``) and its footer still saying what the stamp says of the columns the
        engine reads (``Footers.vouched``); None otherwise (and where the footers were not
        read)."""
        vouched = self._vouch()
        return None if vouched is None else vouched.rows

    def _vouch(self) -> Vouched | None:
        """``Footers.vouched``, read once."""
        if self._vouched is False:
            self._vouched = None
            if not self._parts and self._footers is not None:  # JSON lines, object storage:
                self._vouched = self._footers.vouched(self.columns, REQUIRED)  # checked on reading
        return self._vouched

    def finished_range(self) -> tuple[float, float] | None:
        """The first and last ``finished_s`` of the dataset, from the footers' exact statistics,
        where the files vouch for their rows and there is no filter (``vouched``); None
        otherwise: a query finds them."""
        vouched = None if self.where is not None else self._vouch()
        return None if vouched is None else vouched.finished

    def check(self) -> tuple[int, int]:
        """Rows in the dataset and rows the filter keeps, in one scan; a file whose rows lack a
        column every record has is a ``RecordError`` naming it, and a file holding a row the
        reader would refuse is read by the reader, for its own line. Files that vouch for their
        rows (``vouched``) are only counted."""
        vouched = self.vouched()
        if vouched is not None:
            kept = vouched
            if self.where is not None:
                kept = int(self.con.execute("SELECT count(*) FROM records").fetchall()[0][0])
            self.counted = (vouched, kept)
            return self.counted
        missing = " OR ".join(f"{c} IS NULL" for c in REQUIRED)
        cond = "TRUE" if self.where is None else self.where.sql()
        row = self.con.execute(
            f"SELECT count(*), count(*) FILTER (WHERE {missing}), "
            f"min(filename) FILTER (WHERE {missing}), "
            f"count(*) FILTER (WHERE {implausible(self.columns)}), "
            f"count(*) FILTER (WHERE {cond}), "
            f"min(filename) FILTER (WHERE {implausible(self.columns)}) "
            f"FROM (SELECT {view_columns(self.columns)}, filename FROM everything) AS filled"
        ).fetchall()[0]
        total, bad, odd, kept = int(row[0]), int(row[1]), int(row[3]), int(row[4])
        if bad:
            raise RecordError(
                f"{bad:,} row(s) lack one of {', '.join(REQUIRED)}: not request records",
                path=self._file_of(missing, row[2]),
            )
        if odd:
            file = self._file_of(implausible(self.columns), row[5])
            if not Path(file).is_file():  # object storage: the store, not a file, is named
                raise RecordError(
                    f"{odd:,} record(s) the record checks refuse (a time that cannot be seconds, "
                    "a negative count or duration, or times out of order)",
                    path=file,
                )
            if (own := _own_reading(Path(file))) is not None:
                raise own
        self.counted = (total, kept)
        return total, kept

    def _file_of(self, condition: str, named: object) -> str:
        """The first file holding a row ``condition`` (over the read columns) is true of: the
        name the scan kept (Parquet), else the JSON lines read again with their file names."""
        if named is not None:
            return str(named)
        filled = view_columns(self.columns)
        rows = self.con.execute(
            f"SELECT min(filename) FROM (SELECT {filled}, filename FROM "
            f"{_read_json(self._jsonl, self.columns, ', filename=true')}) AS filled "
            f"WHERE {condition}"
        ).fetchall()
        return str(rows[0][0])

    def share_memory(self, parts: int) -> None:
        """Hold at most ``MEMORY_LIMIT / parts`` and a ``1/parts`` share of the CPUs (compare's
        two runs sort their values at once: two engines at the whole limit would hold twice
        it, and twice the threads' buffers)."""
        whole = _bytes(MEMORY_LIMIT)
        if parts <= 1:
            return
        if whole is not None:
            self.con.execute(f"SET memory_limit = '{whole // parts // 2**20}MiB'")
        self.con.execute(f"SET threads = {max(1, (os.cpu_count() or 1) // parts)}")

    def close(self) -> None:
        import duckdb

        # the JSON lines' table dropped first: the checkpoint of closing its database then has
        # nothing to do (0.2 s of CPU for 0.6 M rows otherwise); none attached, or closed
        # already: nothing to drop
        with contextlib.suppress(duckdb.Error):
            self.con.execute(f"DROP TABLE IF EXISTS {_SCANNED}")
        self.con.close()
        self._tmp.cleanup()

    def __enter__(self) -> DuckEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """``batches`` (of one schema, at least one) as one batch."""
    import pyarrow as pa

    table = pa.Table.from_batches(batches)
    if len(batches) == 1 or not table.num_rows:
        return batches[0]
    table = table.combine_chunks()  # a chunk a column
    return pa.RecordBatch.from_arrays([c.chunk(0) for c in table.columns], schema=table.schema)


def _record_error(exc: Exception, files: Sequence[Path], *, search: bool = True) -> RecordError:
    """DuckDB's error as one line naming the file at fault: the file's own reading
    (``records.io.read_records``, its row and field) where DuckDB names it or where a file of
    the dataset is found at fault, else DuckDB's message."""
    text = " ".join(str(exc).split())
    for prefix in ("Invalid Input Error: ", "IO Error: ", "Conversion Error: "):
        text = text.replace(prefix, "")
    found = [p for p in files if str(p) in text]
    named = [max(found, key=lambda p: len(str(p)))] if found else []
    for path in named or (files if search else ()):
        own = _own_reading(path)
        if own is not None:
            return own
    return RecordError(f"records could not be read: {text[:400]}")


def _own_reading(path: Path) -> RecordError | None:
    """The error the project's own reader gives ``path``, if any."""
    from fleetwatch.records.io import read_records

    try:
        read_records(path)
    except RecordError as exc:
        return exc
    except Exception as exc:  # unreadable in another way: still this file's fault
        return RecordError(f"not readable ({type(exc).__name__}: {exc})", path=str(path))
    return None
