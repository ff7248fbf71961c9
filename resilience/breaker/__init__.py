"""Circuit breaker with resilience4j's semantics: sliding windows, rate thresholds, N probes."""

from fleetwatch.resilience.breaker.breaker import CircuitBreaker, Guard
from fleetwatch.resilience.breaker.machine import Listener, Scheduler
from fleetwatch.resilience.breaker.metrics import BoundBreakerMetrics, BreakerMetrics
from fleetwatch.resilience.breaker.permits import CallNotPermittedError
from fleetwatch.resilience.breaker.state import (
    BreakerConfig,
    BreakerEvent,
    EventKind,
    State,
    WindowKind,
)
from fleetwatch.resilience.breaker.window import CountWindow, TimeWindow, WindowSnapshot

__all__ = [
    "BoundBreakerMetrics",
    "BreakerConfig",
    "BreakerEvent",
    "BreakerMetrics",
    "CallNotPermittedError",
    "CircuitBreaker",
    "CountWindow",
    "EventKind",
    "Guard",
    "Listener",
    "Scheduler",
    "State",
    "TimeWindow",
    "WindowKind",
    "WindowSnapshot",
]
