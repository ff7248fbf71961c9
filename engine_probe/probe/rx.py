"""Receive times taken at the socket read, not when the reading task next runs.

aiohttp hands bytes to its protocol's ``data_received`` as soon as the event loop sees the socket
readable; the task that iterates the response wakes up later, after every callback queued before
it. Under load that second wait is the larger, and it is pure client delay. ``StampingHandler``
notes the clock at every ``data_received`` together with how many body bytes the response had
received by then; ``StampedBytes`` maps the bytes the reader gets back to the instant they arrived.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler

__all__ = ["StampedBytes", "StampingHandler", "install", "sink_for"]


class StampingHandler(ResponseHandler):
    """aiohttp's response protocol, noting when each read happened."""

    def __init__(self, loop: Any, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(loop)
        self.clock = clock
        self.last_rx = clock()
        self.sink: StampedBytes | None = None

    def data_received(self, data: bytes) -> None:
        t = self.clock()
        self.last_rx = t
        super().data_received(data)
        sink = self.sink
        if sink is not None:
            sink.note(t)


def install(connector: aiohttp.TCPConnector, clock: Callable[[], float]) -> bool:
    """Make ``connector`` build stamping protocols; False where aiohttp's internals differ (the
    reader's own time is then used)."""
    factory = getattr(connector, "_factory", None)
    loop = getattr(connector, "_loop", None)
    if not isinstance(factory, functools.partial) or factory.func is not ResponseHandler:
        return False
    connector._factory = functools.partial(StampingHandler, loop=loop, clock=clock)  # type: ignore[assignment]
    return True


class StampedBytes:
    """Arrival instants of one response body's bytes: (instant, body bytes received by then)."""

    __slots__ = ("_content", "_ends", "_k", "_pos", "_proto", "_times")

    def __init__(
        self, content: aiohttp.StreamReader, first_s: float, proto: StampingHandler | None = None
    ) -> None:
        self._content = content
        self._proto = proto
        self._times = [first_s]
        self._ends = [content.total_bytes]
        self._pos = 0
        self._k = 0

    def note(self, t: float) -> None:
        end = self._content.total_bytes
        if end > self._ends[-1]:
            self._times.append(t)
            self._ends.append(end)

    def split(self, data: bytes, fallback_s: float) -> Iterator[tuple[float, bytes]]:
        """The next ``data`` the reader got, cut where reads ended, each piece with its instant."""
        base = start = self._pos
        stop = start + len(data)
        self._pos = stop
        times, ends = self._times, self._ends
        k = self._k
        while start < stop:
            while k < len(ends) and ends[k] <= start:
                k += 1
            if k < len(ends):
                t, cut = times[k], min(ends[k], stop)
            else:
                t, cut = fallback_s, stop
            yield t, data[start - base : cut - base]
            start = cut
        self._k = k

    def detach(self) -> None:
        if self._proto is not None and self._proto.sink is self:
            self._proto.sink = None
        self._proto = None


def sink_for(resp: aiohttp.ClientResponse) -> StampedBytes | None:
    """Attach a stamp sink to the connection ``resp`` is read from; None if it cannot stamp."""
    conn = resp.connection
    proto = conn.protocol if conn is not None else None
    if not isinstance(proto, StampingHandler):
        return None
    sink = StampedBytes(resp.content, proto.last_rx, proto)
    proto.sink = sink
    return sink
