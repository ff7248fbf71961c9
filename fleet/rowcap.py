"""The memory bound of the analyses that read a record file whole (``fleet tail``, ``fleet
compare``): a cap on rows, checked before anything is read into memory.

Memory while reading and analysing is about ``BYTES_PER_ROW`` per row (measured: JSON lines
~1.1 KB a row at their peak, Parquet ~0.55 KB; BENCHMARKS.md) plus the program itself, so the
default cap of ``DEFAULT_MAX_ROWS`` rows keeps one file under about 2.2 GB; ``--max-rows`` raises
or lowers it. The check itself is bounded: a Parquet file's row count comes from its footer, a
JSON-lines file is scanned in 1 MiB chunks and only until the cap is passed, and a line longer
than ``MAX_LINE_BYTES`` (no record is near it) stops the scan too.

Rows alone do not bound memory (a few rows may be huge), so the bytes are capped too, at the
same bound: ``max_rows × BYTES_PER_ROW``, against a JSON-lines file's size and a Parquet
file's total uncompressed size (its footer's row groups). A record is ~0.4 KB of JSON and
~0.1 KB uncompressed in Parquet, so files of ordinary rows meet the row cap first.
"""

from __future__ import annotations

from pathlib import Path

from fleetwatch.fleet.errors import AnalysisError

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
MAX_LINE_BYTES = 1 << 20
CHUNK_BYTES = 1 << 20
_PARQUET = (".parquet", ".pq")
_JSONL = (".jsonl", ".json", ".ndjson")


def _jsonl_rows(path: Path, stop_after: int) -> int:
    """Non-blank lines of ``path``, counting no further than ``stop_after``."""
    rows = 0
    line_bytes = 0  # bytes of the current line so far
    content = False  # whether the current line has a non-blank byte
    with open(path, "rb") as fh:
        while rows <= stop_after:
            chunk = fh.read(CHUNK_BYTES)
            if not chunk:
                break
            pieces = chunk.split(b"\n")
            for i, piece in enumerate(pieces):
                line_bytes += len(piece)
                content = content or bool(piece.strip())
                if line_bytes > MAX_LINE_BYTES:
                    raise AnalysisError(
                        f"{path}: line {rows + 1} is longer than {MAX_LINE_BYTES >> 20} MiB; "
                        "not a request record file"
                    )
                if i < len(pieces) - 1:  # the line ended here
                    rows += content
                    line_bytes, content = 0, False
    return rows + content


def count_rows(path: Path, stop_after: int) -> int | None:
    """Rows in a record file (at most ``stop_after`` + 1 counted), or None when the kind of file
    or its state (missing, unreadable) is left for the reader to report."""
    suffix = path.suffix.lower()
    if suffix in _PARQUET:
        import pyarrow.parquet as pq

        try:
            return int(pq.ParquetFile(path).metadata.num_rows)  # the footer only
        except Exception:
            return None  # not Parquet, or unreadable: the reader says so, in its words
    if suffix in _JSONL:
        try:
            return _jsonl_rows(path, stop_after)
        except OSError:
            return None
    return None


def data_bytes(path: Path) -> int | None:
    """The bytes a record file holds as read: a JSON-lines file's size, a Parquet file's total
    uncompressed size from its footer; None when left for the reader to report."""
    suffix = path.suffix.lower()
    try:
        if suffix in _JSONL:
            return path.stat().st_size
        if suffix in _PARQUET:
            import pyarrow.parquet as pq

            md = pq.ParquetFile(path).metadata
            return sum(int(md.row_group(i).total_byte_size) for i in range(md.num_row_groups))
    except Exception:
        return None
    return None


def check_rows(path: Path, max_rows: int, flag: str = "--max-rows") -> None:
    """Refuse (``AnalysisError``: one line, exit 2) a record file of more than ``max_rows`` rows,
    before it is read."""
    if max_rows < 1:
        raise AnalysisError(f"{flag} must be at least 1, got {max_rows}")
    if not path.is_file():
        return  # the reader names what is wrong
    size, cap = data_bytes(path), max_rows * BYTES_PER_ROW
    if size is not None and size > cap:
        kind = "uncompressed " if path.suffix.lower() in _PARQUET else ""
        raise AnalysisError(
            f"{path}: {size:,} {kind}bytes, over the {cap:,} bytes the cap {flag} {max_rows:,} "
            f"allows (about {BYTES_PER_ROW:,} bytes of memory a row); raise {flag} to read it"
        )
    rows = count_rows(path, max_rows)
    if rows is not None and rows > max_rows:
        counted = f"more than {max_rows:,}" if path.suffix.lower() in _JSONL else f"{rows:,}"
        raise AnalysisError(
            f"{path}: {counted} rows, over the cap {flag} {max_rows:,} (read whole, about "
            f"{BYTES_PER_ROW:,} bytes of memory a row); raise {flag} to read it"
        )
