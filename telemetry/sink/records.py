"""Record sinks: receive ``RequestRecord`` batches from the telemetry worker thread.

``RotatingRecordSink`` writes files of at most ``max_records`` records each, every file written
whole through ``fleetwatch.core.records.write_records`` (temporary file, fsync, rename, fsync of the
directory: a reader never sees half a file, and a renamed file survives a power cut). A partly
filled file is sealed on ``flush``/``close`` and when its oldest record is older than
``max_age_s`` (2 s by default), so records reach disk while traffic flows.

Loss bound: fed by the telemetry worker (``instrument``), which hands records over at least every
0.5 s, a record is on disk at most ``max_age_s`` + 1 s after its request finished (plus the time
to write one file, milliseconds). A process killed without warning (SIGKILL, OOM) loses at most
the records of requests that finished within that time; a clean stop (SIGINT, SIGTERM) loses none.
``tests/abuse/test_record_loss.py`` measures it by killing ``engine serve`` from outside.

Temporary files a killed writer left (``.<prefix>-NNNNNN.<fmt>.<hex>.tmp``) are removed when a
sink opens the directory (``orphans_removed`` counts them); one directory, one writing sink.
"""

from __future__ import annotations

import importlib.util
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from fleetwatch.core.records import RecordError, RequestRecord, write_records

__all__ = ["MemoryRecordSink", "RecordSink", "RecordSinkError", "RotatingRecordSink"]


class RecordSinkError(OSError):
    """Records could not be written; ``lost`` is how many (the worker counts them as drops)."""

    def __init__(self, message: str, *, lost: int) -> None:
        super().__init__(message)
        self.lost = lost


@runtime_checkable
class RecordSink(Protocol):
    """Receives finished requests' records; called from one background thread."""

    def write(self, records: Sequence[RequestRecord]) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class MemoryRecordSink:
    """Keeps records in a list (``.records``): for tests and in-process analysis."""

    def __init__(self) -> None:
        self.records: list[RequestRecord] = []
        self._lock = threading.Lock()

    def write(self, records: Sequence[RequestRecord]) -> None:
        with self._lock:
            self.records.extend(records)

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None


class RotatingRecordSink:
    """Write records to ``directory/<prefix>-<NNNNNN>.<jsonl|parquet>``, rotating by count and age.

    Numbering continues after the highest existing file, so a restart never overwrites.

    >>> import tempfile
    >>> sink = RotatingRecordSink(tempfile.mkdtemp(), max_records=1000)
    >>> sink.close()
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        fmt: Literal["jsonl", "parquet"] = "jsonl",
        max_records: int = 100_000,
        max_age_s: float = 2.0,
        prefix: str = "records",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if fmt not in ("jsonl", "parquet"):
            raise RecordError(f"record format must be jsonl or parquet, got {fmt!r}")
        if fmt == "parquet" and importlib.util.find_spec("pyarrow") is None:
            raise RecordError(
                "record format parquet needs pyarrow: pip install 'fleetwatch-telemetry[parquet]'"
            )
        if max_records < 1:
            raise RecordError(f"max_records must be >= 1, got {max_records}")
        if not max_age_s > 0:
            raise RecordError(f"max_age_s must be > 0, got {max_age_s}")
        self.directory = Path(directory)
        self.fmt = fmt
        self.max_records = max_records
        self.max_age_s = max_age_s
        self.prefix = prefix
        self.clock = clock
        self.files: list[Path] = []
        self._buffer: list[RequestRecord] = []
        self._opened_at = 0.0
        self._lock = threading.Lock()
        self.orphans_removed = self._remove_orphans()
        self._seq = self._next_seq()

    def _remove_orphans(self) -> int:
        """Remove this sink's temporary files left by a writer that was killed mid-write."""
        pattern = re.compile(rf"^\.{re.escape(self.prefix)}-\d+\.(jsonl|parquet)\.[0-9a-f]+\.tmp$")
        if not self.directory.is_dir():
            return 0
        n = 0
        for p in self.directory.iterdir():
            if pattern.match(p.name):
                p.unlink(missing_ok=True)
                n += 1
        return n

    def _next_seq(self) -> int:
        pattern = re.compile(rf"^{re.escape(self.prefix)}-(\d+)\.(jsonl|parquet)$")
        highest = 0
        if self.directory.is_dir():
            for p in self.directory.iterdir():
                m = pattern.match(p.name)
                if m:
                    highest = max(highest, int(m.group(1)))
        return highest + 1

    def write(self, records: Sequence[RequestRecord]) -> None:
        """Buffer ``records``; write a file when it is full or its oldest record is too old.

        A file that cannot be written (disk full, no permission) loses its records, and only
        those: writing goes on with the next file, and ``RecordSinkError.lost`` says how many
        were lost so the caller can count them.
        """
        lost = 0
        error: Exception | None = None
        with self._lock:
            for r in records:
                if not self._buffer:
                    self._opened_at = self.clock()
                self._buffer.append(r)
                if len(self._buffer) >= self.max_records:
                    n, exc = self._seal()
                    lost, error = lost + n, error or exc
            if self._buffer and self.clock() - self._opened_at >= self.max_age_s:
                n, exc = self._seal()
                lost, error = lost + n, error or exc
        if error is not None:
            raise RecordSinkError(
                f"{lost} records could not be written to {self.directory}: {error}", lost=lost
            ) from error

    def _seal(self) -> tuple[int, Exception | None]:
        """Write the buffer as one file; (records lost, the error) when that fails."""
        if not self._buffer:
            return 0, None
        path = self.directory / f"{self.prefix}-{self._seq:06d}.{self.fmt}"
        batch, self._buffer = self._buffer, []
        try:
            write_records(path, batch)
        except Exception as exc:
            return len(batch), exc
        self._seq += 1
        self.files.append(path)
        return 0, None

    def flush(self) -> None:
        with self._lock:
            lost, error = self._seal()
        if error is not None:
            raise RecordSinkError(
                f"{lost} records could not be written to {self.directory}: {error}", lost=lost
            ) from error

    def close(self) -> None:
        self.flush()
