"""The batcher's waker thread: it sets the event at its deadline, not before, not after a disarm;
it leaves when idle and comes back on demand; a closed loop stops it quietly.

The waker runs on an injected clock. It still waits, in real seconds, for what that clock says is
left, so the deadlines here are a few milliseconds of clock time. How soon after its deadline the
thread wakes is measured in ``benchmarks/bench_resilience.py`` (``bench_waker``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from fleetwatch.resilience.batcher.waker import (
    Waker,
    loop_clock_is_monotonic,
    thread_waker,
)

JOIN_S = 30.0  # a bound for a hung thread, not a timing: a thread on time ends in milliseconds


class SteppingClock:
    """Each reading is ``step_s`` later than the one before, so time passes only as the waker reads."""

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s
        self.readings: list[float] = []
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            now = len(self.readings) * self.step_s
            self.readings.append(now)
            return now


class ManualClock:
    """A clock that reads what the test last set."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _thread(name: str) -> threading.Thread:
    return next(t for t in threading.enumerate() if t.name == name)


@pytest.fixture
def thread_errors() -> Iterator[list[BaseException | None]]:
    errors: list[BaseException | None] = []
    old = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    yield errors
    threading.excepthook = old


def test_sets_the_event_at_the_first_reading_at_or_past_its_deadline() -> None:
    step = 2.0**-12  # exact in binary: readings compare exactly with the deadline
    deadline = 5 * step

    async def main() -> list[float]:
        clock = SteppingClock(step)
        waker = Waker(asyncio.get_running_loop(), "test waker", clock=clock)
        event = asyncio.Event()
        waker.arm(deadline, event)
        await asyncio.wait_for(event.wait(), JOIN_S)  # nothing else would set it
        readings = list(clock.readings)  # once the event is set, the waker reads no more
        waker.close()
        return readings

    assert asyncio.run(main()) == [i * step for i in range(6)]  # never early, not one late


def test_a_disarmed_or_replaced_deadline_does_not_fire() -> None:
    async def main() -> None:
        clock = ManualClock()
        waker = Waker(asyncio.get_running_loop(), "test waker", clock=clock)
        first, second = asyncio.Event(), asyncio.Event()
        waker.arm(0.001, first)
        waker.arm(0.002, second)  # replaces the first
        clock.now = 0.002  # past both deadlines
        await asyncio.wait_for(second.wait(), JOIN_S)
        assert not first.is_set()
        third, fourth = asyncio.Event(), asyncio.Event()
        waker.arm(0.003, third)
        waker.disarm()
        waker.arm(0.004, fourth)
        clock.now = 0.004
        await asyncio.wait_for(fourth.wait(), JOIN_S)
        assert not third.is_set()  # the thread sets events in order: the third would be set by now
        waker.close()

    asyncio.run(main())


def test_the_thread_leaves_when_idle_and_comes_back(thread_errors: list[BaseException]) -> None:
    async def main() -> None:
        clock = ManualClock()
        waker = Waker(asyncio.get_running_loop(), "idle waker", idle_s=0.02, clock=clock)
        event = asyncio.Event()
        waker.arm(0.001, event)
        thread = _thread("idle waker")  # waiting for a deadline, it cannot leave
        clock.now = 0.001
        await asyncio.wait_for(event.wait(), JOIN_S)
        await asyncio.to_thread(thread.join, JOIN_S)
        assert not thread.is_alive()  # nothing armed for idle_s: it left
        again = asyncio.Event()
        waker.arm(0.002, again)
        assert _thread("idle waker") is not thread  # the next arm started another
        clock.now = 0.002
        await asyncio.wait_for(again.wait(), JOIN_S)
        waker.close()

    asyncio.run(main())
    assert thread_errors == []


def test_a_closed_loop_stops_the_thread_quietly(thread_errors: list[BaseException]) -> None:
    loop = asyncio.new_event_loop()
    clock = ManualClock()
    waker = Waker(loop, "orphan waker", idle_s=3600.0, clock=clock)  # it cannot leave as idle
    waker.arm(0.001, asyncio.Event())
    thread = _thread("orphan waker")
    loop.close()
    clock.now = 0.001  # due, on a closed loop
    thread.join(JOIN_S)
    assert not thread.is_alive()
    assert thread_errors == []


class _StoppedClockLoop(asyncio.SelectorEventLoop):
    def time(self) -> float:
        return 0.0


def test_only_loops_on_the_monotonic_clock_get_a_waker() -> None:
    real, virtual = asyncio.new_event_loop(), _StoppedClockLoop()
    try:
        assert loop_clock_is_monotonic(real)
        assert not loop_clock_is_monotonic(virtual)
        waker = thread_waker(real, "default waker")
        assert isinstance(waker, Waker)
        waker.close()
        assert thread_waker(virtual, "default waker") is None
    finally:
        real.close()
        virtual.close()
