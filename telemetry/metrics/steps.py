"""Engine-level step metrics: one append per step on the step loop, folded when read.

A ``StepStats`` is built every step; what it adds to (two histograms, five counters, the running,
waiting and KV gauges, the achieved-rate window) is worked out by ``fold``, which every scrape and
every periodic flush calls, so the step loop pays one ``list.append`` per step.
"""

from __future__ import annotations

import threading
from collections import deque

from fleetwatch.core.profiles import Profile, Signal
from fleetwatch.telemetry.hooks import StepStats
from fleetwatch.telemetry.metrics.histogram import BatchedHistogram

__all__ = ["StepMetrics"]


class StepMetrics:
    """Steps recorded by appending to ``pending`` (the step-loop thread only); the histograms,
    counters, ``last`` and ``achieved_rates`` include them once ``fold`` has run.

    ``fold`` may run on any thread: it reads a prefix of ``pending`` and deletes exactly that
    prefix, so steps appended meanwhile wait for the next fold. Steps are taken in order: a report
    of the engine's state between steps (no tokens) moves only ``last``.
    """

    def __init__(self, profile: Profile, window_steps: int) -> None:
        self.pending: list[StepStats] = []
        self.duration = BatchedHistogram(profile.metric(Signal.STEP_DURATION).buckets)
        self.tokens = BatchedHistogram(profile.metric(Signal.STEP_TOKENS).buckets)
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.bytes_read = 0.0
        self.flops = 0.0
        self.busy_s = 0.0
        self._last: StepStats | None = None
        self._lock = threading.Lock()
        self._window: deque[tuple[float, float, float]] = deque()
        self._window_steps = max(1, window_steps)
        self._win_bytes = 0.0
        self._win_flops = 0.0
        self._win_s = 0.0

    def fold(self) -> None:
        """Take the steps recorded since the last fold into the histograms, counters, ``last``
        and the rate window."""
        with self._lock:
            n = len(self.pending)
            if n == 0:
                return
            steps = self.pending[:n]
            del self.pending[:n]
            durations = self.duration.pending
            tokens = self.tokens.pending
            window = self._window
            for stats in steps:
                if stats.is_state_report:
                    continue
                d = stats.end_s - stats.start_s
                durations.append(d)
                tokens.append(stats.prefill_tokens + stats.decode_tokens)
                self.prefix_cache_queries += stats.prefix_cache_queries
                self.prefix_cache_hits += stats.prefix_cache_hits
                self.bytes_read += stats.bytes_read
                self.flops += stats.flops
                self.busy_s += d
                window.append((stats.bytes_read, stats.flops, d))
                self._win_bytes += stats.bytes_read
                self._win_flops += stats.flops
                self._win_s += d
                if len(window) > self._window_steps:
                    b, f, w = window.popleft()
                    self._win_bytes -= b
                    self._win_flops -= f
                    self._win_s -= w
            self._last = steps[-1]

    def flush(self) -> None:
        """Fold, then bin the step histograms' pending observations."""
        self.fold()
        self.duration.flush()
        self.tokens.flush()

    @property
    def last(self) -> StepStats | None:
        """The latest step or state report recorded (None before any)."""
        self.fold()
        return self._last

    def achieved_rates(self) -> tuple[float, float] | None:
        """(bytes/s, FLOP/s) over the last ``window_steps`` steps; None before the first step."""
        self.fold()
        if self._win_s <= 0.0:
            return None
        return self._win_bytes / self._win_s, self._win_flops / self._win_s
