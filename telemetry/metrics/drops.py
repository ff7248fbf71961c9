"""Count telemetry that was dropped instead of slowing the engine down."""

from __future__ import annotations

import threading
from collections.abc import Mapping

__all__ = ["DropCounter"]


class DropCounter:
    """Thread-safe counts of dropped telemetry items by stage (``spans``, ``records``, …).

    Exported as ``fleetwatch_telemetry_dropped_total{stage=...}``. Create one first and hand it to
    the span processor and the instrumentation so both count into the same metric.
    """

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, stage: str, n: int = 1) -> None:
        with self._lock:
            self._counts[stage] = self._counts.get(stage, 0) + n

    def get(self, stage: str) -> int:
        return self._counts.get(stage, 0)

    def snapshot(self) -> Mapping[str, int]:
        with self._lock:
            return dict(self._counts)

    @property
    def total(self) -> int:
        return sum(self.snapshot().values())
