"""vLLM's per-request intervals -> fleetwatch ``RequestRecord``: which times are exact, which derived.

vLLM (v1) reports each finished request once, in ``IterationStats.finished_requests``, as a
``FinishedRequestStats``: durations, not timestamps. Two clocks are behind them:

- the frontend's wall clock: ``arrival_time`` (when the API server received the request) and
  ``IterationStats.iteration_timestamp`` (when the frontend processed the output batch that
  finished it); ``e2e_latency`` is their difference;
- the engine core's monotonic clock: ``queued_time`` (QUEUED -> first SCHEDULED),
  ``prefill_time`` (first SCHEDULED -> first token), ``decode_time`` (first token -> last token).

The record is rebuilt like this (``now_s`` is ``iteration_timestamp``):

==================  ===========================================  =========================
record field        value                                        exactness
==================  ===========================================  =========================
``finished_s``      ``now_s``                                    exact (vLLM's e2e end)
``arrival_s``       ``now_s - e2e_latency``                      exact (vLLM's arrival)
``first_token_s``   ``finished_s - decode_time``                 derived
``scheduled_s``     ``first_token_s - prefill_time``             derived
==================  ===========================================  =========================

Derived means anchored on the end: the engine's last token is taken to reach the frontend at
``finished_s``. The error is the difference between the engine-to-frontend delay of the last
token and that of the first (milliseconds of IPC and detokenisation), so TTFT (``first_token_s -
arrival_s``) is close to what vLLM's own TTFT histogram measures but not identical; no per-request
TTFT exists in vLLM's stats to do better (``time_to_first_tokens_iter`` carries no request id).
``prefill_s`` and ``decode_s`` of the record equal vLLM's intervals exactly; the record's
``queue_s`` (``scheduled_s - arrival_s``) is vLLM's ``queued_time`` plus the frontend time before
the engine queued the request (tokenisation, IPC), ``frontend_s`` below. ``preemption_stall_s``
is 0 and ``max_itl_s`` is empty: vLLM does not report them per request. Times are clamped so the
order arrival <= scheduled <= first token <= finished always holds (clock jitter between the two
processes can otherwise invert microseconds).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from fleetwatch.core.records import RequestRecord, Status

__all__ = [
    "FinishedRequest",
    "Phases",
    "operation_of",
    "outcome_of",
    "phases_of",
    "record_from_finished",
    "records_from_finished",
]


class FinishedRequest(Protocol):
    """The fields of vLLM's ``FinishedRequestStats`` this adapter reads (seconds, tokens)."""

    @property
    def finish_reason(self) -> Any: ...
    @property
    def request_id(self) -> str | None: ...
    @property
    def e2e_latency(self) -> float: ...
    @property
    def queued_time(self) -> float: ...
    @property
    def prefill_time(self) -> float: ...
    @property
    def decode_time(self) -> float: ...
    @property
    def num_prompt_tokens(self) -> int: ...
    @property
    def num_generation_tokens(self) -> int: ...
    @property
    def num_preemptions(self) -> int: ...
    @property
    def num_cached_tokens(self) -> int: ...
    @property
    def is_corrupted(self) -> bool: ...


_STATUS_BY_REASON: Final = {
    "stop": Status.OK,
    "length": Status.OK,
    "repetition": Status.OK,
    "abort": Status.ABORTED,
    "error": Status.ERROR,
}


def outcome_of(f: FinishedRequest) -> tuple[Status, str, str | None]:
    """(status, finish reason, error type) of a finished vLLM request.

    ``finish_reason`` is vLLM's ``FinishReason`` (its ``str`` is stop, length, abort, error or
    repetition). A request whose logits held NaNs (``is_corrupted``) is an error: its text is
    garbage whatever the finish reason.
    """
    reason = str(f.finish_reason).lower()
    if f.is_corrupted:
        return Status.ERROR, reason, "corrupted_output"
    status = _STATUS_BY_REASON.get(reason, Status.OK)
    return status, reason, ("engine_error" if status is Status.ERROR else None)


