"""Every request head on a keep-alive connection has the header deadline, not only the first: a
client that sends one whole request and then trickles the next head is cut (408, closed), and
at the cap such a connection is replaced like a slow first head. Idle keep-alive connections are
left to the keep-alive timeout, and a pipelined request is not mistaken for a slow head.
"""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

from fleetwatch.engine_probe.serve.front.config import ServerConfig
from fleetwatch.engine_probe.serve.front.limits import (
    HEAD_TIMEOUT,
    ConnectionGuard,
    ConnectionLimits,
    GuardedProtocol,
)

GET = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.state = "open"

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.state = "closed"

    def abort(self) -> None:
        self.state = "aborted"

    def is_closing(self) -> bool:
        return self.state != "open"


class Inner(asyncio.Protocol):
    def data_received(self, data: bytes) -> None:
        pass


def _guard(now: list[float], **limits: Any) -> ConnectionGuard:
    return ConnectionGuard(ConnectionLimits(**limits), clock=lambda: now[0])


def _connect(guard: ConnectionGuard) -> tuple[GuardedProtocol, FakeTransport]:
    proto = guard.protocol_factory(Inner)()
    transport = FakeTransport()
    proto.connection_made(transport)
    return proto, transport


def _served(guard: ConnectionGuard, conn: GuardedProtocol) -> None:
    """One whole request on ``conn``, handled and answered (as aiohttp reports it)."""
    conn.data_received(GET)
    guard.request_started(conn.inner)
    guard.response_done(conn.inner)


def test_a_second_head_trickling_after_a_response_gets_408_at_the_header_timeout() -> None:
    now = [0.0]
    guard = _guard(now, header_timeout_s=5.0, keepalive_timeout_s=60.0)
    conn, t = _connect(guard)
    _served(guard, conn)
    assert guard.pending == 0
    now[0] = 30.0  # idle between requests: the keep-alive timeout's business, not this one
    assert guard.sweep() == 0 and t.state == "open"
    conn.data_received(b"GET /health HTTP/1.1\r\n")
    assert guard.pending == 1
    now[0] = 34.0
    conn.data_received(b"X-A: b\r\n")
    assert guard.sweep() == 0
    now[0] = 35.0
    assert guard.sweep() == 1
    assert t.written == HEAD_TIMEOUT and t.state == "closed"
    assert guard.stats.header_timeouts == 1


def test_every_later_head_that_completes_in_time_clears_its_deadline() -> None:
    now = [0.0]
    guard = _guard(now, header_timeout_s=5.0)
    conn, t = _connect(guard)
    for i in range(3):
        _served(guard, conn)
        now[0] += 100.0
        assert guard.sweep() == 0, i
    conn.data_received(b"GET /health HTTP/1.1\r\nHost: x\r")
    conn.data_received(b"\n\r\n")  # split across reads
    now[0] += 100.0
    assert guard.sweep() == 0 and t.state == "open" and guard.pending == 0


def test_a_pipelined_head_is_known_from_its_start_not_from_bytes() -> None:
    now = [0.0]
    guard = _guard(now, header_timeout_s=5.0)
    conn, t = _connect(guard)
    conn.data_received(GET + GET[:20])  # the next head's start arrives with the first request
    guard.request_started(conn.inner)
    guard.response_done(conn.inner)
    conn.data_received(GET[20:])  # its rest: the blank line straddles nothing seen here
    guard.request_started(conn.inner)  # aiohttp parsed it and handles it
    now[0] = 100.0
    assert guard.sweep() == 0 and t.state == "open" and guard.pending == 0


def test_at_the_cap_a_connection_trickling_its_second_head_is_replaced() -> None:
    now = [0.0]
    guard = _guard(now, max_connections=2)
    slow, t_slow = _connect(guard)
    _served(guard, slow)
    busy, _ = _connect(guard)
    busy.data_received(GET)
    slow.data_received(b"GET /")  # begins its second head, slowly
    _, t_new = _connect(guard)
    assert t_slow.state == "aborted" and t_new.state == "open"
    assert guard.stats.evicted == 1 and guard.stats.refused == 0


