"""Event counts and burn rates per window on an evaluation grid, the way Prometheus computes them.

At every evaluation time t (multiples of the step) and for every window w, the counts are the
events in (t - w, t], which is what ``increase(counter[w])`` returns when the counter is sampled at
the evaluation times (Prometheus 2 reads the closed range [t - w, t], so the sample at t - w is
the baseline). The ratio bad/total is NaN where no event fell in the window, as 0/0 is in PromQL,
so a comparison with it is false.

Events are binned once (``fleetwatch.slo.bins``) at the greatest common divisor of the step and the windows;
the timeline keeps one prefix sum of those bins, and every window at every evaluation is a
difference of two entries of it, computed when asked for (a block of evaluations at a time), so
no per-window array over the whole grid has to exist.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import reduce
from typing import Any

import numpy as np

from fleetwatch.slo.bins import MAX_BINS, BinCounts
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.events import SLIEvents

__all__ = ["Timeline", "bin_seconds", "timeline", "window_counts"]

IntArray = np.ndarray[Any, np.dtype[np.int64]]
FloatArray = np.ndarray[Any, np.dtype[np.float64]]


@dataclass(frozen=True, slots=True)
class Timeline:
    """Counts per window at each evaluation time ``times`` (seconds, every ``step_s``).

    ``cum_total``/``cum_bad`` are prefix sums over bins of ``bin_s`` seconds: entry ``i`` counts
    the events up to the end of absolute bin ``first_bin + i`` (entry 0 is always 0). Evaluation
    ``k`` sits at entry ``at0 + k * step_s // bin_s``.
    """

    times: FloatArray
    step_s: int
    bin_s: int
    first_bin: int
    at0: int
    cum_total: np.ndarray[Any, Any]
    cum_bad: np.ndarray[Any, Any]

    @property
    def stride(self) -> int:
        return self.step_s // self.bin_s

    @property
    def total(self) -> Mapping[int, IntArray]:
        """Events in each window at every evaluation (computed on access)."""
        return _WindowCounts(self, bad=False)

    @property
    def bad(self) -> Mapping[int, IntArray]:
        """Bad events in each window at every evaluation (computed on access)."""
        return _WindowCounts(self, bad=True)

    def _cum(self, cum: np.ndarray[Any, Any], lo: int, hi: int, back: int) -> IntArray:
        """``cum`` at the entries of evaluations lo..hi-1 shifted ``back`` entries; 0 before 0."""
        r = self.stride
        start = self.at0 + lo * r - back
        n = hi - lo
        if start >= 0:
            return np.asarray(cum[start : start + n * r : r])
        head = min(n, (-start + r - 1) // r)
        out = np.zeros(n, dtype=cum.dtype)
        first = start + head * r
        out[head:] = cum[first : first + (n - head) * r : r]
        return out

    def counts(
        self, window_s: int, lo: int = 0, hi: int | None = None
    ) -> tuple[IntArray, IntArray]:
        """(events, bad events) in (t - window_s, t] for evaluations ``lo..hi-1``."""
        hi = self.times.size if hi is None else hi
        if window_s % self.bin_s:
            raise SLOSpecError(f"window {window_s} s is not a multiple of the {self.bin_s} s bins")
        back = window_s // self.bin_s
        total = self._cum(self.cum_total, lo, hi, 0) - self._cum(self.cum_total, lo, hi, back)
        bad = self._cum(self.cum_bad, lo, hi, 0) - self._cum(self.cum_bad, lo, hi, back)
        return total, bad

    def ratio(self, window_s: int, lo: int = 0, hi: int | None = None) -> FloatArray:
        """Error ratio over ``window_s`` at each evaluation time; NaN where no events."""
        total, bad = self.counts(window_s, lo, hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(bad / total, dtype=np.float64)

    def burn(
        self, window_s: int, error_budget: float, lo: int = 0, hi: int | None = None
    ) -> FloatArray:
        """Burn rate: error ratio / error budget (1.0 spends the budget exactly over the period)."""
        return self.ratio(window_s, lo, hi) / error_budget

    def entry(self, k: int) -> int:
        """Prefix-sum entry of evaluation ``k``."""
        return self.at0 + k * self.stride

    def bin_end_s(self, entry: int) -> float:
        """End time of the bin whose prefix-sum entry is ``entry``."""
        return float((self.first_bin + entry) * self.bin_s)


class _WindowCounts(Mapping[int, IntArray]):
    def __init__(self, tl: Timeline, *, bad: bool) -> None:
        self._tl, self._bad = tl, bad

    def __getitem__(self, window_s: int) -> IntArray:
        total, bad = self._tl.counts(int(window_s))
        return np.asarray(bad if self._bad else total, dtype=np.int64)

    def __iter__(self) -> Iterator[int]:
        return iter(())

    def __len__(self) -> int:
        return 0


def bin_seconds(windows: Iterable[int], step_s: int) -> int:
    """The bin width: the greatest common divisor of the step and every window."""
    return reduce(math.gcd, (int(w) for w in windows), int(step_s))


def timeline(counts: BinCounts, step_s: int, start_s: float, end_s: float) -> Timeline:
    """The evaluation grid from ``start_s`` to ``end_s`` (rounded out to multiples of the step)
    over binned counts; events after the last evaluation are left out."""
    g = counts.bin_s
    if step_s % g:
        raise SLOSpecError(f"the step {step_s} s is not a multiple of the {g} s bins")
    first = math.floor(start_s / step_s) * step_s
    last = max(first, math.ceil(end_s / step_s) * step_s)
    times = np.arange(first, last + step_s, step_s, dtype=np.float64)
    a0, a1 = first // g, last // g
    span = counts.span()
    b0 = min(a0, span[0] if span is not None else a0) - 1
    if a1 - b0 + 1 > MAX_BINS:
        raise SLOSpecError(
            f"the records span {a1 - b0 + 1} bins of {g} s (at most {MAX_BINS}); are all times "
            "in seconds on one clock? Otherwise choose windows and an evaluation interval with a "
            "larger common divisor, or a shorter stretch of records"
        )
    cum_total = counts.prefix_sums(b0, a1, bad=False, dtype=np.int64)
    cum_bad = counts.prefix_sums(b0, a1, bad=True, dtype=np.int64)
    return Timeline(times, int(step_s), g, b0, a0 - b0, cum_total, cum_bad)


def window_counts(
    events: SLIEvents,
    windows: Iterable[int],
    step_s: int,
    *,
    start_s: float | None = None,
    end_s: float | None = None,
) -> Timeline:
    """Counts of events and bad events in (t - w, t] for each window w at each evaluation time t
    from ``start_s`` to ``end_s``, both rounded out to the step grid (multiples of ``step_s``
    since the epoch). By default the grid spans the events' bins: from the evaluation at or
    before the start of the first event's bin (so at most one evaluation before the first
    event) to the first evaluation at or after the last event."""
    if events.times.size == 0 and start_s is None:
        raise SLOSpecError("no requests to evaluate (the records select no events)")
    counts = BinCounts(bin_seconds(windows, step_s))
    counts.add(events)
    span = counts.span()
    if start_s is None:
        assert span is not None
        start_s = float((span[0] - 1) * counts.bin_s)
    if end_s is None:
        end_s = start_s if span is None else float(span[1] * counts.bin_s)
    return timeline(counts, step_s, start_s, end_s)
