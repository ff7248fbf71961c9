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
- otherwise every event's bin, computed in cache-sized chunks and counted with ``np.bincount``
  chunk by chunk when a chunk spans few bins, else all at once.

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

MAX_BINS = 5_000_000
_CHUNK = 1 << 19
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
        self._low = MAX_BINS**2  # absolute bins of the earliest and latest event counted
        self._high = -(MAX_BINS**2)

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
        sample = _sorted_sample(t) if events.count is None else None
        if sample is not None:
            t_min, t_max = float(t[0]), float(t[-1])
            lo, hi = self._bin(t_min), self._bin(t_max)
            self._reserve(lo, hi)
            if t.size >= _DENSE * (hi - lo + 1):
                bad = np.asarray(events.bad, dtype=bool)
                found = self._search_sorted(t, sample, bad, lo, hi)
                if found is not None:
                    self._accumulate(lo, *found)
                    return
        self._count_chunks(events)

    # --- the two counting paths ---------------------------------------------------------------

    def _bin(self, t: float) -> int:
        """Bin of one time, relative to the origin."""
        assert self._origin is not None
        return math.ceil((t - self._origin * self.bin_s) / self.bin_s)

    def _bins(self, t: FloatArray) -> FloatArray:
        assert self._origin is not None
        out = np.subtract(t, float(self._origin * self.bin_s))
        if self.bin_s != 1:
            np.divide(out, self.bin_s, out=out)
        return np.ceil(out, out=out)

    def _bins_into(self, t: FloatArray, work: FloatArray, out: IntArray) -> IntArray:
        """``_bins`` as integers, through preallocated buffers."""
        assert self._origin is not None
        np.subtract(t, float(self._origin * self.bin_s), out=work)
        if self.bin_s != 1:
            np.divide(work, self.bin_s, out=work)
        np.ceil(work, out=out, casting="unsafe")
        return out

    def _search_sorted(
        self,
        t: FloatArray,
        sample: FloatArray,
        bad: np.ndarray[Any, np.dtype[np.bool_]],
        lo: int,
        hi: int,
    ) -> tuple[IntArray, IntArray] | None:
        assert self._origin is not None
        ks = np.arange(lo - 1, hi + 1, dtype=np.int64)
        edges = (ks + self._origin).astype(np.float64) * self.bin_s
        pos = _count_at_most(t, sample, edges)
        # The formula on both sides of every edge: the last time counted and the first not.
        last = self._bins(np.take(t, pos - 1, mode="clip"))
        first = self._bins(np.take(t, pos, mode="clip"))
        if not (np.all((last <= ks) | (pos == 0)) and np.all((first > ks) | (pos == t.size))):
            return None
        bad_pos = np.searchsorted(np.flatnonzero(bad), pos)
        return np.diff(pos), np.diff(bad_pos)

    def _count_chunks(self, events: SLIEvents) -> None:
        """Every event's bin, a cache-sized chunk at a time, counted chunk by chunk while chunks
        span few bins (times in roughly increasing order, or bins wide next to the chunk);
        otherwise the bins of all events are kept and counted at once. Each chunk's bins are
        shifted to start at 0 (``np.bincount`` sizes its output to the highest): by the bin of
        its first time when times look ascending, else by the lowest bin of the first chunk; a
        chunk reaching below that is shifted further."""
        t = events.times
        chunk = _CHUNK
        ints = np.empty(min(chunk, t.size), dtype=np.int64)
        floats = np.empty(ints.size, dtype=np.float64)
        bad_at = np.flatnonzero(events.bad) if events.count is None else None
        low = ascending = 0
        acc = _Span()
        for i in range(0, t.size, chunk):
            x = t[i : i + chunk]
            idx = self._bins_into(x, floats[: x.size], ints[: x.size])
            if i == 0:
                low = int(idx.min())
                ascending = low == int(idx[0])
            lo = int(idx[0]) if ascending else low
            idx -= lo
            self._check_span(int(idx.min()), int(idx.max()))  # before bincount sizes anything
            if bad_at is not None:
                try:
                    total = np.bincount(idx)
                except ValueError:  # bins below the shift
                    lo += _shift_to_zero(idx)
                    total = np.bincount(idx)
                a, b = np.searchsorted(bad_at, (i, i + x.size))
                bad = np.bincount(idx[bad_at[a:b] - i], minlength=total.size)
            else:
                assert events.count is not None
                lo += _shift_to_zero(idx)
                total = _round(np.bincount(idx, weights=events.count[i : i + chunk]))
                weights = events.bad[i : i + chunk]
                bad = _round(np.bincount(idx, weights=weights, minlength=total.size))
            if total.size > (chunk // 2 if i == 0 else 8 * chunk):
                # bins too wide to count chunk by chunk: the rest all at once
                rest = slice(i, None)
                count = None if events.count is None else events.count[rest]
                self._count_all(SLIEvents(t[rest], events.bad[rest], count))
                break
            acc.add(lo, total, bad)
        if acc.total is not None:
            assert acc.bad is not None
            self._accumulate(acc.lo, acc.total[: acc.size], acc.bad[: acc.size])

    def _count_all(self, events: SLIEvents) -> None:
        t = events.times
        t_min, t_max = float(t.min()), float(t.max())
        lo, hi = self._bin(t_min), self._bin(t_max)
        self._check_span(lo, hi)
        n = hi - lo + 1
        idx = np.empty(t.size, dtype=np.int64)
        work = np.empty(min(_CHUNK, t.size), dtype=np.float64)
        for i in range(0, t.size, _CHUNK):
            x = t[i : i + _CHUNK]
            self._bins_into(x, work[: x.size], idx[i : i + x.size])
        idx -= lo
        if events.count is None:
            total = np.bincount(idx, minlength=n)
            bad = np.bincount(idx[np.flatnonzero(events.bad)], minlength=n)
        else:
            total = _round(np.bincount(idx, weights=events.count, minlength=n))
            bad = _round(np.bincount(idx, weights=events.bad, minlength=n))
        self._accumulate(lo, total, bad)

    def _check_span(self, lo: int, hi: int) -> None:
        if hi - lo + 1 > MAX_BINS:
            raise SLOSpecError(
                f"the events span {hi - lo + 1} bins of {self.bin_s} s (at most {MAX_BINS}); are "
                "all times in seconds on one clock? Otherwise choose windows and an evaluation "
                "interval with a larger common divisor, or a shorter time range"
            )

    def _reserve(self, lo: int, hi: int) -> None:
        """Make room for the bins ``lo..hi`` (relative) at once, rather than growing to them."""
        assert self._origin is not None
        self._check_span(min(self._low, lo + self._origin), max(self._high, hi + self._origin))
        start, end = lo + self._origin, hi + self._origin
        if self.total.size == 0:
            self.first = start
            self.total = np.zeros(end - start + 1, dtype=np.int64)
            self.bad = np.zeros_like(self.total)
        elif start < self.first or end > self.last:
            self._grow(min(start, self.first), max(end, self.last))

    def _grow(self, new_first: int, new_last: int) -> None:
        grown_total = np.zeros(new_last - new_first + 1, dtype=np.int64)
        grown_bad = np.zeros_like(grown_total)
        at = self.first - new_first
        grown_total[at : at + self.total.size] = self.total
        grown_bad[at : at + self.bad.size] = self.bad
        self.first, self.total, self.bad = new_first, grown_total, grown_bad

    def _accumulate(self, lo: int, total: IntArray, bad: IntArray) -> None:
        assert self._origin is not None
        start = lo + self._origin
        end = start + total.size - 1
        self._low, self._high = min(self._low, start), max(self._high, end)
        self._check_span(self._low, self._high)
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
            self._grow(new_first, new_last)
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
        return None if self._low > self._high else (self._low, self._high)


class _Span:
    """Counts of consecutive bins from ``lo``, grown (with slack) as chunks add to them."""

    def __init__(self) -> None:
        self.lo = 0
        self.size = 0
        self.total: IntArray | None = None
        self.bad: IntArray | None = None

    def add(self, lo: int, total: IntArray, bad: IntArray) -> None:
        if self.total is None or self.bad is None:
            self.lo, self.size = lo, total.size
            self.total = np.zeros(2 * total.size, dtype=np.int64)
            self.bad = np.zeros_like(self.total)
        elif lo < self.lo or lo + total.size > self.lo + self.total.size:
            new_lo = min(lo, self.lo)
            new_hi = max(lo + total.size, self.lo + self.size)
            grown = np.zeros(2 * (new_hi - new_lo), dtype=np.int64)
            grown_bad = np.zeros_like(grown)
            at = self.lo - new_lo
            grown[at : at + self.size] = self.total[: self.size]
            grown_bad[at : at + self.size] = self.bad[: self.size]
            self.lo, self.total, self.bad = new_lo, grown, grown_bad
        at = lo - self.lo
        self.total[at : at + total.size] += total
        self.bad[at : at + bad.size] += bad
        self.size = max(self.size, at + total.size)


def _shift_to_zero(idx: IntArray) -> int:
    """Shift ``idx`` up so that its lowest entry is 0 when it is below; return the shift."""
    low = min(int(idx.min()), 0)
    idx -= low
    return low


def _round(x: np.ndarray[Any, Any]) -> IntArray:
    """Weighted counts (sums of integers, exact below 2**53) back to integers."""
    return np.asarray(np.rint(x), dtype=np.int64)


def _sorted_sample(t: FloatArray) -> FloatArray | None:
    """Every 64th time (``t[63::64]``, contiguous) when ``t`` is ascending, else None. The order
    is checked a million times at a time, stopping at the first descent."""
    piece = 1 << 20
    buf = np.empty(min(piece, t.size), dtype=bool)
    for i in range(0, t.size, piece):
        part = t[i : i + piece + 1]
        step = buf[: part.size - 1]
        np.less_equal(part[:-1], part[1:], out=step)
        if not bool(step.all()):
            return None
    return np.ascontiguousarray(t[_SUB - 1 :: _SUB])


def _count_at_most(t: FloatArray, sample: FloatArray, edges: FloatArray) -> IntArray:
    """For ascending ``t`` and ``edges``: how many times are <= each edge. A binary search in
    ``sample`` (every 64th time), then a branch-free one within the 63 times left, so memory is
    touched near each edge only. A probe past the end reads the last time (``mode="clip"``): it
    adds only when every time is <= the edge, and the count is capped at ``t.size``."""
    at = np.searchsorted(sample, edges, side="right")
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
