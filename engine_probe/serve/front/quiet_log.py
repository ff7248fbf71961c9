"""Logging that stays small under abuse: recurring events are counted, and logged at most once per
interval as one line that says how many happened since the last line.

``AcceptErrors`` is an event-loop exception handler for the errors of ``accept()`` (out of file
descriptors, out of buffers, a connection reset before it was set up): asyncio would log each with
a traceback; here they are counted (``count``) and reported as one line per interval. Any other
loop exception goes to the handler that was there before (or asyncio's default), at most once
per interval for one message (the rest counted in ``other``).

``http_log`` is the logger aiohttp's request handlers get: its ``RateLimit`` filter lets one
warning-or-worse line through per interval, without the traceback (a malformed request makes
aiohttp log "Error handling request" with a traceback, one per request otherwise).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any, ClassVar

__all__ = ["AcceptErrors", "QuietLog", "RateLimit", "http_log"]

_log = logging.getLogger("fleetwatch.serve")


class QuietLog:
    """One warning line per ``interval_s`` at most for a recurring event named ``what``."""

    def __init__(
        self,
        what: str,
        *,
        interval_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger = _log,
    ) -> None:
        self.what = what
        self.interval_s = interval_s
        self.clock = clock
        self.logger = logger
        self.count = 0
        self.lines = 0
        self._since = 0
        self._last: float | None = None

    def hit(self, detail: str = "") -> None:
        """Count one event; log a line when none was logged in the last ``interval_s``."""
        self.count += 1
        self._since += 1
        now = self.clock()
        if self._last is not None and now - self._last < self.interval_s:
            return
        self._last = now
        self.lines += 1
        tail = f" ({detail[:200]})" if detail else ""
        self.logger.warning(
            "%s: %d since the last report, %d in all%s; reported at most every %g s",
            self.what,
            self._since,
            self.count,
            tail,
            self.interval_s,
        )
        self._since = 0


def _is_accept_error(context: dict[str, Any]) -> bool:
    message = str(context.get("message", ""))
    if message.startswith("socket.accept()") or "incoming connection" in message:
        return True
    handle = context.get("handle")
    return handle is not None and "_accept_connection" in repr(handle)[:500]


class AcceptErrors:
    """The exception handler of one event loop (see the module docstring); ``install`` returns
    the loop's existing one if there is one, so servers sharing a loop share the count."""

    _by_loop: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AcceptErrors]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.log = QuietLog("accept() failed", interval_s=interval_s, clock=clock)
        self.interval_s = interval_s
        self.clock = clock
        self.other = 0
        """Other loop exceptions not passed on (the same message within the interval)."""
        self._previous: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object] | None = None
        self._passed: dict[str, float] = {}

    @property
    def count(self) -> int:
        return self.log.count

    @classmethod
    def install(cls, loop: asyncio.AbstractEventLoop, interval_s: float = 60.0) -> AcceptErrors:
        found = cls._by_loop.get(loop)
        if found is not None:
            return found
        handler = cls(interval_s)
        handler._previous = loop.get_exception_handler()
        loop.set_exception_handler(handler)
        cls._by_loop[loop] = handler
        return handler

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if _is_accept_error(context):
            exc = context.get("exception")
            self.log.hit(f"{type(exc).__name__}: {exc}" if exc is not None else "")
            return
        key = str(context.get("message", ""))[:100]
        now = self.clock()
        last = self._passed.get(key)
        if last is not None and now - last < self.interval_s:
            self.other += 1
            return
        if len(self._passed) >= 100:
            self._passed.clear()
        self._passed[key] = now
        if self._previous is not None:
            self._previous(loop, context)
        else:
            loop.default_exception_handler(context)


class RateLimit(logging.Filter):
    """Let one WARNING-or-worse record through per ``interval_s``, as one line (the exception's
    type and message, cut to 200 characters, instead of its traceback); count them all."""

    def __init__(self, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.interval_s = interval_s
        self.clock = clock
        self.count = 0
        self._suppressed = 0
        self._last: float | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        self.count += 1
        now = self.clock()
        if self._last is not None and now - self._last < self.interval_s:
            self._suppressed += 1
            return False
        self._last = now
        text = record.getMessage()
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            text = f"{text}: {type(exc).__name__}: {exc}"
        text = " ".join(text.split())[:300]
        record.msg = f"{text} ({self._suppressed} like it suppressed; at most one every {self.interval_s:g} s)"
        record.args = None
        record.exc_info = None
        record.exc_text = None
        self._suppressed = 0
        return True


def http_log(interval_s: float = 60.0) -> tuple[logging.Logger, RateLimit]:
    """The logger for aiohttp's request handlers, and its (one, shared) rate limit."""
    logger = logging.getLogger("fleetwatch.serve.http")
    for f in logger.filters:
        if isinstance(f, RateLimit):
            return logger, f
    limit = RateLimit(interval_s)
    logger.addFilter(limit)
    return logger, limit
