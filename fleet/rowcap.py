"""The memory bound of the analyses that read a record dataset whole (``fleet tail`` and ``fleet
compare`` with ``--engine memory``): a cap on rows, checked before anything is read into memory.

Memory while reading and analysing is about ``BYTES_PER_ROW`` per row (measured: JSON lines
~1.1 KB a row at their peak, Parquet ~0.55 KB; BENCHMARKS.md) plus the program itself, so the
default cap of ``DEFAULT_MAX_ROWS`` rows keeps one dataset under about 2.2 GB; ``--max-rows``
raises or lowers it. The cap is on the dataset's total, however many files hold it. The check
itself is bounded: a Parquet file's row count comes from its footer, a JSON-lines file is scanned
in 1 MiB chunks and only until the cap is passed, and a line longer than ``MAX_LINE_BYTES`` (no
record is near it) stops the scan too (``fleetwatch.records.dataset``).

Rows alone do not bound memory (a few rows may be huge), so the bytes are capped too, at the
same bound: ``max_rows × BYTES_PER_ROW``, against the JSON-lines files' sizes and the Parquet
files' total uncompressed sizes (their footers' row groups). A record is ~0.4 KB of JSON and
~0.1 KB uncompressed in Parquet, so files of ordinary rows meet the row cap first.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fleetwatch.core.records.write import JSONL_SUFFIXES, PARQUET_SUFFIXES
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.records.dataset import MAX_LINE_BYTES, data_bytes, file_bytes, file_rows

__all__ = [
    "BYTES_PER_ROW",
    "DEFAULT_MAX_ROWS",
    "MAX_LINE_BYTES",
    "check_rows",
    "count_rows",
    "data_bytes",
]

DEFAULT_MAX_ROWS = 2_000_000
BYTES_PER_ROW = 1_100
"""Peak memory per row read from JSON lines and analysed (Parquet: about half)."""

count_rows = file_rows
"""Rows in one record file (see ``fleetwatch.records.dataset.file_rows``)."""


def check_rows(name: str, files: Sequence[Path], max_rows: int, flag: str = "--max-rows") -> None:
    """Refuse (``AnalysisError``: one line, exit 2) a dataset (``files``, called ``name`` in the
    message) of more than ``max_rows`` rows in all, before any of it is read."""
    from fleetwatch.records.dataset import count_rows as dataset_rows

    if max_rows < 1:
        raise AnalysisError(f"{flag} must be at least 1, got {max_rows}")
    present = [p for p in files if p.is_file()]  # the reader names what is wrong with the rest
    size, cap = data_bytes(present), max_rows * BYTES_PER_ROW
    parquet = [p.suffix.lower() in PARQUET_SUFFIXES for p in present if file_bytes(p) is not None]
    if size > cap:
        kind = (
            "uncompressed "
            if parquet and all(parquet)
            else ""
            if not any(parquet)
            else "(Parquet uncompressed) "
        )
        raise AnalysisError(
            f"{name}: {size:,} {kind}bytes, over the {cap:,} bytes the cap {flag} {max_rows:,} "
            f"allows (about {BYTES_PER_ROW:,} bytes of memory a row); raise {flag} to read it"
        )
    rows = dataset_rows(present, max_rows)
    if rows > max_rows:
        scanned = any(p.suffix.lower() in JSONL_SUFFIXES for p in present)
        counted = f"more than {max_rows:,}" if scanned else f"{rows:,}"
        raise AnalysisError(
            f"{name}: {counted} rows, over the cap {flag} {max_rows:,} (read whole, about "
            f"{BYTES_PER_ROW:,} bytes of memory a row); raise {flag} to read it"
        )
