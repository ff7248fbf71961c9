"""DuckDB in process: the ``records`` view over a dataset's files, read where they lie.

JSON lines are read with the record schema's columns given (no inference pass, a key a file lacks
reads as NULL); Parquet files by name, a column a file lacks read as NULL. Both are cast to the
types of ``COLUMNS`` so every file reads alike. When the dataset has JSON lines, the columns an
analysis reads are materialised once into a temporary table (parsing JSON is most of the cost, so
each reduction does not parse it again); DuckDB spills that table to disk beyond its memory limit,
so memory stays bounded whatever the rows. Parquet is scanned in place by every query.

Errors name the file: a line that is not JSON is DuckDB's own message (it names the file and the
byte), a file of JSON that is not records (no ``request_id``, ``arrival_s`` or ``finished_s``) is
found by ``check`` and named.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetwatch.core.records.schema import RecordError
from fleetwatch.core.records.write import PARQUET_SUFFIXES
from fleetwatch.records.engine import COLUMNS
from fleetwatch.records.filters import sql_string

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from fleetwatch.records.filters import RecordFilter

__all__ = ["MEMORY_LIMIT", "REQUIRED", "DuckEngine"]

MEMORY_LIMIT = os.environ.get("FLEETWATCH_DUCKDB_MEMORY", "512MB")
"""DuckDB's own memory limit (it spills past it); the process adds Python and pandas."""
REQUIRED = ("request_id", "replica", "arrival_s", "finished_s", "status")
"""Columns every record has: a row without one is not a record (a foreign file)."""


def _list(files: Sequence[Path]) -> str:
    return "[" + ", ".join(sql_string(str(p)) for p in files) + "]"


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
    ) -> None:
        import duckdb

        self.files = tuple(files)
        self.where = where
        self._tmp = tempfile.TemporaryDirectory(prefix="fleetwatch-duckdb-")
        self.con: duckdb.DuckDBPyConnection = duckdb.connect(
            config={
                "memory_limit": MEMORY_LIMIT,
                "temp_directory": self._tmp.name,
                "preserve_insertion_order": False,
                "threads": threads or max(os.cpu_count() or 1, 1),
            }
        )
        wanted = list(COLUMNS) if columns is None else list(dict.fromkeys([*REQUIRED, *columns]))
        self.columns = tuple(wanted)
        jsonl = [p for p in self.files if p.suffix.lower() not in PARQUET_SUFFIXES]
        parquet = [p for p in self.files if p.suffix.lower() in PARQUET_SUFFIXES]
        parts = []
        if jsonl:
            spec = "{" + ", ".join(f"{sql_string(c)}: '{COLUMNS[c]}'" for c in wanted) + "}"
            parts.append(
                f"SELECT {', '.join(wanted)}, filename FROM read_json({_list(jsonl)}, "
                f"format='newline_delimited', columns={spec}, filename=true, "
                "maximum_object_size=1048576)"
            )
        if parquet:
            have = self._parquet_columns(parquet)
            cols = [
                f"CAST({c} AS {COLUMNS[c]}) AS {c}" if c in have else f"NULL::{COLUMNS[c]} AS {c}"
                for c in wanted
            ]
            parts.append(
                f"SELECT {', '.join(cols)}, filename FROM read_parquet({_list(parquet)}, "
                "union_by_name=true, filename=true, hive_partitioning=false)"
            )
        if not parts:
            nulls = ", ".join(f"NULL::{COLUMNS[c]} AS {c}" for c in wanted)
            parts.append(f"SELECT {nulls}, NULL::VARCHAR AS filename WHERE FALSE")
        source = " UNION ALL ".join(parts)
        cond = "TRUE" if where is None else where.sql()
        try:
            if jsonl:
                self.con.execute(f"CREATE TEMP TABLE scanned AS {source}")
                source = "SELECT * FROM scanned"
            self.con.execute(f"CREATE TEMP VIEW everything AS {source}")
            self.con.execute(
                f"CREATE TEMP VIEW records AS SELECT {', '.join(wanted)} FROM everything "
                f"WHERE {cond}"
            )
        except duckdb.Error as exc:
            raise _record_error(exc) from None

    def _parquet_columns(self, files: Sequence[Path]) -> set[str]:
        import duckdb

        try:
            rows = self.con.execute(
                f"DESCRIBE SELECT * FROM read_parquet({_list(files)}, union_by_name=true, "
                "hive_partitioning=false)"
            ).fetchall()
        except duckdb.Error as exc:
            raise _record_error(exc) from None
        return {str(r[0]) for r in rows}

    def query(self, sql: str) -> pd.DataFrame:
        import duckdb

        try:
            frame: pd.DataFrame = self.con.execute(sql).df()
        except duckdb.Error as exc:
            raise _record_error(exc) from None
        return frame

    def scalar(self, sql: str) -> Any:
        """The one value ``sql`` returns."""
        row = self.con.execute(sql).fetchone()
        return None if row is None else row[0]

    def check(self) -> tuple[int, int]:
        """Rows in the dataset and rows the filter keeps; a file whose rows lack a column every
        record has is a ``RecordError`` naming it."""
        missing = " OR ".join(f"{c} IS NULL" for c in REQUIRED)
        row = self.con.execute(
            f"SELECT count(*), count(*) FILTER (WHERE {missing}), "
            f"min(filename) FILTER (WHERE {missing}) FROM everything"
        ).fetchone()
        assert row is not None
        total, bad, where = int(row[0]), int(row[1]), row[2]
        if bad:
            raise RecordError(
                f"{bad:,} row(s) lack one of {', '.join(REQUIRED)}: not request records",
                path=str(where),
            )
        kept = int(self.scalar("SELECT count(*) FROM records"))
        return total, kept

    def close(self) -> None:
        self.con.close()
        self._tmp.cleanup()

    def __enter__(self) -> DuckEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _record_error(exc: Exception) -> RecordError:
    """DuckDB's error as one line (it names the file where a file is at fault)."""
    text = " ".join(str(exc).split())
    for prefix in ("Invalid Input Error: ", "IO Error: ", "Conversion Error: "):
        text = text.replace(prefix, "")
    return RecordError(f"records could not be read: {text[:400]}")
