"""Run shutdown work against a deadline: a call that may hang (an exporter waiting on a collector
that never answers, a file system that stalls) runs on a daemon thread that is waited for only
until the deadline, then left behind. A daemon thread does not keep the process from exiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Deadline", "run_bounded"]


def run_bounded(fn: Callable[[], object], timeout_s: float, name: str) -> BaseException | None:
    """Call ``fn`` on a daemon thread and wait at most ``timeout_s`` seconds.

    Returns None when it returned in time, the exception it raised, or ``TimeoutError`` when it
    was still running at the deadline (it keeps running in the background; nothing can stop it).
    """
    failure: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # reported to the caller, never raised on the thread
            failure.append(exc)

    thread = threading.Thread(target=run, name=f"fleetwatch-{name}", daemon=True)
    thread.start()
    thread.join(max(0.0, timeout_s))
    if thread.is_alive():
        return TimeoutError(f"{name} still running after {timeout_s:.3g} s")
    return failure[0] if failure else None


@dataclass(slots=True)
class Deadline:
    """Seconds left until a fixed moment on ``clock``."""

    end: float
    clock: Callable[[], float] = time.monotonic

    @classmethod
    def after(cls, seconds: float, clock: Callable[[], float] = time.monotonic) -> Deadline:
        return cls(clock() + seconds, clock)

    def left(self) -> float:
        return max(0.0, self.end - self.clock())