def operation_of(request_id: str) -> str:
    """GenAI operation name from vLLM's request-id prefix (``chatcmpl-``, ``cmpl-``)."""
    if request_id.startswith("chatcmpl-"):
        return "chat"
    if request_id.startswith("cmpl-"):
        return "text_completion"
    return "generate_content"


@dataclass(frozen=True, slots=True)
class Phases:
    """One request's reconstructed instants (wall seconds) and vLLM's exact intervals."""

    arrival_s: float
    scheduled_s: float | None
    first_token_s: float | None
    finished_s: float
    queued_s: float
    """vLLM's ``queued_time``: engine queue only (exact)."""
    frontend_s: float
    """Time before the engine queued the request: record queue minus ``queued_s`` (derived)."""


def phases_of(f: FinishedRequest, now_s: float) -> Phases:
    """Place the request's phases on the wall clock, ending at ``now_s`` (see module docstring).

    A request that produced no token has neither a first token nor a trustworthy admission
    time (vLLM leaves those engine timestamps at 0), so both stay ``None``.
    """
    finished = now_s
    arrival = finished - max(0.0, f.e2e_latency)
    if f.num_generation_tokens <= 0:
        return Phases(arrival, None, None, finished, max(0.0, f.queued_time), 0.0)
    first = min(finished, max(arrival, finished - max(0.0, f.decode_time)))
    scheduled = min(first, max(arrival, first - max(0.0, f.prefill_time)))
    queued = max(0.0, f.queued_time)
    frontend = max(0.0, (scheduled - arrival) - queued)
    return Phases(arrival, scheduled, first, finished, queued, frontend)


def record_from_finished(
    f: FinishedRequest,
    now_s: float,
    *,
    model: str,
    replica: str,
    traffic_class: str = "default",
    request_id: str | None = None,
) -> RequestRecord:
    """One ``RequestRecord`` for a vLLM ``FinishedRequestStats`` reported at ``now_s``."""
    p = phases_of(f, now_s)
    status, reason, error_type = outcome_of(f)
    prompt = max(0, int(f.num_prompt_tokens))
    return RequestRecord(
        request_id=request_id or f.request_id or f"vllm-{now_s:.6f}",
        replica=replica,
        model=model,
        arrival_s=p.arrival_s,
        scheduled_s=p.scheduled_s,
        first_token_s=p.first_token_s,
        finished_s=p.finished_s,
        prompt_tokens=prompt,
        output_tokens=max(0, int(f.num_generation_tokens)),
        cached_prompt_tokens=min(max(0, int(f.num_cached_tokens)), prompt),
        preemptions=max(0, int(f.num_preemptions)),
        status=status,
        finish_reason=reason,
        error_type=error_type,
        traffic_class=traffic_class,
    )


def records_from_finished(
    stats: Iterable[FinishedRequest],
    now_s: float,
    *,
    model: str,
    replica: str,
    traffic_class: str = "default",
) -> list[RequestRecord]:
    """Records for every request vLLM reported finished in one iteration at ``now_s``.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Finished:  # the fields of vLLM's FinishedRequestStats, as plain values
    ...     finish_reason: str = "length"; request_id: str = "cmpl-1"; e2e_latency: float = 3.0
    ...     queued_time: float = 0.5; prefill_time: float = 0.5; decode_time: float = 2.0
    ...     num_prompt_tokens: int = 10; num_generation_tokens: int = 5; num_preemptions: int = 0
    ...     num_cached_tokens: int = 0; is_corrupted: bool = False
    >>> [r] = records_from_finished([Finished()], 100.0, model="m", replica="r0")
    >>> r.arrival_s, r.scheduled_s, r.first_token_s, r.ttft_s, r.tpot_s
    (97.0, 97.5, 98.0, 1.0, 0.5)
    """
    return [
        record_from_finished(f, now_s, model=model, replica=replica, traffic_class=traffic_class)
        for f in stats
    ]
