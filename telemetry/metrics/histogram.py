"""A histogram whose hot path is ``list.append``; values are binned in bulk with numpy."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
from prometheus_client.utils import floatToGoString

__all__ = ["BatchedHistogram"]


class BatchedHistogram:
    """Cumulative Prometheus-style histogram fed by appending to ``pending``.

    The single writer (the engine's step-loop thread) calls ``pending.append(value)``; ``flush``
    bins what is pending (numpy, le-inclusive buckets as Prometheus defines them) and may run on any
    thread: it reads a prefix of the list and deletes exactly that prefix, so values appended
    meanwhile are kept. Call it every few steps and before every scrape.
    """

    __slots__ = ("_bounds", "_counts", "_lock", "_sum", "pending")

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = np.asarray(sorted(float(b) for b in bounds), dtype=np.float64)
        self._counts = np.zeros(len(self._bounds) + 1, dtype=np.int64)
        self._sum = 0.0
        self._lock = threading.Lock()
        self.pending: list[float] = []

    def flush(self) -> None:
        with self._lock:
            n = len(self.pending)
            if n == 0:
                return
            values = np.asarray(self.pending[:n], dtype=np.float64)
            del self.pending[:n]
            idx = np.searchsorted(self._bounds, values, side="left")
            self._counts += np.bincount(idx, minlength=len(self._counts))
            self._sum += float(values.sum())

    def snapshot(self) -> tuple[list[tuple[str, float]], float, int]:
        """Flush, then return (cumulative ``(le, count)`` pairs including ``+Inf``, sum, count)."""
        self.flush()
        with self._lock:
            cumulative = np.cumsum(self._counts)
            total_sum = self._sum
        les = [_le(b) for b in self._bounds] + ["+Inf"]
        buckets = [(le, float(c)) for le, c in zip(les, cumulative.tolist(), strict=True)]
        return buckets, total_sum, int(cumulative[-1])


def _le(bound: float) -> str:
    return str(floatToGoString(bound))  # type: ignore[no-untyped-call]
