"""The per-request state the observer keeps between events: plain floats and ints."""

from __future__ import annotations

from collections import deque

from fleetwatch.core.records.schema import ITL_BOUNDS
from fleetwatch.telemetry.hooks import RequestInfo
from fleetwatch.telemetry.metrics.serving import Series

__all__ = ["RequestState"]


class RequestState:
    """Everything needed to build a request's span, record and metrics once it finishes.

    Times are seconds on the engine's clock; ``None`` means the event did not happen. Written only
    by the engine's step-loop thread until the request finishes, then handed to the export worker.
    """

    __slots__ = (
        "arrival",
        "batch_size",
        "cached_tokens",
        "error_type",
        "events",
        "finish_reason",
        "finished",
        "first_token",
        "gaps",
        "info",
        "last_token",
        "max_itl",
        "output_tokens",
        "preempted_at",
        "preemptions",
        "prefill_tokens",
        "recent_gaps",
        "scheduled",
        "series",
        "stall",
        "status",
        "text",
    )

    def __init__(
        self, t: float, info: RequestInfo, series: Series | None, *, gaps: bool = True
    ) -> None:
        self.info = info
        self.series = series
        self.arrival = t
        self.scheduled: float | None = None
        self.first_token: float | None = None
        self.last_token = t
        self.finished = t
        self.batch_size = 0
        self.prefill_tokens = 0
        self.cached_tokens = 0
        self.preemptions = 0
        self.preempted_at: float | None = None
        self.stall = 0.0
        self.max_itl: float | None = None
        self.gaps: list[int] = [0] * (len(ITL_BOUNDS) + 1) if gaps else []
        """Inter-token gaps per ``ITL_BOUNDS`` bucket (the record's ``itl_buckets``); empty
        when not counted (nothing writes records)."""
        self.recent_gaps: deque[int] = deque(maxlen=RECENT_GAPS) if gaps else _NO_GAPS
        """Buckets of the latest gaps, newest last: a request an engine ends early (a stop
        string found after more tokens were generated) keeps only the gaps of the tokens it
        reports (``record_gaps``)."""
        self.events: list[tuple[str, float]] | None = None
        self.status = "ok"
        self.finish_reason: str | None = None
        self.error_type: str | None = None
        self.output_tokens = 0
        self.text: dict[str, str] | None = None

    def add_event(self, name: str, t: float) -> None:
        if self.events is None:
            self.events = []
        self.events.append((name, t))

    def end_stall(self, t: float) -> None:
        """Close an open preemption at ``t`` (resumed or finished), adding it to ``stall``."""
        if self.preempted_at is not None:
            self.stall += t - self.preempted_at
            self.preempted_at = None

    # Derived durations (seconds) that spans and metrics need, as ``RequestRecord`` defines them.
    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.arrival

    @property
    def tpot_s(self) -> float | None:
        if self.first_token is None or self.output_tokens < 2:
            return None
        return (self.finished - self.first_token) / (self.output_tokens - 1)


RECENT_GAPS = 64
"""How many of a request's latest gap buckets are kept to trim undelivered tokens' gaps."""
_NO_GAPS: deque[int] = deque(maxlen=0)


def record_gaps(s: RequestState) -> tuple[int, ...] | None:
    """``itl_buckets`` for the record: the gaps of the ``output_tokens`` it reports (None when
    they were not counted). Gaps of tokens generated past an early end (which the exporter's
    histogram did observe) are taken off, newest first; past ``RECENT_GAPS`` of them, from the
    highest buckets."""
    if not s.gaps:
        return None
    gaps = list(s.gaps)
    excess = sum(gaps) - max(s.output_tokens - 1, 0)
    recent = list(s.recent_gaps)
    while excess > 0:
        i = recent.pop() if recent else max(j for j, n in enumerate(gaps) if n > 0)
        gaps[i] -= 1
        excess -= 1
    return tuple(gaps)
