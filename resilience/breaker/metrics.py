"""Prometheus metrics for circuit breakers: one set of families, one bound child set per breaker.

Families (label ``breaker`` is the breaker's name, set in code, so its values are bounded):

- ``fleetwatch_circuit_breaker_state{breaker,state}``: 1 for the current state, 0 for the others.
- ``fleetwatch_circuit_breaker_calls_total{breaker,outcome}``: outcome ``success|failure|ignored``.
- ``fleetwatch_circuit_breaker_slow_calls_total{breaker,outcome}``: slow calls, ``success|failure``.
- ``fleetwatch_circuit_breaker_not_permitted_calls_total{breaker}``: calls refused.
- ``fleetwatch_circuit_breaker_transitions_total{breaker,to_state}``: state changes.

Call outcomes are counted without a lock: each outcome is one ``next()`` on an
``itertools.count``, which the GIL makes atomic, and the totals are read when the registry is
collected. Breakers that share a name share their counts, as they would share labelled children.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from fleetwatch.resilience.breaker.state import State

__all__ = ["BoundBreakerMetrics", "BreakerMetrics"]

# The outcome counters of one breaker name, in the order _OutcomeCounts.read returns them.
_OUTCOMES = ("success", "failure", "ignored", "slow_success", "slow_failure")


class _OutcomeCounts:
    """Lock-free outcome counters; ``read`` (under the collector's lock) returns their totals."""

    __slots__ = ("counters", "reads")

    def __init__(self) -> None:
        self.counters = tuple(itertools.count() for _ in _OUTCOMES)
        self.reads = 0  # every read takes one value from each counter

    def read(self) -> list[int]:
        values = [next(c) - self.reads for c in self.counters]
        self.reads += 1
        return values


class _OutcomeCollector(Collector):
    """``calls_total`` and ``slow_calls_total`` for every bound breaker name."""

    def __init__(self, prefix: str) -> None:
        p = f"{prefix}_circuit_breaker"
        self._calls = (
            f"{p}_calls",
            "Calls through the breaker by outcome (success, failure, ignored).",
        )
        self._slow = (
            f"{p}_slow_calls",
            "Calls longer than slow_call_duration_s, by outcome (success, failure).",
        )
        self._lock = threading.Lock()
        self._by_name: dict[str, _OutcomeCounts] = {}

    def counts(self, breaker: str) -> _OutcomeCounts:
        with self._lock:
            return self._by_name.setdefault(breaker, _OutcomeCounts())

    def _families(self) -> tuple[CounterMetricFamily, CounterMetricFamily]:
        labels = ["breaker", "outcome"]
        return (
            CounterMetricFamily(*self._calls, labels=labels),
            CounterMetricFamily(*self._slow, labels=labels),
        )

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        calls, slow = self._families()
        with self._lock:
            for breaker, counts in self._by_name.items():
                ok, failed, ignored, slow_ok, slow_failed = counts.read()
                calls.add_metric([breaker, "success"], ok)
                calls.add_metric([breaker, "failure"], failed)
                calls.add_metric([breaker, "ignored"], ignored)
                slow.add_metric([breaker, "success"], slow_ok)
                slow.add_metric([breaker, "failure"], slow_failed)
        yield calls
        yield slow


class BreakerMetrics:
    """The metric families, registered once in ``registry``; ``bind(name)`` per breaker."""

    def __init__(self, registry: CollectorRegistry = REGISTRY, prefix: str = "fleetwatch") -> None:
        p = f"{prefix}_circuit_breaker"
        self.state = Gauge(
            f"{p}_state",
            "1 for the breaker's current state, 0 otherwise.",
            ["breaker", "state"],
            registry=registry,
        )
        self.outcomes = _OutcomeCollector(prefix)
        registry.register(self.outcomes)
        self.not_permitted = Counter(
            f"{p}_not_permitted_calls", "Calls the breaker refused.", ["breaker"], registry=registry
        )
        self.transitions = Counter(
            f"{p}_transitions",
            "State transitions, by the state entered.",
            ["breaker", "to_state"],
            registry=registry,
        )

    def bind(self, breaker: str) -> BoundBreakerMetrics:
        return BoundBreakerMetrics(self, breaker)


class BoundBreakerMetrics:
    """The children of one breaker, bound once so the hot path never looks labels up.

    ``success`` is the counter a clean success advances with ``next(success)``.
    """

    __slots__ = (
        "_failure",
        "_ignored",
        "_slow_failure",
        "_slow_success",
        "_states",
        "_transitions",
        "not_permitted",
        "success",
    )

    def __init__(self, families: BreakerMetrics, breaker: str) -> None:
        self._states = {s: families.state.labels(breaker, s.value) for s in State}
        self._transitions = {s: families.transitions.labels(breaker, s.value) for s in State}
        counters = families.outcomes.counts(breaker).counters
        self.success, self._failure, self._ignored, self._slow_success, self._slow_failure = (
            counters
        )
        self.not_permitted = families.not_permitted.labels(breaker)

    def observe(self, failed: bool | None, slow: bool) -> None:
        """Count one finished call; ``failed`` None means ignored."""
        if failed is None:
            next(self._ignored)
        elif failed:
            next(self._failure)
            if slow:
                next(self._slow_failure)
        else:
            next(self.success)
            if slow:
                next(self._slow_success)

    def set_state(self, state: State) -> None:
        for s, gauge in self._states.items():
            gauge.set(1.0 if s is state else 0.0)
        self._transitions[state].inc()
