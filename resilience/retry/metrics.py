"""Prometheus metrics for retries and retry budgets (label children bound once per policy/budget).

- ``fleetwatch_retry_attempts_total{policy}``: every attempt, the first included.
- ``fleetwatch_retry_retries_total{policy}``: attempts after the first.
- ``fleetwatch_retry_exhausted_total{policy}``: calls that gave up on a retryable error (attempt cap,
  deadline or budget).
- ``fleetwatch_retry_budget_refusals_total{budget}``: retries the budget refused.
- ``fleetwatch_retry_budget_balance{budget}``: retries the budget would allow now (read at scrape).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

__all__ = ["BoundBudgetMetrics", "BoundRetryMetrics", "RetryMetrics"]


@dataclass(frozen=True, slots=True)
class BoundRetryMetrics:
    attempts: Counter
    retries: Counter
    exhausted: Counter


@dataclass(frozen=True, slots=True)
class BoundBudgetMetrics:
    refusals: Counter
    balance: Gauge


class RetryMetrics:
    """The metric families, registered once in ``registry``."""

    def __init__(self, registry: CollectorRegistry = REGISTRY, prefix: str = "fleetwatch") -> None:
        p = f"{prefix}_retry"
        self.attempts = Counter(
            f"{p}_attempts", "Attempts, the first included.", ["policy"], registry=registry
        )
        self.retries = Counter(
            f"{p}_retries", "Attempts after the first.", ["policy"], registry=registry
        )
        self.exhausted = Counter(
            f"{p}_exhausted",
            "Calls that gave up on a retryable error (attempts, deadline or budget).",
            ["policy"],
            registry=registry,
        )
        self.refusals = Counter(
            f"{p}_budget_refusals",
            "Retries refused by the retry budget.",
            ["budget"],
            registry=registry,
        )
        self.balance = Gauge(
            f"{p}_budget_balance",
            "Retries the budget would allow now.",
            ["budget"],
            registry=registry,
        )

    def bind_policy(self, policy: str) -> BoundRetryMetrics:
        return BoundRetryMetrics(
            self.attempts.labels(policy), self.retries.labels(policy), self.exhausted.labels(policy)
        )

    def bind_budget(self, budget: str) -> BoundBudgetMetrics:
        return BoundBudgetMetrics(self.refusals.labels(budget), self.balance.labels(budget))
