"""A virtual-clock event loop: time jumps to the next timer instead of waiting for it.

The loop's selector is polled without blocking; when nothing is ready, the loop's clock advances
by the timeout the loop asked to wait. Timing behaviour is thus tested without real sleeps.
"""

from __future__ import annotations

import asyncio
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
        events = self._inner.select(0)
        if not events and timeout is not None and timeout > 0:
            self._loop.virtual_time += timeout
        elif not events and timeout is None:
            events = self._inner.select(1.0)  # nothing scheduled: only another thread can wake us
        return events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self.virtual_time = 0.0
        self._selector = _VirtualSelector(self._selector, self)  # type: ignore[has-type,assignment]

    def time(self) -> float:
        return self.virtual_time


def _run_virtual(coro: Coroutine[Any, Any, T]) -> T:
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


@pytest.fixture
def run_virtual() -> Callable[[Coroutine[Any, Any, Any]], Any]:
    """Run a coroutine to completion on a fresh virtual-clock loop."""
    return _run_virtual
