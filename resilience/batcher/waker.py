"""Wake an event loop at a precise time: selectors sleep in whole milliseconds, a thread does not.

asyncio's selector loops block in ``epoll_wait``/``poll``, whose timeouts are whole milliseconds
rounded up, so a loop timer for 0.5 ms fires after ~1.1 ms. A thread's timed wait (a futex) wakes
within tens of microseconds of its deadline; ``loop.call_soon_threadsafe`` then wakes the loop at
once. ``Waker`` keeps one daemon thread for that while there is something to wake; the thread
exits after ``idle_s`` without work and is started again by the next ``arm``.

The micro-batcher takes its waker from a factory (``WakerFactory``, default ``thread_waker``), so
a loop with a virtual clock can be handed a waker that runs on that clock.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["LoopWaker", "Waker", "WakerFactory", "loop_clock_is_monotonic", "thread_waker"]


class LoopWaker(Protocol):
    """Sets an ``asyncio.Event`` at a deadline on its loop's clock, sooner than a loop timer can.

    ``arm`` replaces what was armed before; the event is set on the loop's thread, at ``when`` or
    later, never before. ``disarm`` drops what is armed; ``close`` drops it and stops for good.
    """

    def arm(self, when: float, event: asyncio.Event) -> None: ...

    def disarm(self) -> None: ...

    def close(self) -> None: ...


WakerFactory = Callable[[asyncio.AbstractEventLoop, str], LoopWaker | None]
"""``factory(loop, name)``: a waker for ``loop`` (``name`` names its thread), or None for none."""


def loop_clock_is_monotonic(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop.time()`` is ``time.monotonic()`` (asyncio's own loops, not virtual clocks)."""
    return type(loop).time is asyncio.BaseEventLoop.time


def thread_waker(loop: asyncio.AbstractEventLoop, name: str) -> Waker | None:
    """The default ``WakerFactory``: a ``Waker`` thread where the loop's clock is ``time.monotonic``.

    Other loops (a virtual clock, uvloop) get None and rely on the loop timer and the spin.
    """
    return Waker(loop, name) if loop_clock_is_monotonic(loop) else None


class Waker:
    """Sets an ``asyncio.Event`` of one loop at a deadline on ``clock``, from a thread.

    ``clock`` (seconds) must be the loop's clock: ``time.monotonic`` for asyncio's own loops. The
    thread waits, in real seconds, for what ``clock`` says is left before the deadline, then reads
    ``clock`` again; it sets the event at the first reading at or past the deadline.
    ``idle_s``: real seconds without anything armed after which the thread exits.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        name: str,
        idle_s: float = 1.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._loop = loop
        self._name = name
        self._idle_s = idle_s
        self._clock = clock
        self._cond = threading.Condition(threading.Lock())
        self._when: float | None = None
        self._event: asyncio.Event | None = None
        self._running = False
        self._closed = False

    def arm(self, when: float, event: asyncio.Event) -> None:
        """Set ``event`` (on the loop's thread) at ``when``; replaces what was armed before."""
        with self._cond:
            if self._closed:
                return
            self._when, self._event = when, event
            if self._running:
                self._cond.notify()
            else:
                self._running = True
                threading.Thread(target=self._run, name=self._name, daemon=True).start()

    def disarm(self) -> None:
        with self._cond:
            self._when = self._event = None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._when = self._event = None
            self._cond.notify()

    def _run(self) -> None:
        cond = self._cond
        with cond:
            while not self._closed:
                when, event = self._when, self._event
                if when is None or event is None:
                    if not cond.wait(self._idle_s) and self._when is None:
                        break  # idle: the next arm starts a new thread
                    continue
                left = when - self._clock()
                if left > 0.0:
                    cond.wait(left)
                    continue
                self._when = self._event = None
                try:
                    self._loop.call_soon_threadsafe(event.set)
                except RuntimeError:
                    break  # the loop is closed
            self._running = False
