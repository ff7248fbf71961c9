"""Connection limits of the HTTP front: a cap on open connections, a deadline for each request
head, and the aiohttp settings that bound the rest (idle keep-alive, header sizes, read buffer).

aiohttp parses and times requests well once a head has arrived, but it has no cap on connections
and no deadline for a head that trickles in (slowloris). ``ConnectionGuard`` adds both at the
accept level, wrapping each aiohttp protocol in a ``GuardedProtocol``:

- At most ``max_connections`` connections are open. At the cap a new connection first replaces the
  oldest connection still waiting for a request head (a slow or silent client); when no connection
  is waiting for one, the new one gets a canned ``503`` at once and is closed (idle keep-alive
  connections leave within ``keepalive_timeout_s``). ``/health`` therefore answers while thousands
  of slow connections are held open.
- Every request head has ``header_timeout_s`` to arrive, or the connection gets a ``408`` and is
  closed: the first from accept, each later one on a keep-alive connection from its first byte
  after the previous response (``response_done``). Between requests an idle connection is closed
  by aiohttp's ``keepalive_timeout`` (which also ends a head still incomplete that long after the
  last response). Request bodies are bounded by ``listener.body_deadline`` (``408`` when the body
  has not fully arrived ``body_timeout_s`` after the head).

The first head is seen in the bytes (its blank line); a later one when aiohttp starts handling it
(``request_started``), since bytes that arrive during a request may be its body. The hooks into
aiohttp (``request_started``, ``response_done``) and the listener live in ``listener``. Expired
heads are found by ``sweep(now)``, run every ``sweep_interval_s`` on the event loop (tests call it
with their own clock). Everything is counted (``ConnectionStats``); nothing here logs per
connection.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp.web_protocol import RequestHandler

from fleetwatch.engine_probe.serve.front.quiet_log import QuietLog

__all__ = [
    "HEAD_TIMEOUT",
    "REFUSED",
    "ConnectionGuard",
    "ConnectionLimits",
    "ConnectionStats",
    "GuardedProtocol",
]


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Limits of each connection and of all of them together. Seconds, bytes, counts."""

    max_connections: int = 1024
    """Open connections at most (clamped to the process's file limit less a reserve at start)."""
    header_timeout_s: float = 10.0
    """For each request head: from accept (the first) or from its first byte (later ones)."""
    body_timeout_s: float = 30.0
    """From the end of a request head to the end of its body."""
    keepalive_timeout_s: float = 15.0
    """An idle keep-alive connection (or one mid-head after a response) is closed after this."""
    max_line_size: int = 8190
    """Longest request line or header line, bytes (longer: 400)."""
    max_field_size: int = 8190
    """Longest header value, bytes (longer: 400)."""
    max_headers: int = 128
    """Most header fields in one request (more: 400)."""
    read_bufsize: int = 1 << 16
    """Bytes a connection buffers from the socket before reading pauses."""
    sweep_interval_s: float = 0.5
    """How often expired request heads are looked for."""
    log_interval_s: float = 60.0
    """At most one log line per this many seconds about the cap being hit or accept() failing."""

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_line_size", "max_field_size", "max_headers"):
            if getattr(self, name) < 1:
                raise ValueError(f"ConnectionLimits.{name} must be >= 1")
        for name in ("header_timeout_s", "body_timeout_s", "keepalive_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"ConnectionLimits.{name} must be > 0")
        if self.read_bufsize < 1024:
            raise ValueError("ConnectionLimits.read_bufsize must be >= 1024")
        if not self.sweep_interval_s > 0 or not self.log_interval_s > 0:
            raise ValueError("ConnectionLimits.sweep_interval_s and log_interval_s must be > 0")

    def handler_args(self, logger: Any = None) -> dict[str, Any]:
        """Keyword arguments for aiohttp's request handler (``web.AppRunner(**...)``), only those
        this aiohttp version accepts: an unknown one would make aiohttp drop all of them."""
        wanted: dict[str, Any] = {
            **({"logger": logger} if logger is not None else {}),
            "keepalive_timeout": self.keepalive_timeout_s,
            "max_line_size": self.max_line_size,
            "max_field_size": self.max_field_size,
            "max_headers": self.max_headers,
            "read_bufsize": self.read_bufsize,
        }
        accepted = inspect.signature(RequestHandler.__init__).parameters
        return {k: v for k, v in wanted.items() if k in accepted}


def raise_file_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit (a server process's
    connections are file descriptors; the soft limit is often far below the hard one). Returns the
    soft limit now in force (-1 where there is no such limit)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if resource.RLIM_INFINITY not in (soft, hard) and hard > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return int(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    except (ImportError, OSError, ValueError):
        return -1


def file_limit_reserve(max_connections: int, reserve: int = 256) -> int:
    """``max_connections`` lowered so that the open connections leave ``reserve`` descriptors of
    the process's soft file limit free (log files, record files, the engine), at least 1."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return max_connections
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return max_connections
    return max(1, min(max_connections, soft - reserve))


def _canned(status: str, message: str, extra: str = "") -> bytes:
    error = {"message": message, "type": "server_error", "param": None, "code": int(status[:3])}
    body = json.dumps({"error": error}, separators=(",", ":")).encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}"
        f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


REFUSED = _canned("503 Service Unavailable", "too many connections; retry", "Retry-After: 1\r\n")
HEAD_TIMEOUT = _canned("408 Request Timeout", "request head not received in time")


@dataclass(slots=True)
class ConnectionStats:
    """Counts since start: connections accepted, refused at the cap (503), replaced at the cap,
    closed for a late request head (any request on the connection) or body."""

    accepted: int = 0
    refused: int = 0
    evicted: int = 0
    header_timeouts: int = 0
    body_timeouts: int = 0


class GuardedProtocol(asyncio.Protocol):
    """One accepted connection: the guard's bookkeeping around aiohttp's protocol (``inner``)."""

    __slots__ = (
        "_factory",
        "_tail",
        "guard",
        "idle",
        "inner",
        "opened_s",
        "transport",
        "waiting_head",
    )

    def __init__(self, guard: ConnectionGuard, factory: Callable[[], asyncio.Protocol]) -> None:
        self.guard = guard
        self._factory = factory
        self.inner: asyncio.Protocol | None = None
        self.transport: asyncio.Transport | None = None
        self.waiting_head = True
        """Waiting for a request head whose deadline runs (the first, or a later one begun)."""
        self.idle = False
        """A response ended and no byte came since: the next byte starts the next head."""
        self.opened_s = 0.0
        self._tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if not self.guard.admit(self):
            transport.write(REFUSED)
            transport.close()
            return
        self.inner = self._factory()
        self.guard.known[self.inner] = self
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        inner = self.inner
        if inner is None:
            return
        if self.idle:
            rest = data.lstrip(b"\r\n")  # empty lines before a request line are allowed
            if not rest:
                inner.data_received(data)
                return
            self.idle = False
            self.waiting_head = True
            self._tail = b""
            self.guard.head_started(self)
            data_for_head = rest
        else:
            data_for_head = data
        if self.waiting_head:
            window = self._tail + data_for_head
            if b"\n\r\n" in window or b"\n\n" in window:
                self.waiting_head = False
                self._tail = b""
                self.guard.head_complete(self)
            else:
                self._tail = window[-2:]
        inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.closed(self)
        if self.inner is not None:
            self.guard.known.pop(self.inner, None)
            self.inner.connection_lost(exc)

    def close_with(self, answer: bytes | None) -> None:
        """Answer (when given) and close, or drop at once (no answer)."""
        t = self.transport
        if t is None or t.is_closing():
            return
        if answer is None:
            t.abort()
        else:
            t.write(answer)
            t.close()


class ConnectionGuard:
    """Admission and deadlines for the connections of one listener (see the module docstring).

    Runs on the event loop only. ``clock`` is the time source of ``sweep`` deadlines.
    """

    def __init__(
        self, limits: ConnectionLimits, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits
        self.max_connections = file_limit_reserve(limits.max_connections)
        self.clock = clock
        self.stats = ConnectionStats()
        self._pending: OrderedDict[GuardedProtocol, float] = OrderedDict()
        """Connections waiting for a request head, by when its deadline started, oldest first."""
        self._active: set[GuardedProtocol] = set()
        """Connections in a request (head received) or idle between requests."""
        self.known: dict[object, GuardedProtocol] = {}
        """aiohttp's protocol of each admitted connection -> its guard protocol (for the hooks)."""
        self._others = 0
        """Connections closed by the guard whose close was not seen yet."""
        self._timer: asyncio.TimerHandle | None = None
        self.cap_log = QuietLog(
            f"connection cap ({self.max_connections}) reached",
            interval_s=limits.log_interval_s,
            clock=clock,
        )

    @property
    def open(self) -> int:
        return len(self._pending) + len(self._active) + self._others

    @property
    def pending(self) -> int:
        """Open connections waiting for a request head (the first, or a later one begun)."""
        return len(self._pending)

    def protocol_factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], Any]:
        """The factory ``loop.create_server`` gets: aiohttp's protocols, guarded."""
        return lambda: GuardedProtocol(self, inner)

    def admit(self, conn: GuardedProtocol) -> bool:
        """Whether ``conn`` may stay: at the cap it replaces the oldest connection without a
        request head (closed at once; until its close is seen the count is one over), else no."""
        s = self.stats
        if self.open >= self.max_connections:
            replace = bool(self._pending)
            if replace:
                oldest, _ = self._pending.popitem(last=False)
                self._others += 1
                s.evicted += 1
                oldest.close_with(None)
            else:
                s.refused += 1
            self.cap_log.hit(f"in all {s.evicted} replaced, {s.refused} refused with 503")
            if not replace:
                return False
        conn.opened_s = self.clock()
        self._pending[conn] = conn.opened_s
        s.accepted += 1
        return True

    def head_complete(self, conn: GuardedProtocol) -> None:
        conn.waiting_head = False
        conn.idle = False
        if self._pending.pop(conn, None) is not None:
            self._active.add(conn)

    def head_started(self, conn: GuardedProtocol) -> None:
        """The first byte of a later request head came: its deadline starts now."""
        if conn in self._active:
            self._active.discard(conn)
            conn.opened_s = self.clock()
            self._pending[conn] = conn.opened_s

    def request_started(self, inner: object) -> None:
        """aiohttp began handling a request on the connection of ``inner``: its head is in."""
        conn = self.known.get(inner)
        if conn is not None:
            self.head_complete(conn)

    def response_done(self, inner: object, body: Any = None) -> None:
        """The response on the connection of ``inner`` was written: the next head is due (its
        deadline starts with its first byte; until then the connection is idle). ``body``: the
        request's body stream (``is_eof``, ``on_eof``); while the client is still sending it (a
        response sent before the body was read), its bytes are no head: idle only at its end."""
        if body is not None and not body.is_eof():
            body.on_eof(lambda: self.response_done(inner))
            return
        conn = self.known.get(inner)
        if conn is not None and conn in self._active:
            conn.idle = True

    def closed(self, conn: GuardedProtocol) -> None:
        if self._pending.pop(conn, None) is not None:
            return
        if conn in self._active:
            self._active.discard(conn)
        elif conn.inner is not None:
            self._others = max(0, self._others - 1)

    def sweep(self, now: float | None = None) -> int:
        """Close connections whose request head is overdue (408); return how many."""
        now = self.clock() if now is None else now
        limit = self.limits.header_timeout_s
        n = 0
        while self._pending:
            conn, opened = next(iter(self._pending.items()))
            if now - opened < limit:
                break
            self._pending.popitem(last=False)
            self._others += 1
            self.stats.header_timeouts += 1
            conn.close_with(HEAD_TIMEOUT)
            n += 1
        return n

    def start(self) -> None:
        """Sweep periodically on the running loop until ``stop``."""
        loop = asyncio.get_running_loop()

        def tick() -> None:
            self.sweep()
            self._timer = loop.call_later(self.limits.sweep_interval_s, tick)

        if self._timer is None:
            self._timer = loop.call_later(self.limits.sweep_interval_s, tick)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
