"""A virtual-clock event loop: time jumps to the next timer instead of waiting for it.

The loop's selector is polled without blocking; when nothing is ready, the loop's clock advances
by the timeout the loop asked to wait. Timing behaviour is thus tested without real sleeps.

Options model a real loop's timing: ``whole_ms`` rounds each wait up to whole milliseconds, as
epoll and poll do, and ``tick_s`` is what each loop iteration costs, so time passes while a task
yields. ``VirtualWaker`` (from the ``precise_wakers`` factory) plays the batcher's waker thread:
it wakes the loop at its deadline exactly, however the selector rounds.
"""

from __future__ import annotations

import asyncio
import math
import selectors
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

T = TypeVar("T")


class _VirtualSelector:
    def __init__(self, inner: selectors.BaseSelector, loop: VirtualClockLoop) -> None:
        self._inner = inner
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        loop = self._loop
        loop.virtual_time += loop.tick_s
        events = self._inner.select(0)
        if events:
            return events
        if timeout is not None and timeout > 0 and loop.whole_ms:
            timeout = math.ceil(timeout * 1e3) * 1e-3
        if loop.fire_waker_due_within(timeout):
            return []
        if timeout is not None and timeout > 0:
            loop.virtual_time += timeout
        elif timeout is None:
            events = self._inner.select(1.0)  # nothing scheduled: only another thread can wake us
        return events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self, *, whole_ms: bool = False, tick_s: float = 0.0) -> None:
        super().__init__()
        self.virtual_time = 0.0
        self.whole_ms = whole_ms
        self.tick_s = tick_s
        self.armed: dict[VirtualWaker, tuple[float, asyncio.Event]] = {}
        self._selector = _VirtualSelector(self._selector, self)  # type: ignore[has-type,assignment]

    def time(self) -> float:
        return self.virtual_time

    def fire_waker_due_within(self, timeout: float | None) -> bool:
        """Jump to the earliest armed waker's deadline and set its event, if the selector would
        wake no sooner (``timeout`` None: never)."""
        if not self.armed:
            return False
        waker, (when, event) = min(self.armed.items(), key=lambda armed: armed[1][0])
        if timeout is not None and when > self.virtual_time + timeout:
            return False
        del self.armed[waker]
        self.virtual_time = max(self.virtual_time, when)
        self.call_soon(event.set)
        return True


class VirtualWaker:
    """A batcher waker on the virtual clock: the loop sets its event at its deadline exactly."""

    def __init__(self, loop: VirtualClockLoop, arms: list[float]) -> None:
        self._loop = loop
        self._arms = arms

    def arm(self, when: float, event: asyncio.Event) -> None:
        self._arms.append(when)
        self._loop.armed[self] = (when, event)

    def disarm(self) -> None:
        self._loop.armed.pop(self, None)

    def close(self) -> None:
        self.disarm()


class PreciseWakers:
    """A ``WakerFactory`` of ``VirtualWaker``s; ``arms`` logs every deadline they were armed for."""

    def __init__(self) -> None:
        self.arms: list[float] = []

    def __call__(self, loop: asyncio.AbstractEventLoop, name: str) -> VirtualWaker:
        assert isinstance(loop, VirtualClockLoop), "a virtual waker needs the virtual-clock loop"
        return VirtualWaker(loop, self.arms)


def _run_virtual(coro: Coroutine[Any, Any, T], *, whole_ms: bool = False, tick_s: float = 0.0) -> T:
    loop = VirtualClockLoop(whole_ms=whole_ms, tick_s=tick_s)
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


@pytest.fixture
def run_virtual() -> Callable[..., Any]:
    """Run a coroutine to completion on a fresh virtual-clock loop (``VirtualClockLoop``'s options
    as keywords)."""
    return _run_virtual


@pytest.fixture
def precise_wakers() -> PreciseWakers:
    """A waker factory for ``MicroBatcher(waker=...)`` on the virtual-clock loop."""
    return PreciseWakers()
