"""Events counted per time bin: the one pass over events that every window is computed from.

Bin ``k`` (absolute: ``k * bin_s`` seconds on the records' clock) holds the events with times in
``((k - 1) * bin_s, k * bin_s]``, the events a counter sampled at ``k * bin_s`` counted since the
sample one bin earlier. A time's bin is ``ceil((t - origin) / bin_s)`` plus the origin's bin, the
origin being a multiple of ``bin_s`` near the data, so the subtraction is exact.

Two ways to count, with the same result:

- sorted times (records as a sink writes them, in finish order) with many events per bin: every
  bin edge is located by binary search, first among every 64th time, then within 64 times, so
  the work is per bin rather than per event; the times on both sides of every edge are checked
  against the formula above (any disagreement: the second way);
- otherwise every event's bin, computed in cache-sized chunks, and one ``np.bincount``.

``add`` may be called batch after batch (a Parquet file streamed row group by row group); the
counts grow to cover new bins. Memory: 16 bytes per bin between the first and the last event (30
days of 1 s bins: 41 MB) plus one batch's bins, whatever the number of events.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from slo.errors import SLOSpecError
from slo.events import SLIEvents

__all__ = ["MAX_BINS", "BinCounts"]

IntArray = np.ndarray[Any, np.dtype[np.int64]]
FloatArray = np.ndarray[Any, np.dtype[np.float64]]

MAX_BINS = 200_000_000
_CHUNK = 1 << 16
_SUB = 64  # the coarse search looks at every 64th time; 2**6 - 1 left to search within
_DENSE = 8  # events per bin from which the search beats a pass over every event


class BinCounts:
    """Counts of events and bad events per bin of ``bin_s`` seconds; ``first`` is the absolute bin
    of ``total[0]``."""

    def __init__(self, bin_s: int) -> None:
        self.bin_s = int(bin_s)
        self.first = 0
        self.total: IntArray = np.zeros(0, dtype=np.int64)
        self.bad: IntArray = np.zeros(0, dtype=np.int64)
        self._origin: int | None = None
        self.min_time = math.inf
        self.max_time = -math.inf

    @property
    def last(self) -> int:
        """Absolute bin of the last count held (``first - 1`` when empty)."""
        return self.first + self.total.size - 1

    def add(self, events: SLIEvents) -> None:
        """Count ``events`` into their bins."""
        t = events.times
        if t.size == 0:
            return
        if self._origin is None:
            self._origin = math.floor(float(t[0]) / self.bin_s)
        sorted_ = events.count is None and _is_sorted(t)
        t_min, t_max = (float(t[0]), float(t[-1])) if sorted_ else (float(t.min()), float(t.max()))
        self.min_time, self.max_time = min(self.min_time, t_min), max(self.max_time, t_max)
        lo, hi = self._bin(t_min), self._bin(t_max)
        if sorted_ and t.size >= _DENSE * (hi - lo + 1):
            found = self._search_sorted(t, np.asarray(events.bad, dtype=bool), lo, hi)
            if found is not None:
                self._accumulate(lo, *found)
                return
        self._accumulate(lo, *self._bincount(events, lo, hi))

    # --- the two counting paths ---------------------------------------------------------------

    def _bin(self, t: float) -> int:
        """Bin of one time, relative to the origin."""
        assert self._origin is not None
        return math.ceil((t - self._origin * self.bin_s) / self.bin_s)

    def _bins(self, t: FloatArray) -> FloatArray:
        assert self._origin is not None
        out = np.subtract(t, float(self._origin * self.bin_s))
        np.divide(out, self.bin_s, out=out)
        return np.ceil(out, out=out)

    def _search_sorted(
        self, t: FloatArray, bad: np.ndarray[Any, np.dtype[np.bool_]], lo: int, hi: int
    ) -> tuple[IntArray, IntArray] | None:
        assert self._origin is not None
        ks = np.arange(lo - 1, hi + 1, dtype=np.int64)
        edges = (ks + self._origin).astype(np.float64) * self.bin_s
        pos = _count_at_most(t, edges)
        # The formula on both sides of every edge: the last time counted and the first not.
        last = self._bins(np.take(t, pos - 1, mode="clip"))
        first = self._bins(np.take(t, pos, mode="clip"))
        if not (np.all((last <= ks) | (pos == 0)) and np.all((first > ks) | (pos == t.size))):
            return None
        bad_pos = np.searchsorted(np.flatnonzero(bad), pos)
        return np.diff(pos), np.diff(bad_pos)

    def _bincount(self, events: SLIEvents, lo: int, hi: int) -> tuple[IntArray, IntArray]:
        t = events.times
        n_bins = hi - lo + 1
        if n_bins > MAX_BINS:
            raise SLOSpecError(
                f"the events span {n_bins} bins of {self.bin_s} s; choose windows and an "
                "evaluation interval with a larger common divisor, or a shorter time range"
            )
        idx = np.empty(t.size, dtype=np.int64)
        for i in range(0, t.size, _CHUNK):
            part = self._bins(t[i : i + _CHUNK])
            part -= lo
            idx[i : i + part.size] = part
        if events.count is None:
            total = np.bincount(idx, minlength=n_bins)
            bad = np.bincount(idx[np.flatnonzero(events.bad)], minlength=n_bins)
        else:
            total = np.rint(np.bincount(idx, weights=events.count, minlength=n_bins))
            bad = np.rint(np.bincount(idx, weights=events.bad, minlength=n_bins))
        return total.astype(np.int64), bad.astype(np.int64)

    def _accumulate(self, lo: int, total: IntArray, bad: IntArray) -> None:
        assert self._origin is not None
        start = lo + self._origin
        end = start + total.size - 1
        if self.total.size == 0:
            self.first, self.total, self.bad = start, total.copy(), bad.copy()
            return
        if start < self.first or end > self.last:
            new_first = min(start, self.first)
            new_last = max(end, self.last)
            # grow with slack on the side that grew, so batch after batch stays amortised O(1)
            if new_last > self.last:
                new_last += self.total.size // 2
            if new_first < self.first:
                new_first -= self.total.size // 2
            grown_total = np.zeros(new_last - new_first + 1, dtype=np.int64)
            grown_bad = np.zeros_like(grown_total)
            at = self.first - new_first
            grown_total[at : at + self.total.size] = self.total
            grown_bad[at : at + self.bad.size] = self.bad
            self.first, self.total, self.bad = new_first, grown_total, grown_bad
        at = start - self.first
        self.total[at : at + total.size] += total
        self.bad[at : at + bad.size] += bad

    def window(self, lo: int, hi: int) -> tuple[IntArray, IntArray]:
        """Counts of the absolute bins ``lo..hi`` (zeros where nothing was counted)."""
        total = np.zeros(hi - lo + 1, dtype=np.int64)
        bad = np.zeros_like(total)
        a, b = max(lo, self.first), min(hi, self.last)
        if a <= b:
            total[a - lo : b - lo + 1] = self.total[a - self.first : b - self.first + 1]
            bad[a - lo : b - lo + 1] = self.bad[a - self.first : b - self.first + 1]
        return total, bad

    def prefix_sums(self, lo: int, hi: int, *, bad: bool, dtype: Any) -> np.ndarray[Any, Any]:
        """Running totals of the (bad) counts over absolute bins ``lo..hi``, in ``dtype``."""
        counts = self.bad if bad else self.total
        out = np.zeros(hi - lo + 1, dtype=dtype)
        a, b = max(lo, self.first), min(hi, self.last)
        if a <= b:
            part = out[a - lo : b - lo + 1]
            np.cumsum(counts[a - self.first : b - self.first + 1], out=part, dtype=dtype)
            out[b - lo + 1 :] = part[-1]
        return out

    def span(self) -> tuple[int, int] | None:
        """Absolute bins of the first and the last event counted; None before any."""
        nz = np.flatnonzero(self.total)
        return None if nz.size == 0 else (self.first + int(nz[0]), self.first + int(nz[-1]))


def _is_sorted(t: FloatArray) -> bool:
    for i in range(0, t.size, 1 << 20):
        part = t[i : i + (1 << 20) + 1]
        if not bool(np.all(part[:-1] <= part[1:])):
            return False
    return True


def _count_at_most(t: FloatArray, edges: FloatArray) -> IntArray:
    """For ascending ``t`` and ``edges``: how many times are <= each edge. A binary search among
    every 64th time, then a branch-free one within the 63 times left, so memory is touched
    near each edge only. A probe past the end reads the last time (``mode="clip"``): it adds only
    when every time is <= the edge, and the count is capped at ``t.size``."""
    # a contiguous copy: a search over a strided view would touch the whole array
    at = np.searchsorted(np.ascontiguousarray(t[_SUB - 1 :: _SUB]), edges, side="right")
    at *= _SUB
    probe = np.empty_like(at)
    values = np.empty(at.size, dtype=np.float64)
    le = np.empty(at.size, dtype=bool)
    inc = np.empty_like(at)
    step = _SUB // 2
    while step >= 1:
        np.add(at, step - 1, out=probe)
        np.take(t, probe, mode="clip", out=values)
        np.less_equal(values, edges, out=le)
        np.multiply(le, step, out=inc)
        at += inc
        step //= 2
    return np.asarray(np.minimum(at, t.size, out=at), dtype=np.int64)
