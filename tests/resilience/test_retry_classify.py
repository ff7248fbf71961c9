"""The LLM HTTP retry table: transient failures before any token retry; everything else does not."""

from __future__ import annotations

import pytest

from fleetwatch.resilience.retry import (
    CallFailure,
    FailureKind,
    LLMCallError,
    classify,
    llm_http_retryable,
    parse_retry_after,
)

C, T, H, X, OTHER = (
    FailureKind.CONNECT,
    FailureKind.TIMEOUT,
    FailureKind.HTTP_STATUS,
    FailureKind.CANCELLED,
    FailureKind.OTHER,
)

TABLE = [
    # kind, status, bytes, tokens, retry?
    (C, None, 0, 0, True),  # connection refused / reset before any byte
    (C, None, 512, 0, False),  # dropped after the response began
    (C, None, 900, 3, False),  # dropped mid-stream
    (T, None, 0, 0, True),  # timeout before the first byte
    (T, None, 200, 0, False),  # timeout after headers
    (T, None, 4000, 12, False),  # timeout mid-stream
    (H, 429, 120, 0, True),
    (H, 502, 80, 0, True),
    (H, 503, 80, 0, True),
    (H, 504, 80, 0, True),
    (H, 400, 80, 0, False),
    (H, 401, 80, 0, False),
    (H, 403, 80, 0, False),
    (H, 404, 80, 0, False),
    (H, 408, 80, 0, False),
    (H, 409, 80, 0, False),
    (H, 422, 80, 0, False),
    (H, 500, 80, 0, False),
    (H, 501, 80, 0, False),
    (H, 503, 2000, 5, False),  # an error event after tokens were streamed
    (X, None, 0, 0, False),  # the caller cancelled
    (OTHER, None, 0, 0, False),
]


@pytest.mark.parametrize(("kind", "status", "bytes_", "tokens", "retry"), TABLE)
def test_retry_table(
    kind: FailureKind, status: int | None, bytes_: int, tokens: int, retry: bool
) -> None:
    decision = classify(
        CallFailure(kind, status=status, bytes_received=bytes_, tokens_received=tokens)
    )
    assert decision.retry is retry, decision.reason
    assert decision.reason


def test_predicate_reads_the_error_and_retry_after() -> None:
    error = LLMCallError(CallFailure(H, status=429, retry_after_s=7.0))
    assert llm_http_retryable(error)
    assert error.retry_after_s == 7.0
    assert llm_http_retryable(ConnectionRefusedError())
    assert not llm_http_retryable(TimeoutError())  # bytes unknown: not safe
    assert not llm_http_retryable(LLMCallError(CallFailure(H, status=400)))


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        ("7", 7.0),
        (" 1.5 ", 1.5),
        ("Wed, 21 Oct 2015 07:28:30 GMT", 30.0),
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),  # in the past
        ("-3", None),
        ("soon", None),
        ("nan", None),
        (None, None),
    ],
)
def test_parse_retry_after(header: str | None, seconds: float | None) -> None:
    now = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert parse_retry_after(header, now) == seconds
