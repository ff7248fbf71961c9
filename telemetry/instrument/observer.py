"""The one observer that fans engine events out to metrics, spans and records.

It keeps one table of ``RequestState`` keyed by request id. Every event method does a dict lookup
and a few float stores; metrics get list appends; spans and records are built from the finished
state by a background worker (``on_finished`` hands it over), so the step loop never waits on an
exporter or a file.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Sequence

from fleetwatch.core.records.schema import ITL_BOUNDS
from fleetwatch.telemetry.hooks import EngineObserver, RequestInfo, StepStats
from fleetwatch.telemetry.metrics.serving import Series, ServingMetrics
from fleetwatch.telemetry.request_state import RequestState

__all__ = ["TelemetryObserver"]


class TelemetryObserver(EngineObserver):
    """Every hook of ``fleetwatch.telemetry.hooks.EngineObserver``; see that module for event order.

    ``metrics`` may be None (metrics off); ``on_finished`` receives each finished request's state
    (None: nobody wants spans or records). ``goodput`` is (TTFT target s, TPOT target s).
    ``gaps``: count each request's inter-token gaps per bucket (what a record's ``itl_buckets``
    needs; off when nothing writes records).

    Histogram observations and each step's ``StepStats`` wait in ``pending`` lists until a
    scrape bins and folds them (off the step loop); the step loop does so itself only to bound
    memory: after ``flush_every_steps`` steps or ``flush_every_tokens`` tokens since the last
    time.
    Unknown request ids (events for requests that arrived before attaching) are ignored.
    """

    def __init__(
        self,
        metrics: ServingMetrics | None,
        on_finished: Callable[[RequestState], None] | None,
        *,
        goodput: tuple[float, float] | None = None,
        gaps: bool = True,
        flush_every_steps: int = 4096,
        flush_every_tokens: int = 65536,
    ) -> None:
        self.metrics = metrics
        self.on_finished = on_finished
        self.goodput = goodput
        self.gaps = gaps
        self.flush_every_steps = max(1, flush_every_steps)
        self.flush_every_tokens = max(1, flush_every_tokens)
        self.requests: dict[str, RequestState] = {}
        self._steps = 0
        self._tokens = 0

    def on_request_arrived(self, t: float, info: RequestInfo) -> None:
        m = self.metrics
        series = m.series(info.traffic_class, info.tenant) if m is not None else None
        self.requests[info.request_id] = RequestState(t, info, series, gaps=self.gaps)

    def on_request_scheduled(self, t: float, request_id: str, batch_size: int) -> None:
        s = self.requests.get(request_id)
        if s is None or s.scheduled is not None:
            return
        s.scheduled = t
        s.batch_size = batch_size
        if s.series is not None:
            s.series.queue.pending.append(t - s.arrival)

    def on_prefill_chunk(self, t: float, request_id: str, tokens: int, cached_tokens: int) -> None:
        s = self.requests.get(request_id)
        if s is not None:
            s.prefill_tokens += tokens
            s.cached_tokens += cached_tokens

    def on_first_token(self, t: float, request_id: str) -> None:
        s = self.requests.get(request_id)
        if s is None:
            return
        s.last_token = t
        if s.first_token is None:
            s.first_token = t
            if s.series is not None:
                s.series.ttft.pending.append(t - s.arrival)

    def on_tokens(self, t: float, request_ids: Sequence[str]) -> None:
        table = self.requests
        gaps = self.gaps
        self._tokens += len(request_ids)
        for rid in request_ids:
            s = table.get(rid)
            if s is None:
                continue
            itl = t - s.last_token
            s.last_token = t
            if s.max_itl is None or itl > s.max_itl:
                s.max_itl = itl
            if gaps:
                # the bucket a le-inclusive histogram puts it in, as the exporter's ITL histogram
                bucket = bisect_left(ITL_BOUNDS, itl)
                s.gaps[bucket] += 1
                s.recent_gaps.append(bucket)
            if s.series is not None:
                s.series.itl.pending.append(itl)

    def on_preempted(self, t: float, request_id: str) -> None:
        s = self.requests.get(request_id)
        if s is None:
            return
        s.preemptions += 1
        s.preempted_at = t
        s.add_event("preempted", t)
        if s.series is not None:
            s.series.preemptions += 1

    def on_resumed(self, t: float, request_id: str) -> None:
        s = self.requests.get(request_id)
        if s is None:
            return
        s.end_stall(t)
        s.add_event("resumed", t)

    def on_request_finished(
        self,
        t: float,
        request_id: str,
        status: str,
        finish_reason: str | None,
        error_type: str | None,
        output_tokens: int,
        cached_prompt_tokens: int,
    ) -> None:
        s = self.requests.pop(request_id, None)
        if s is None:
            return
        s.finished = t
        s.status = status
        s.finish_reason = finish_reason
        s.error_type = error_type
        s.output_tokens = output_tokens
        s.cached_tokens = cached_prompt_tokens
        s.end_stall(t)
        if s.series is not None:
            self._observe_finished(s, s.series)
        if self.on_finished is not None:
            self.on_finished(s)

    def _observe_finished(self, s: RequestState, series: Series) -> None:
        key = (s.status, s.finish_reason or "none")
        series.outcomes[key] = series.outcomes.get(key, 0) + 1
        series.prompt_tokens += s.info.prompt_tokens
        series.generation_tokens += s.output_tokens
        series.cached_tokens += s.cached_tokens
        series.e2e.pending.append(s.finished - s.arrival)
        first = s.first_token
        if first is not None:
            series.decode.pending.append(s.finished - first)
            if s.scheduled is not None:
                series.prefill.pending.append(first - s.scheduled)
        tpot = s.tpot_s
        if tpot is not None:
            series.tpot.pending.append(tpot)
        if self.goodput is not None and s.status == "ok" and first is not None:
            ttft_target, tpot_target = self.goodput
            if first - s.arrival <= ttft_target and (tpot is None or tpot <= tpot_target):
                series.goodput += 1

    def on_step(self, stats: StepStats) -> None:
        m = self.metrics
        if m is None:
            return
        m.record_step(stats)
        self._steps += 1  # state reports too: each waits in the same pending list
        if self._steps >= self.flush_every_steps or self._tokens >= self.flush_every_tokens:
            self._steps = self._tokens = 0
            m.flush()
