"""Hypothesis drives the breaker and a plain reference model with the same calls, clock steps and
manual transitions; both must agree on the state, on every permit decision and on the window."""

from __future__ import annotations

import math

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from fleetwatch.resilience.breaker import BreakerConfig, CircuitBreaker, State, WindowKind

WINDOW, MIN_CALLS, WAIT, PROBES, SLOW = 5, 3, 10.0, 3, 2.0
PERMISSIVE = {State.CLOSED, State.METRICS_ONLY, State.DISABLED}


class Model:
    """resilience4j's state machine written the obvious way (lists, no running totals)."""

    def __init__(self, timed: bool) -> None:
        self.timed = timed
        self.state = State.CLOSED
        self.epoch = 0
        self.since = 0.0
        self.window: list[tuple[int, bool, bool]] = []  # (whole second, failed, slow)
        self.probes: list[tuple[bool, bool]] = []
        self.probes_left = 0

    def go(self, to: State, now: float) -> None:
        self.epoch += 1
        self.since = now
        if to is State.HALF_OPEN:
            self.probes, self.probes_left = [], PROBES
        elif to is not State.OPEN:
            self.window = []
        self.state = to

    def live(self, now: float) -> list[tuple[bool, bool]]:
        """What a window holds now: the last WINDOW calls, or the calls of the last WINDOW seconds."""
        if self.timed:
            return [(f, s) for sec, f, s in self.window if sec > math.floor(now) - WINDOW]
        return [(f, s) for _, f, s in self.window[-WINDOW:]]

    @staticmethod
    def over(calls: list[tuple[bool, bool]], threshold_f: float, threshold_s: float) -> bool:
        n = len(calls)
        return (
            sum(f for f, _ in calls) / n >= threshold_f
            or sum(s for _, s in calls) / n >= threshold_s
        )

    def acquire(self, now: float) -> int | None:
        if self.state in PERMISSIVE:
            return self.epoch
        if self.state is State.OPEN and now - self.since >= WAIT:
            self.go(State.HALF_OPEN, now)
        if self.state is State.HALF_OPEN and self.probes_left > 0:
            self.probes_left -= 1
            return self.epoch
        return None

    def record(self, permit: int, failed: bool | None, slow: bool, now: float) -> None:
        if permit != self.epoch:
            return
        if self.state in (State.CLOSED, State.METRICS_ONLY) and failed is not None:
            self.window.append((math.floor(now), failed, slow))
            live = self.live(now)
            if len(live) >= MIN_CALLS and self.over(live, 0.5, 0.8) and self.state is State.CLOSED:
                self.go(State.OPEN, now)
        elif self.state is State.HALF_OPEN:
            if failed is None:
                self.probes_left += 1
                return
            self.probes.append((failed, slow))
            if len(self.probes) == PROBES:
                self.go(State.OPEN if self.over(self.probes, 0.5, 0.8) else State.CLOSED, now)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class BreakerMachine(RuleBasedStateMachine):
    calls = Bundle("calls")
    window_kind = WindowKind.COUNT

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        config = BreakerConfig(
            window_size=WINDOW,
            minimum_calls=MIN_CALLS,
            failure_rate_threshold=0.5,
            slow_call_rate_threshold=0.8,
            slow_call_duration_s=SLOW,
            wait_in_open_s=WAIT,
            half_open_calls=PROBES,
            window_kind=self.window_kind,
        )
        self.breaker = CircuitBreaker("sm", config, clock=self.clock)
        self.model = Model(timed=self.window_kind is WindowKind.TIME)

    @rule(target=calls)
    def start_call(self) -> tuple[int, int] | None:
        got = self.breaker.try_acquire()
        expected = self.model.acquire(self.clock.t)
        assert (got is None) == (expected is None)
        return None if got is None or expected is None else (got, expected)

    @rule(
        call=consumes(calls), outcome=st.sampled_from(["ok", "fail", "ignored"]), slow=st.booleans()
    )
    def finish_call(self, call: tuple[int, int] | None, outcome: str, slow: bool) -> None:
        if call is None:
            return
        permit, model_permit = call
        duration = SLOW + 1.0 if slow else 0.1
        if outcome == "ok":
            self.breaker.record_success(permit, duration)
        elif outcome == "fail":
            self.breaker.record_error(permit, duration, RuntimeError("x"))
        else:
            self.breaker.release(permit)
        failed = None if outcome == "ignored" else outcome == "fail"
        self.model.record(model_permit, failed, slow and failed is not None, self.clock.t)

    @rule(seconds=st.sampled_from([0.5, 1.0, 3.0, 9.9, 10.0, 25.0]))
    def advance(self, seconds: float) -> None:
        self.clock.t += seconds

    @rule(to=st.sampled_from(list(State)))
    def force(self, to: State) -> None:
        if self.breaker.state is not to:
            self.breaker.transition_to(to)
            self.model.go(to, self.clock.t)

    @invariant()
    def same_state(self) -> None:
        assert self.breaker.state is self.model.state

    @invariant()
    def same_window(self) -> None:
        snap = self.breaker.snapshot()
        calls = (
            self.model.probes
            if self.model.state is State.HALF_OPEN
            else self.model.live(self.clock.t)
        )
        assert snap.calls == len(calls)
        assert snap.failed == sum(f for f, _ in calls)
        assert snap.slow == sum(s for _, s in calls)


class TimeWindowBreakerMachine(BreakerMachine):
    window_kind = WindowKind.TIME


for _machine in (BreakerMachine, TimeWindowBreakerMachine):
    _machine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestCountWindowBreaker = BreakerMachine.TestCase
TestTimeWindowBreaker = TimeWindowBreakerMachine.TestCase
