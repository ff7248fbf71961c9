"""Events counted per time bin: the one pass over events that every window is computed from.

Bin ``k`` (absolute: ``k * bin_s`` seconds on the records' clock) holds the events with times in
``((k - 1) * bin_s, k * bin_s]``, the events a counter sampled at ``k * bin_s`` counted since the
sample one bin earlier. A time's bin is ``ceil(t / bin_s)`` with IEEE division: a correctly
rounded quotient of a time just above ``k * bin_s`` is above ``k`` (the time's spacing divided by
``bin_s`` is more than half the quotient's), and one at or below it is at most ``k``, so the
formula is exactly the interval above (for every time not within ``1e-300`` of 0, where the
quotient underflows; checked for bins of 1 to 100,000 s up to ``2**52``).

Events are counted a chunk at a time (the chunk is read from memory once and the rest of the work
on it stays in cache), in one of two ways with the same result; bad events are taken as their
positions (``SLIEvents.bad_positions``), so only the bins of bad events are looked up:

- a chunk of times in ascending order (records as a sink writes them, in finish order) with many
  events per bin: the order is checked (each time against the next) and every bin edge in it is
  located from the bins of every 64th time (counted, so how many of them lie before each edge is
  known), then by a branch-free binary search within 64 times, so the work is per bin rather than
  per event; the times on both sides of every edge are checked against the
  formula (any disagreement: the second way). A chunk out of order is counted the second way, and so
  are the chunks after it until one whose every 64th time is ascending (records joined from several
  files, each in finish order) goes back to the search;
- otherwise every event's bin, computed in place in the chunk's buffer (divide, ceil, and an
  exact float-to-integer step: adding ``2**52`` and reading the bits), counted with
  ``np.bincount``: chunk by chunk when a chunk spans few bins, else all chunks' bins at once.

``add`` may be called batch after batch (a Parquet file streamed row group by row group); the
counts grow to cover new bins. Memory: 16 bytes per bin between the first and the last event (30
days of 1 s bins: 41 MB) plus one batch's bins, whatever the number of events.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.events import SLIEvents

__all__ = ["MAX_BINS", "BinCounts"]

IntArray = np.ndarray[Any, np.dtype[np.int64]]
FloatArray = np.ndarray[Any, np.dtype[np.float64]]
BoolArray = np.ndarray[Any, np.dtype[np.bool_]]

MAX_BINS = 5_000_000
_CHUNK = 1 << 19  # 4 MiB of times: held in the last-level cache while a chunk's work runs
_SUB = 64  # the coarse search looks at every 64th time; 2**6 - 1 left to search within
_DENSE = 16  # events per bin from which the search beats binning each (measured: BENCHMARKS.md)
_MAGIC = float(2**52)  # an integer n in [0, 2**52) added to this has n as its low bits
_MAGIC_BITS = int(np.float64(_MAGIC).view(np.int64))
_LIMIT = float(2**50)  # bins beyond this cannot take the exact integer step


class BinCounts:
    """Counts of events and bad events per bin of ``bin_s`` seconds; ``first`` is the absolute bin
    of ``total[0]``. ``chunk``: events counted at a time (default 2**19, 4 MiB of times); the
    counts are the same for any chunk, a small one puts chunk boundaries among few events."""

    def __init__(self, bin_s: int, *, chunk: int | None = None) -> None:
        self.bin_s = int(bin_s)
        self.chunk = _CHUNK if chunk is None else int(chunk)
        if self.chunk < 1:
            raise ValueError(f"chunk must be >= 1 event, got {chunk}")
        self.first = 0
        self.total: IntArray = np.zeros(0, dtype=np.int64)
        self.bad: IntArray = np.zeros(0, dtype=np.int64)
        self._low = MAX_BINS**2  # absolute bins of the earliest and latest event counted
        self._high = -(MAX_BINS**2)

    @property
    def last(self) -> int:
        """Absolute bin of the last count held (``first - 1`` when empty)."""
        return self.first + self.total.size - 1

    def add(self, events: SLIEvents) -> None:
        """Count ``events`` into their bins."""
        if events.times.size == 0:
            return
        unit = events.count is None
        bad_at = events.bad_positions() if unit else None
        acc = _Span()
        n = events.times.size
        work = np.empty(min(self.chunk, n), dtype=np.float64)
        start = 0
        while start < n:  # each turn of the binned way counts at least one chunk
            if unit:
                start = self._count_sorted(events.times, bad_at, acc, start, work)
            if start < n:
                start = self._count_binned(events, bad_at, start, acc, work)
        if acc.total is not None:
            assert acc.bad is not None
            self._accumulate(acc.lo, acc.total[: acc.size], acc.bad[: acc.size])

    def add_counts(self, bins: Any, total: Any, bad: Any) -> None:
        """Count events already binned elsewhere (a query engine's ``GROUP BY`` of each event's
        bin, ``ceil(t / bin_s)``): ``total`` and ``bad`` events of each absolute bin of
        ``bins`` (each bin once)."""
        k = np.asarray(bins, dtype=np.int64)
        if not k.size:
            return
        lo, hi = int(k.min()), int(k.max())
        self._check_span(lo, hi)
        dense_total = np.zeros(hi - lo + 1, dtype=np.int64)
        dense_bad = np.zeros_like(dense_total)
        np.add.at(dense_total, k - lo, np.asarray(total, dtype=np.int64))
        np.add.at(dense_bad, k - lo, np.asarray(bad, dtype=np.int64))
        self._accumulate(lo, dense_total, dense_bad)

    # --- the two counting paths ---------------------------------------------------------------

    def _bin(self, t: float) -> int:
        """Bin of one time."""
        return math.ceil(t / self.bin_s)

    def _bins(self, t: FloatArray, out: FloatArray) -> FloatArray:
        """Bins of ``t`` as floats (integral values), written to ``out``."""
        if self.bin_s == 1:
            return np.ceil(t, out=out)
        np.divide(t, float(self.bin_s), out=out)
        return np.ceil(out, out=out)

    def _count_sorted(
        self, t: FloatArray, bad_at: IntArray | None, acc: _Span, start: int, work: FloatArray
    ) -> int:
        """Count chunks of ``t`` from ``start`` by search while they are ascending and dense;
        return where the first chunk that is not starts (``t.size``: all counted)."""
        chunk = self.chunk
        order = work.view(bool)  # the comparisons of one chunk
        for i in range(start, t.size, chunk):
            x = t[i : i + chunk]
            if not self._dense(x):
                return i
            step = order[: x.size - 1]
            np.less_equal(x[:-1], x[1:], out=step)
            if not bool(step.all()):
                return i
            lo, hi = self._bin(float(x[0])), self._bin(float(x[-1]))
            self._check_span(lo, hi)
            pos = self._search(x, lo, hi)
            if pos is None:
                return i
            acc.add(lo, np.diff(pos), _bad_between(bad_at, i, pos))
        return t.size

    def _dense(self, x: FloatArray) -> bool:
        """Whether ``x`` (if ascending) has many times per bin: its ends finite, at least
        ``_DENSE`` times per bin between them."""
        if not (math.isfinite(x[0]) and math.isfinite(x[-1])):
            return False  # the other way names the bad time
        return bool(x.size >= _DENSE * (self._bin(float(x[-1])) - self._bin(float(x[0])) + 1))

    def _search(self, x: FloatArray, lo: int, hi: int) -> IntArray | None:
        """For ascending ``x`` whose bins run ``lo..hi``: how many times are in bins up to each of
        ``lo - 1..hi`` (None when the formula disagrees with the search at an edge)."""
        pos = np.empty(hi - lo + 2, dtype=np.int64)
        pos[0], pos[-1] = 0, x.size
        if hi > lo:
            ks = np.arange(lo, hi, dtype=np.int64)
            # every 64th time's bin: how many of those times are in bins up to each edge
            sample = x[_SUB - 1 :: _SUB]
            sample_bins = self._bins(sample, np.empty(sample.size, dtype=np.float64))
            at = np.bincount(sample_bins.astype(np.int64) - lo, minlength=hi - lo + 1)[:-1]
            inner = _refine(x, np.cumsum(at, out=at), ks.astype(np.float64) * self.bin_s)
            # The formula on both sides of every edge: the last time counted and the first not.
            around = np.empty((2, ks.size), dtype=np.int64)
            np.subtract(inner, 1, out=around[0])
            around[1] = inner
            sides = np.take(x, around, mode="clip")
            sides = self._bins(sides, sides)
            sides -= ks
            last, first = sides[0] <= 0, sides[1] > 0
            if not (np.all(last | (inner == 0)) and np.all(first | (inner == x.size))):
                return None
            pos[1:-1] = inner
        return pos

    def _count_binned(
        self, events: SLIEvents, bad_at: IntArray | None, start: int, acc: _Span, work: FloatArray
    ) -> int:
        """Every event's bin from ``start`` on, a chunk at a time, counted chunk by chunk while
        chunks span few bins (times in roughly increasing order, or bins wide next to the chunk);
        otherwise the bins of all events left are kept and counted at once. Bins are shifted to
        start at 0 (``np.bincount`` sizes its output to the highest): by the chunk's lowest bin.
        Unit events stop at a later chunk that is dense and whose every 64th time is ascending
        (records joined from several files, each in finish order: the search may take it):
        return where counting stopped (``t.size``: all counted)."""
        t = events.times
        chunk = self.chunk
        bad_bins: list[IntArray] = []
        stop = t.size
        for i in range(start, t.size, chunk):
            x = t[i : i + chunk]
            if i > start and events.count is None and self._dense(x) and _sampled_ascending(x):
                stop = i
                break
            idx, lo, hi = self._indices(x, work[: x.size])
            if hi - lo + 1 > (chunk // 2 if i == start else 8 * chunk):
                # bins too wide to count chunk by chunk: the rest all at once
                self._count_all(_rest(events, bad_at, i), acc, bad_bins)
                break
            if events.count is None:
                assert bad_at is not None
                total = np.bincount(idx, minlength=hi - lo + 1)
                a, b = np.searchsorted(bad_at, (i, i + x.size))
                bad_bins.append(idx[bad_at[a:b] - i] + lo)
                acc.add(lo, total, np.zeros(0, dtype=np.int64))
            else:
                w = events.count[i : i + chunk]
                total = _round(np.bincount(idx, weights=w, minlength=hi - lo + 1))
                bad_w = events.bad_weights()[i : i + chunk]
                bad = _round(np.bincount(idx, weights=bad_w, minlength=total.size))
                acc.add(lo, total, bad)
        if bad_bins:
            _add_bad(acc, np.concatenate(bad_bins))
        return stop

    def _indices(self, x: FloatArray, work: FloatArray) -> tuple[IntArray, int, int]:
        """Bins of ``x`` less the lowest, as integers in ``work``'s memory; the lowest and highest
        bin."""
        q = self._bins(x, work)
        lo_f, hi_f = float(q.min()), float(q.max())
        if not (abs(lo_f) < _LIMIT and abs(hi_f) < _LIMIT):
            raise _not_finite(x)
        lo, hi = int(lo_f), int(hi_f)
        self._check_span(lo, hi)
        # q - lo is an integer in [0, 2**52): added to 2**52 it is exact and is the low bits
        np.add(q, _MAGIC - lo_f, out=q)
        idx = q.view(np.int64)
        np.subtract(idx, _MAGIC_BITS, out=idx)
        return idx, lo, hi

    def _count_all(self, events: SLIEvents, acc: _Span, bad_bins: list[IntArray]) -> None:
        t = events.times
        low, high = float(t.min()), float(t.max())
        if not (abs(low) < _LIMIT and abs(high) < _LIMIT):
            raise _not_finite(t)
        lo, hi = self._bin(low), self._bin(high)
        self._check_span(lo, hi)
        idx = np.empty(t.size, dtype=np.int64)
        flat = idx.view(np.float64)
        for i in range(0, t.size, self.chunk):
            x = t[i : i + self.chunk]
            q = self._bins(x, flat[i : i + x.size])
            np.add(q, _MAGIC - lo, out=q)
            part = idx[i : i + x.size]
            np.subtract(part, _MAGIC_BITS, out=part)
        n = hi - lo + 1
        if events.count is None:
            acc.add(lo, np.bincount(idx, minlength=n), np.zeros(0, dtype=np.int64))
            bad_bins.append(idx[events.bad_positions()] + lo)
        else:
            total = _round(np.bincount(idx, weights=events.count, minlength=n))
            bad_w = events.bad_weights()
            acc.add(lo, total, _round(np.bincount(idx, weights=bad_w, minlength=n)))

    def _check_span(self, lo: int, hi: int) -> None:
        if hi - lo + 1 > MAX_BINS:
            raise SLOSpecError(
                f"the events span {hi - lo + 1} bins of {self.bin_s} s (at most {MAX_BINS}); are "
                "all times in seconds on one clock? Otherwise choose windows and an evaluation "
                "interval with a larger common divisor, or a shorter time range"
            )

    def _grow(self, new_first: int, new_last: int) -> None:
        grown_total = np.zeros(new_last - new_first + 1, dtype=np.int64)
        grown_bad = np.zeros_like(grown_total)
        at = self.first - new_first
        grown_total[at : at + self.total.size] = self.total
        grown_bad[at : at + self.bad.size] = self.bad
        self.first, self.total, self.bad = new_first, grown_total, grown_bad

    def _accumulate(self, start: int, total: IntArray, bad: IntArray) -> None:
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
        """Add counts from bin ``lo`` on (``bad`` may be shorter than ``total``)."""
        n = max(total.size, bad.size)
        if self.total is None or self.bad is None:
            self.lo, self.size = lo, n
            self.total = np.zeros(2 * n, dtype=np.int64)
            self.bad = np.zeros_like(self.total)
        elif lo < self.lo or lo + n > self.lo + self.total.size:
            new_lo = min(lo, self.lo)
            new_hi = max(lo + n, self.lo + self.size)
            grown = np.zeros(2 * (new_hi - new_lo), dtype=np.int64)
            grown_bad = np.zeros_like(grown)
            at = self.lo - new_lo
            grown[at : at + self.size] = self.total[: self.size]
            grown_bad[at : at + self.size] = self.bad[: self.size]
            self.lo, self.size, self.total, self.bad = new_lo, self.size + at, grown, grown_bad
        at = lo - self.lo
        self.total[at : at + total.size] += total
        self.bad[at : at + bad.size] += bad
        self.size = max(self.size, at + n)


def _sampled_ascending(x: FloatArray) -> bool:
    """Whether every 64th time of ``x`` is in ascending order (cheap: a 64th of the chunk)."""
    return bool(np.all(x[:-64:64] <= x[64::64]))


def _rest(events: SLIEvents, bad_at: IntArray | None, start: int) -> SLIEvents:
    """The events from position ``start`` on."""
    t = events.times[start:]
    if events.count is not None:
        return SLIEvents(t, events.bad_weights()[start:], events.count[start:])
    assert bad_at is not None
    return SLIEvents(t, None, bad_at=bad_at[np.searchsorted(bad_at, start) :] - start)


def _add_bad(acc: _Span, bins: IntArray) -> None:
    """Count bad events of absolute bins ``bins`` into ``acc``."""
    if bins.size:
        lo = int(bins.min())
        acc.add(lo, np.zeros(0, dtype=np.int64), np.bincount(bins - lo))


def _not_finite(t: FloatArray) -> SLOSpecError:
    return SLOSpecError(
        f"event times must be finite seconds on one clock; found {float(np.min(t))!r} to "
        f"{float(np.max(t))!r}"
    )


def _round(x: np.ndarray[Any, Any]) -> IntArray:
    """Weighted counts (sums of integers, exact below 2**53) back to integers."""
    return np.asarray(np.rint(x), dtype=np.int64)


def _bad_between(bad_at: IntArray | None, start: int, pos: IntArray) -> IntArray:
    """Bad events between consecutive positions ``pos`` (relative to ``start``; ascending,
    from 0), given the positions of all bad events ``bad_at``: each bad event's slot searched
    when they are fewer than the slots, else each slot's bound searched among them."""
    if bad_at is None:
        return np.zeros(pos.size - 1, dtype=np.int64)
    a, b = np.searchsorted(bad_at, (start, start + int(pos[-1])))
    rel = bad_at[a:b] - start
    if rel.size < pos.size:
        slot = np.searchsorted(pos, rel, side="right") - 1
        return np.bincount(slot, minlength=pos.size - 1)
    return np.diff(np.searchsorted(rel, pos))


def _refine(t: FloatArray, at: IntArray, edges: FloatArray) -> IntArray:
    """For ascending ``t`` and ``edges``: how many times are <= each edge, given ``at``: how many
    of every 64th time (``t[63::64]``) are. The rest is among the 63 times from ``64 * at``:
    found by a branch-free binary search, so memory is touched near each edge only. A probe past
    the end reads the last time (``mode="clip"``): it adds only when every time is <= the edge,
    and the count is capped at ``t.size``."""
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
