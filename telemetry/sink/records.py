"""Record sinks: receive ``RequestRecord`` batches from the telemetry worker thread.

``RotatingRecordSink`` writes files of at most ``max_records`` records each, every file written
whole through ``telemetry.records.write_records`` (temporary file + rename, so a reader never sees
half a file). A partly filled file is sealed on ``flush``/``close`` and when its oldest record is
older than ``max_age_s`` (so records reach disk during a long quiet run).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from telemetry.records import RecordError, RequestRecord, write_records

__all__ = ["MemoryRecordSink", "RecordSink", "RotatingRecordSink"]


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
        max_age_s: float = 60.0,
        prefix: str = "records",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if fmt not in ("jsonl", "parquet"):
            raise RecordError(f"record format must be jsonl or parquet, got {fmt!r}")
        if max_records < 1:
            raise RecordError(f"max_records must be >= 1, got {max_records}")
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
        self._seq = self._next_seq()

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
        with self._lock:
            for r in records:
                if not self._buffer:
                    self._opened_at = self.clock()
                self._buffer.append(r)
                if len(self._buffer) >= self.max_records:
                    self._seal()
            if self._buffer and self.clock() - self._opened_at >= self.max_age_s:
                self._seal()

    def _seal(self) -> None:
        if not self._buffer:
            return
        path = self.directory / f"{self.prefix}-{self._seq:06d}.{self.fmt}"
        batch, self._buffer = self._buffer, []
        write_records(path, batch)
        self._seq += 1
        self.files.append(path)

    def flush(self) -> None:
        with self._lock:
            self._seal()

    def close(self) -> None:
        self.flush()
