"""Span exporter writing one JSON object per line, for offline use without a collector."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["JsonLinesSpanExporter"]


class JsonLinesSpanExporter(SpanExporter):
    """Append spans as JSON lines (the SDK's ``ReadableSpan.to_json`` form, compacted).

    Each batch is written with one ``write`` and flushed, so readers see whole lines. When the
    file passes ``max_bytes`` it is renamed to ``<name>.1`` (older ones shift up, at most
    ``backups`` kept) and a new one is started.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, max_bytes: int = 64 << 20, backups: int = 3
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self._lock = threading.Lock()
        self._fh: IO[str] | None = None

    def _open(self) -> IO[str]:
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        return self._fh

    def _rotate(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        for i in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
        if self.backups > 0:
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        else:
            self.path.unlink(missing_ok=True)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = "".join(
            json.dumps(json.loads(s.to_json(indent=None)), separators=(",", ":")) + "\n"
            for s in spans
        )
        try:
            with self._lock:
                fh = self._open()
                fh.write(lines)
                fh.flush()
                if fh.tell() >= self.max_bytes:
                    self._rotate()
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
