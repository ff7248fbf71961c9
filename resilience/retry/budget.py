"""A shared retry budget: a token bucket in the manner of Finagle's RetryBudget.

Every request deposits one token; every retry withdraws ``1 / retry_ratio`` tokens; deposits and
withdrawals expire after ``ttl_s``; a reserve of ``min_retries_per_s · ttl_s`` retries is always
available so that low-traffic clients can still retry. Over any ``ttl_s`` window, retries are thus
at most ``retry_ratio · requests + min_retries_per_s · ttl_s``: under total backend failure the load
stays near ``(1 + retry_ratio)×`` instead of ``max_attempts×``.

It plugs into tenacity as a stop strategy placed last in the chain, so a token is only spent on a
retry that will happen: ``stop=stop_after_attempt(3) | budget.stop``. One lock held for a few
arithmetic operations (never across an await) makes it safe for threads and asyncio tasks alike.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import tenacity
from tenacity.stop import stop_base

from fleetwatch.resilience.errors import ResilienceConfigError
from fleetwatch.resilience.retry.metrics import RetryMetrics

__all__ = ["RetryBudget"]

_UNIT = 1000  # integer units per deposit, so withdrawals at any ratio stay exact enough


class _BudgetStop(stop_base):
    def __init__(self, budget: RetryBudget) -> None:
        self._budget = budget

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return not self._budget.try_withdraw()


class RetryBudget:
    """Finagle-style retry budget (defaults: ttl 10 s, 10 retries/s reserve, 20% of requests).

    ``clock`` is monotonic seconds. The window is a ring of ``slices`` buckets of ``ttl_s/slices``
    seconds with a running total, so every operation is O(1) amortised.
    """

    def __init__(
        self,
        *,
        ttl_s: float = 10.0,
        min_retries_per_s: float = 10.0,
        retry_ratio: float = 0.2,
        slices: int = 10,
        clock: Callable[[], float] = time.monotonic,
        name: str = "default",
        metrics: RetryMetrics | None = None,
    ) -> None:
        where = f"retry budget {name!r}"
        if not ttl_s > 0.0:
            raise ResilienceConfigError(f"{where}: ttl_s must be > 0, got {ttl_s}")
        if not min_retries_per_s >= 0.0:
            raise ResilienceConfigError(
                f"{where}: min_retries_per_s must be >= 0, got {min_retries_per_s}"
            )
        if not 0.0 < retry_ratio <= 1000.0:
            raise ResilienceConfigError(
                f"{where}: retry_ratio must be in (0, 1000], got {retry_ratio}"
            )
        if slices < 1:
            raise ResilienceConfigError(f"{where}: slices must be >= 1, got {slices}")
        self.name = name
        self.ttl_s = ttl_s
        self.min_retries_per_s = min_retries_per_s
        self.retry_ratio = retry_ratio
        self._clock = clock
        self._withdrawal = max(1, round(_UNIT / retry_ratio))
        self._reserve = int(min_retries_per_s * ttl_s * self._withdrawal)
        self._slice_s = ttl_s / slices
        self._ring = [0] * slices
        self._slices = slices
        self._current: int | None = None
        self._total = 0
        self._lock = threading.Lock()
        self._refusals = 0
        self._stop = _BudgetStop(self)
        self._refused = None
        if metrics is not None:
            bound = metrics.bind_budget(name)
            self._refused = bound.refusals
            bound.balance.set_function(self.balance)

    @property
    def stop(self) -> stop_base:
        """The tenacity stop strategy: stop when the budget refuses the retry."""
        return self._stop

    @property
    def refusals(self) -> int:
        return self._refusals

    def _advance(self) -> None:
        index = math.floor(self._clock() / self._slice_s)
        current = self._current
        if current is None or index - current >= self._slices:
            self._ring = [0] * self._slices
            self._total = 0
        elif index > current:
            for i in range(current + 1, index + 1):
                j = i % self._slices
                self._total -= self._ring[j]
                self._ring[j] = 0
        if current is None or index > current:
            self._current = index

    def _add(self, amount: int) -> None:
        assert self._current is not None
        self._ring[self._current % self._slices] += amount
        self._total += amount

    def deposit(self) -> None:
        """Record one request (call once per logical request, not per attempt)."""
        with self._lock:
            self._advance()
            self._add(_UNIT)

    def try_withdraw(self) -> bool:
        """Take the tokens for one retry; False (and a refusal counted) when there are too few."""
        with self._lock:
            self._advance()
            if self._total + self._reserve >= self._withdrawal:
                self._add(-self._withdrawal)
                return True
            self._refusals += 1
        if self._refused is not None:
            self._refused.inc()
        return False

    def balance(self) -> float:
        """Retries the budget would allow right now."""
        with self._lock:
            self._advance()
            return max(0, self._total + self._reserve) / self._withdrawal