def _serve(config: ServerConfig, tools: Any, client: Any) -> Any:
    from fleetwatch.engine_probe.serve import start_server

    async def go() -> Any:
        async with await start_server(tools.small_engine(), config=config) as h:
            return await asyncio.to_thread(client, h.port)

    return asyncio.run(go())


TRICKLE_S = 20.0
"""How long the client below keeps trickling before it gives up (the server must cut it first)."""


def _whole(answer: bytes) -> bool:
    head, sep, body = answer.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    raise AssertionError(f"no Content-Length in {head!r}")


def _one_request_then_trickle(port: int) -> tuple[bytes, bytes, bool]:
    """Send a whole request, read its answer, then trickle the next head a byte a tick (one long
    header value, within every size limit) until the server closes the connection: (first
    answer, what came after, cut by the server)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(GET)
        first = b""
        while not _whole(first):
            chunk = s.recv(65536)
            assert chunk, "closed before the first answer"
            first += chunk
        s.settimeout(0.05)
        s.sendall(b"GET /health HTTP/1.1\r\nX-Slow: ")
        after = b""
        deadline = time.monotonic() + TRICKLE_S
        while time.monotonic() < deadline:
            try:
                s.sendall(b"a")
                chunk = s.recv(65536)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                return first, after, True
            if not chunk:
                return first, after, True
            after += chunk
        return first, after, False


def test_a_client_trickling_its_second_head_is_cut_at_the_header_timeout(tools: Any) -> None:
    limits = ConnectionLimits(header_timeout_s=0.5, keepalive_timeout_s=60.0, sweep_interval_s=0.05)
    first, after, cut = _serve(ServerConfig(connections=limits), tools, _one_request_then_trickle)
    assert first.startswith(b"HTTP/1.1 200 ")
    assert cut, f"the second head trickled for {TRICKLE_S} s without being cut"
    assert after == b"" or after.startswith(b"HTTP/1.1 408 "), after[:200]


def test_empty_lines_after_a_response_do_not_start_the_next_head_deadline() -> None:
    now = [0.0]
    guard = _guard(now, header_timeout_s=5.0, keepalive_timeout_s=60.0)
    conn, t = _connect(guard)
    _served(guard, conn)
    conn.data_received(b"\r\n")  # a client's CRLF after its body: allowed before a request line
    conn.data_received(b"\r\n\r\n")
    assert guard.pending == 0
    now[0] = 30.0
    assert guard.sweep() == 0 and t.state == "open"
    conn.data_received(b"\r\nGET /health HTTP/1.1\r\n")  # the next head begins: deadline from now
    assert guard.pending == 1
    now[0] = 36.0
    assert guard.sweep() == 1 and t.written == HEAD_TIMEOUT


class Body:
    """A request body stream as aiohttp's: ``is_eof`` and ``on_eof``."""

    def __init__(self) -> None:
        self.eof = False
        self.callbacks: list[Any] = []

    def is_eof(self) -> bool:
        return self.eof

    def on_eof(self, callback: Any) -> None:
        self.callbacks.append(callback)

    def end(self) -> None:
        self.eof = True
        for c in self.callbacks:
            c()


def test_a_body_still_arriving_after_an_early_response_is_not_a_slow_head() -> None:
    now = [0.0]
    guard = _guard(now, header_timeout_s=5.0, keepalive_timeout_s=60.0)
    conn, t = _connect(guard)
    conn.data_received(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 9000\r\n\r\n")
    guard.request_started(conn.inner)
    body = Body()
    guard.response_done(conn.inner, body)  # answered (say 400) before the body was read
    for _ in range(10):  # the client keeps sending its body, slowly: no head deadline on it
        now[0] += 3.0
        conn.data_received(b"x" * 900)
        assert guard.pending == 0 and guard.sweep() == 0
    body.end()
    now[0] += 30.0
    assert guard.sweep() == 0 and t.state == "open"
    conn.data_received(b"GET /health HTTP/1.1\r\n")  # the next head: its deadline runs
    assert guard.pending == 1
    now[0] += 6.0
    assert guard.sweep() == 1
