"""Retries on tenacity: jitter, deadline, Retry-After, a shared budget, LLM HTTP classification."""

from fleetwatch.resilience.retry.budget import RetryBudget
from fleetwatch.resilience.retry.classify import (
    RETRYABLE_STATUSES,
    CallFailure,
    FailureKind,
    LLMCallError,
    RetryDecision,
    classify,
    llm_http_retryable,
    parse_retry_after,
)
from fleetwatch.resilience.retry.jitter import (
    Jitter,
    backoff_s,
    decorrelated_jitter_s,
    full_jitter_s,
    no_jitter_s,
    wait_decorrelated_jitter,
    wait_full_jitter,
    wait_no_jitter,
)
from fleetwatch.resilience.retry.metrics import RetryMetrics
from fleetwatch.resilience.retry.policy import (
    RetryPolicy,
    retry_after_attribute,
    retry_any_exception,
)

__all__ = [
    "RETRYABLE_STATUSES",
    "CallFailure",
    "FailureKind",
    "Jitter",
    "LLMCallError",
    "RetryBudget",
    "RetryDecision",
    "RetryMetrics",
    "RetryPolicy",
    "backoff_s",
    "classify",
    "decorrelated_jitter_s",
    "full_jitter_s",
    "llm_http_retryable",
    "no_jitter_s",
    "parse_retry_after",
    "retry_after_attribute",
    "retry_any_exception",
    "wait_decorrelated_jitter",
    "wait_full_jitter",
    "wait_no_jitter",
]
