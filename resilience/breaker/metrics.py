"""Prometheus metrics for circuit breakers: one set of families, one bound child set per breaker.

Families (label ``breaker`` is the breaker's name, set in code, so its values are bounded):

- ``fleetwatch_circuit_breaker_state{breaker,state}``: 1 for the current state, 0 for the others.
- ``fleetwatch_circuit_breaker_calls_total{breaker,outcome}``: outcome ``success|failure|ignored``.
- ``fleetwatch_circuit_breaker_slow_calls_total{breaker,outcome}``: slow calls, ``success|failure``.
- ``fleetwatch_circuit_breaker_not_permitted_calls_total{breaker}``: calls refused.
- ``fleetwatch_circuit_breaker_transitions_total{breaker,to_state}``: state changes.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge

from resilience.breaker.state import State

__all__ = ["BoundBreakerMetrics", "BreakerMetrics"]


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
        self.calls = Counter(
            f"{p}_calls",
            "Calls through the breaker by outcome (success, failure, ignored).",
            ["breaker", "outcome"],
            registry=registry,
        )
        self.slow_calls = Counter(
            f"{p}_slow_calls",
            "Calls at least slow_call_duration_s long, by outcome (success, failure).",
            ["breaker", "outcome"],
            registry=registry,
        )
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
    """The children of one breaker, bound once so the hot path never looks labels up."""

    __slots__ = ("_calls", "_slow", "_states", "_transitions", "not_permitted")

    def __init__(self, families: BreakerMetrics, breaker: str) -> None:
        self._states = {s: families.state.labels(breaker, s.value) for s in State}
        self._transitions = {s: families.transitions.labels(breaker, s.value) for s in State}
        self._calls = {
            True: families.calls.labels(breaker, "failure"),
            False: families.calls.labels(breaker, "success"),
            None: families.calls.labels(breaker, "ignored"),
        }
        self._slow = {
            True: families.slow_calls.labels(breaker, "failure"),
            False: families.slow_calls.labels(breaker, "success"),
        }
        self.not_permitted = families.not_permitted.labels(breaker)

    def observe(self, failed: bool | None, slow: bool) -> None:
        """Count one finished call; ``failed`` None means ignored."""
        self._calls[failed].inc()
        if slow and failed is not None:
            self._slow[failed].inc()

    def set_state(self, state: State) -> None:
        for s, gauge in self._states.items():
            gauge.set(1.0 if s is state else 0.0)
        self._transitions[state].inc()
