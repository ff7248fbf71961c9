"""When is an LLM HTTP call safe to retry? A value describing the failure and a pure verdict.

A completion POST is not idempotent: once the server has streamed a token it has done (and may
bill) the work, so a retry would duplicate it. Before any response byte, the request may never
have reached a model. The rule, as a table:

====================================================  ======
failure                                               retry?
====================================================  ======
caller cancelled                                      never
any token already streamed                            never
HTTP 429, 502, 503, 504                               yes (honour Retry-After)
any other HTTP status (400, 401, 403, 404, 422, 500)  no
connection failure / timeout / reset, 0 bytes read    yes
connection failure / timeout / reset, bytes read      no
anything else                                         no
====================================================  ======
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

__all__ = [
    "RETRYABLE_STATUSES",
    "CallFailure",
    "FailureKind",
    "LLMCallError",
    "RetryDecision",
    "classify",
    "llm_http_retryable",
    "parse_retry_after",
]

RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})


class FailureKind(enum.Enum):
    CONNECT = "connect"  # could not connect, or the connection dropped
    TIMEOUT = "timeout"  # gave up waiting
    HTTP_STATUS = "http_status"  # the server answered with an error status
    CANCELLED = "cancelled"  # the caller gave up
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class CallFailure:
    """What went wrong, as seen by the client. ``retry_after_s`` is the parsed Retry-After header."""

    kind: FailureKind
    status: int | None = None
    bytes_received: int = 0
    tokens_received: int = 0
    retry_after_s: float | None = None


@dataclass(frozen=True, slots=True)
class RetryDecision:
    retry: bool
    reason: str


def classify(failure: CallFailure) -> RetryDecision:
    """Pure: the verdict for one failed attempt."""
    if failure.kind is FailureKind.CANCELLED:
        return RetryDecision(False, "cancelled by the caller")
    if failure.tokens_received > 0:
        return RetryDecision(False, "tokens already streamed: a retry would repeat the work")
    if failure.kind is FailureKind.HTTP_STATUS or failure.status is not None:
        if failure.status in RETRYABLE_STATUSES:
            return RetryDecision(True, f"HTTP {failure.status} is transient")
        return RetryDecision(False, f"HTTP {failure.status} will not change on retry")
    if failure.kind in (FailureKind.CONNECT, FailureKind.TIMEOUT):
        if failure.bytes_received == 0:
            return RetryDecision(True, f"{failure.kind.value} before the first response byte")
        return RetryDecision(False, f"{failure.kind.value} after the response began")
    return RetryDecision(False, "unknown failure")


class LLMCallError(Exception):
    """An LLM HTTP call failed; carries the CallFailure that ``classify`` judges."""

    def __init__(self, failure: CallFailure, message: str = "") -> None:
        super().__init__(message or f"LLM call failed: {failure}")
        self.failure = failure

    @property
    def retry_after_s(self) -> float | None:
        return self.failure.retry_after_s


def llm_http_retryable(exc: BaseException) -> bool:
    """A retry predicate for RetryPolicy: LLMCallError by the table; a refused connection (nothing
    was sent) yes; anything else no."""
    if isinstance(exc, LLMCallError):
        return classify(exc.failure).retry
    return isinstance(exc, ConnectionRefusedError)


def parse_retry_after(value: str | None, now_epoch_s: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP-date (RFC 9110).

    ``now_epoch_s`` is the current Unix time (for the date form). None when absent or unreadable;
    a date in the past gives 0.
    """
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        return max(0.0, when.timestamp() - now_epoch_s)
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds
