"""The breaker's states, its events and its configuration (values only, no behaviour)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fleetwatch.resilience.errors import ResilienceConfigError

__all__ = ["BreakerConfig", "BreakerEvent", "EventKind", "State", "WindowKind"]


class State(enum.Enum):
    """resilience4j's six states. Only CLOSED, OPEN and HALF_OPEN change on their own."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"
    DISABLED = "disabled"
    FORCED_OPEN = "forced_open"
    METRICS_ONLY = "metrics_only"


class WindowKind(enum.Enum):
    COUNT = "count"
    TIME = "time"


class EventKind(enum.Enum):
    SUCCESS = "success"
    ERROR = "error"
    IGNORED_ERROR = "ignored_error"
    NOT_PERMITTED = "not_permitted"
    STATE_TRANSITION = "state_transition"
    FAILURE_RATE_EXCEEDED = "failure_rate_exceeded"
    SLOW_CALL_RATE_EXCEEDED = "slow_call_rate_exceeded"
    RESET = "reset"


@dataclass(frozen=True, slots=True)
class BreakerEvent:
    """One thing that happened to a breaker. ``time`` is the breaker's clock, in seconds.

    ``duration_s`` is set for call outcomes; ``from_state``/``to_state`` for transitions;
    ``rate`` (0..1) for the rate-exceeded events; ``error`` for ERROR and IGNORED_ERROR.
    """

    kind: EventKind
    breaker: str
    time: float
    duration_s: float | None = None
    from_state: State | None = None
    to_state: State | None = None
    rate: float | None = None
    error: BaseException | None = None


def _never(_: Any) -> bool:
    return False


def _record_exceptions(exc: BaseException) -> bool:
    return isinstance(exc, Exception)


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    """How a breaker judges calls. Defaults are resilience4j's; rates are fractions in (0, 1].

    - ``window_kind``/``window_size``: the last ``window_size`` calls (COUNT) or seconds (TIME).
    - ``minimum_calls``: no verdict until the window holds this many calls (capped at the size of a
      count window).
    - ``failure_rate_threshold``/``slow_call_rate_threshold``: open when a rate is at or above.
    - ``slow_call_duration_s``: a call longer than this (strictly, as in resilience4j) is slow,
      successful or not.
    - ``wait_in_open_s``: how long OPEN rejects before probing.
    - ``half_open_calls``: exactly this many probes are admitted in HALF_OPEN; their verdict closes
      or reopens the breaker.
    - ``max_wait_in_half_open_s``: reopen when the probes have not all reported by then (0: wait).
    - ``automatic_transition``: move OPEN → HALF_OPEN on a timer, without waiting for a call.
    - ``record_exception``: which exceptions count as failures (default: every ``Exception``).
      Exceptions it rejects count as successes, as in resilience4j.
    - ``ignore_exception``: exceptions that count neither way (checked first). ``BaseException``s
      that are not ``Exception``s (cancellation, interrupts) are always ignored.
    - ``record_result``: a returned value for which this is true counts as a failure.
    """

    window_kind: WindowKind = WindowKind.COUNT
    window_size: int = 100
    minimum_calls: int = 100
    failure_rate_threshold: float = 0.5
    slow_call_rate_threshold: float = 1.0
    slow_call_duration_s: float = 60.0
    wait_in_open_s: float = 60.0
    half_open_calls: int = 10
    max_wait_in_half_open_s: float = 0.0
    automatic_transition: bool = False
    record_exception: Callable[[BaseException], bool] = field(default=_record_exceptions)
    ignore_exception: Callable[[BaseException], bool] = field(default=_never)
    record_result: Callable[[Any], bool] = field(default=_never)

    def __post_init__(self) -> None:
        where = "circuit breaker config"
        if self.window_size < 1:
            raise ResilienceConfigError(
                f"{where}: window_size must be >= 1, got {self.window_size}"
            )
        if self.minimum_calls < 1:
            raise ResilienceConfigError(
                f"{where}: minimum_calls must be >= 1, got {self.minimum_calls}"
            )
        for name in ("failure_rate_threshold", "slow_call_rate_threshold"):
            value = getattr(self, name)
            if not 0.0 < value <= 1.0:
                raise ResilienceConfigError(
                    f"{where}: {name} must be a fraction in (0, 1], got {value}"
                )
        for name in ("slow_call_duration_s", "wait_in_open_s", "max_wait_in_half_open_s"):
            value = getattr(self, name)
            if not value >= 0.0:
                raise ResilienceConfigError(f"{where}: {name} must be >= 0 seconds, got {value}")
        if self.slow_call_duration_s == 0.0:
            raise ResilienceConfigError(f"{where}: slow_call_duration_s must be > 0 seconds")
        if self.half_open_calls < 1:
            raise ResilienceConfigError(
                f"{where}: half_open_calls must be >= 1, got {self.half_open_calls}"
            )

    @property
    def effective_minimum_calls(self) -> int:
        if self.window_kind is WindowKind.COUNT:
            return min(self.minimum_calls, self.window_size)
        return self.minimum_calls
