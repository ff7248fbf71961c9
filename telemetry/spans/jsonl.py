"""Span files: one JSON object per line, each file written whole, for offline use without a collector.

Crash consistency. Every export rewrites the live file through ``fleetwatch.core.atomic`` (temporary
file beside it, fsync, rename) with every span it holds, so the file at ``path`` is always whole:
a reader never sees half a line, whether the writer exits, is SIGKILLed mid-write or the machine
loses power. When the live file reaches ``max_bytes`` it is sealed: renamed to ``<name>.1`` (older
ones shift up to ``<name>.<backups>``; beyond that the oldest is deleted) and the next export starts
a new live file.

What a crash loses: the spans of the export in progress (one batch: at most the processor's
``max_batch``, 512 by default), never a span an earlier export wrote. In a running service the
``BoundedSpanProcessor`` in front of this exporter also holds the spans that ended since its last
export (at most ``interval_s``, 1 s by default, and at most ``max_queue`` spans); those are lost too.
``tests/telemetry/test_span_crash.py`` SIGKILLs a writer 50 times and checks this bound.

What a crash can leave: a temporary ``.<name>.<hex>.tmp`` beside the file. Readers never open it
(``read_spans`` reads only the live file and its numbered backups), and the next exporter on the
same path deletes it. A file from an older appending writer may end in a cut line: ``read_spans``
skips such a line and counts it, and an exporter restarting on that file keeps only its whole
lines (the repair).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from fleetwatch.core.atomic import atomic_write_bytes

__all__ = ["JsonLinesSpanExporter", "SpanFiles", "read_spans", "span_files"]


def _whole_lines(data: bytes) -> tuple[list[bytes], int]:
    """The lines of ``data`` that end in a newline and parse as a JSON object, and how many do
    not (a line cut by a crash, or garbage)."""
    lines: list[bytes] = []
    bad = 0
    for line in data.splitlines(keepends=True):
        if not line.strip():
            continue
        try:
            ok = line.endswith(b"\n") and isinstance(json.loads(line), dict)
        except ValueError:
            ok = False
        if ok:
            lines.append(line)
        else:
            bad += 1
    return lines, bad


def _temp_pattern(path: Path) -> re.Pattern[str]:
    return re.compile(rf"^\.{re.escape(path.name)}\.[0-9a-f]+\.tmp$")


def _sealed(path: Path) -> list[tuple[int, Path]]:
    """The sealed backups ``<name>.N`` beside ``path``, highest N (oldest) first."""
    pattern = re.compile(rf"^{re.escape(path.name)}\.(\d+)$")
    numbered: list[tuple[int, Path]] = []
    if path.parent.is_dir():
        for child in path.parent.iterdir():
            m = pattern.match(child.name)
            if m:
                numbered.append((int(m.group(1)), child))
    return sorted(numbered, reverse=True)


def span_files(path: str | os.PathLike[str]) -> list[Path]:
    """The files of a span log, oldest first: sealed backups ``<name>.N`` … ``<name>.1``, then
    the live file (those that exist)."""
    p = Path(path)
    return [f for _, f in _sealed(p)] + ([p] if p.is_file() else [])


@dataclass
class SpanFiles:
    """What ``read_spans`` found: the spans in order, the files read, lines skipped as partial."""

    spans: list[dict[str, Any]] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    skipped: int = 0


def read_spans(path: str | os.PathLike[str]) -> SpanFiles:
    """Every whole span of the log at ``path`` (backups first), skipping and counting any line a
    crash cut short; temporary files are never read."""
    out = SpanFiles()
    for f in span_files(path):
        try:
            data = f.read_bytes()
        except FileNotFoundError:  # rotated away while listing
            continue
        lines, bad = _whole_lines(data)
        out.spans.extend(json.loads(line) for line in lines)
        out.files.append(f)
        out.skipped += bad
    return out


class JsonLinesSpanExporter(SpanExporter):
    """Write spans as JSON lines (the SDK's ``ReadableSpan.to_json`` form, compacted), each file
    whole (see the module docstring for what a crash loses).

    Every export rewrites the live file, so a file costs about ``max_bytes``²/(2 × batch bytes)
    of writing: keep ``max_bytes`` modest and rely on ``backups`` for history.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, max_bytes: int = 8 << 20, backups: int = 8
    ) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self.repaired = 0
        """Lines dropped from an existing live file because a crash had cut them short."""
        self._lock = threading.Lock()
        self._lines: list[bytes] | None = None
        self._size = 0

    def _load(self) -> list[bytes]:
        """The live file's whole lines (and remove temporary files a killed writer left)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        stale = _temp_pattern(self.path)
        for child in self.path.parent.iterdir():
            if stale.match(child.name):
                with contextlib.suppress(OSError):
                    child.unlink()
        lines: list[bytes] = []
        if self.path.is_file():
            lines, self.repaired = _whole_lines(self.path.read_bytes())
        self._size = sum(len(line) for line in lines)
        return lines

    def _rotate(self) -> None:
        """Seal the live file as ``<name>.1``, shifting older backups up."""
        for n, f in _sealed(self.path):
            if n + 1 > self.backups:
                f.unlink(missing_ok=True)
            else:
                os.replace(f, f.with_name(f"{self.path.name}.{n + 1}"))
        if self.backups > 0:
            os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        else:
            self.path.unlink(missing_ok=True)
        self._lines, self._size = [], 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        new = [
            json.dumps(json.loads(s.to_json(indent=None)), separators=(",", ":")).encode() + b"\n"
            for s in spans
        ]
        with self._lock:
            try:
                lines = self._lines if self._lines is not None else self._load()
                self._lines = lines
                atomic_write_bytes(self.path, b"".join(lines + new))
            except OSError:
                return SpanExportResult.FAILURE  # these spans are dropped (and counted)
            lines.extend(new)
            self._size += sum(len(line) for line in new)
            if self._size >= self.max_bytes:
                # the spans are written; a failed rotation only lets the live file grow
                with contextlib.suppress(OSError):
                    self._rotate()
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            self._lines = None
            self._size = 0

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
