"""Circuit breaker with resilience4j's semantics: sliding windows, rate thresholds, N probes."""

from resilience.breaker.breaker import CircuitBreaker, Guard
from resilience.breaker.machine import Listener, Scheduler
from resilience.breaker.metrics import BoundBreakerMetrics, BreakerMetrics
from resilience.breaker.permits import CallNotPermittedError
from resilience.breaker.state import BreakerConfig, BreakerEvent, EventKind, State, WindowKind
from resilience.breaker.window import CountWindow, TimeWindow, WindowSnapshot

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
