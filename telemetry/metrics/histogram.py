"""A histogram whose hot path is ``list.append``; values are binned in bulk with numpy."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
from prometheus_client.samples import Exemplar
from prometheus_client.utils import floatToGoString

__all__ = ["BatchedHistogram"]


class BatchedHistogram:
    """Cumulative Prometheus-style histogram fed by appending to ``pending``.

    The single writer (the engine's step-loop thread) calls ``pending.append(value)``; ``flush``
    bins what is pending (numpy, le-inclusive buckets as Prometheus defines them) and may run on any
    thread: it reads a prefix of the list and deletes exactly that prefix, so values appended
    meanwhile are kept. Call it every few steps and before every scrape.

    ``exemplify`` (off the step loop: the telemetry worker, once a request's span exists) keeps
    the latest exemplar per bucket, a ``trace_id`` and the value it was observed with; the
    OpenMetrics exposition shows them, the Prometheus text format leaves them out.
    """

    __slots__ = ("_bounds", "_counts", "_exemplars", "_lock", "_sum", "pending")

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = np.asarray(sorted(float(b) for b in bounds), dtype=np.float64)
        self._counts = np.zeros(len(self._bounds) + 1, dtype=np.int64)
        self._sum = 0.0
        self._lock = threading.Lock()
        self._exemplars: dict[int, Exemplar] = {}
        self.pending: list[float] = []

    def exemplify(self, value: float, trace_id: str, timestamp: float | None = None) -> None:
        """Make (``trace_id``, ``value``) the exemplar of the bucket ``value`` falls in."""
        i = int(np.searchsorted(self._bounds, value, side="left"))
        self._exemplars[i] = Exemplar({"trace_id": trace_id}, value, timestamp)

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

    def snapshot(self) -> tuple[list[tuple[str, float] | tuple[str, float, Exemplar]], float, int]:
        """Flush, then return (cumulative ``(le, count)`` pairs including ``+Inf``, each with
        its bucket's exemplar where it has one, sum, count)."""
        self.flush()
        with self._lock:
            cumulative = np.cumsum(self._counts)
            total_sum = self._sum
        exemplars = dict(self._exemplars)
        les = [_le(b) for b in self._bounds] + ["+Inf"]
        buckets: list[tuple[str, float] | tuple[str, float, Exemplar]] = []
        for i, (le, c) in enumerate(zip(les, cumulative.tolist(), strict=True)):
            ex = exemplars.get(i)
            buckets.append((le, float(c)) if ex is None else (le, float(c), ex))
        return buckets, total_sum, int(cumulative[-1])


def _le(bound: float) -> str:
    return str(floatToGoString(bound))  # type: ignore[no-untyped-call]
