"""The batcher's waker thread: it sets the event at its deadline, not before, not after a disarm;
it leaves when idle and comes back on demand; a closed loop stops it quietly."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Iterator

import pytest

from fleetwatch.resilience.batcher.waker import Waker, loop_clock_is_monotonic


@pytest.fixture
def thread_errors() -> Iterator[list[BaseException | None]]:
    errors: list[BaseException | None] = []
    old = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    yield errors
    threading.excepthook = old


def test_sets_the_event_at_its_deadline_with_sub_millisecond_precision() -> None:
    async def main() -> list[float]:
        waker = Waker(asyncio.get_running_loop(), "test waker")
        waits = []
        for _ in range(30):
            event = asyncio.Event()
            start = time.monotonic()
            waker.arm(start + 0.0005, event)
            await asyncio.wait_for(event.wait(), 1.0)  # nothing else would set it
            waits.append(time.monotonic() - start)
        waker.close()
        return waits

    waits = asyncio.run(main())
    assert min(waits) >= 0.0005
    assert statistics.median(waits) < 0.0009  # a loop timer for 0.5 ms takes ~1.1 ms


def test_a_disarmed_or_replaced_deadline_does_not_fire() -> None:
    async def main() -> None:
        waker = Waker(asyncio.get_running_loop(), "test waker")
        first, second = asyncio.Event(), asyncio.Event()
        waker.arm(time.monotonic() + 0.005, first)
        waker.arm(time.monotonic() + 0.010, second)  # replaces the first
        await asyncio.sleep(0.030)
        assert not first.is_set() and second.is_set()
        third = asyncio.Event()
        waker.arm(time.monotonic() + 0.005, third)
        waker.disarm()
        await asyncio.sleep(0.030)
        assert not third.is_set()
        waker.close()

    asyncio.run(main())


def test_the_thread_leaves_when_idle_and_comes_back(thread_errors: list[BaseException]) -> None:
    async def main() -> None:
        waker = Waker(asyncio.get_running_loop(), "idle waker", idle_s=0.02)
        event = asyncio.Event()
        waker.arm(time.monotonic(), event)
        await asyncio.wait_for(event.wait(), 1.0)
        await asyncio.sleep(0.2)
        assert not any(t.name == "idle waker" for t in threading.enumerate())
        again = asyncio.Event()
        waker.arm(time.monotonic() + 0.001, again)
        await asyncio.wait_for(again.wait(), 1.0)
        waker.close()

    asyncio.run(main())
    assert thread_errors == []


def test_a_closed_loop_stops_the_thread_quietly(thread_errors: list[BaseException]) -> None:
    loop = asyncio.new_event_loop()
    waker = Waker(loop, "orphan waker")
    waker.arm(time.monotonic() + 0.01, asyncio.Event())
    loop.close()
    time.sleep(0.1)
    assert not any(t.name == "orphan waker" for t in threading.enumerate())
    assert thread_errors == []


class _StoppedClockLoop(asyncio.SelectorEventLoop):
    def time(self) -> float:
        return 0.0


def test_only_loops_on_the_monotonic_clock_get_a_waker() -> None:
    real, virtual = asyncio.new_event_loop(), _StoppedClockLoop()
    try:
        assert loop_clock_is_monotonic(real)
        assert not loop_clock_is_monotonic(virtual)
    finally:
        real.close()
        virtual.close()
