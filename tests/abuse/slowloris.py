"""A slowloris client as its own process: opens COUNT connections to 127.0.0.1:PORT without
blocking, in batches, sends each an unfinished request head, and holds them all until its stdin
closes. One process holds at most its file limit's worth (raised to the hard limit), so the suite
spreads 20,000 connections over several of these.

Prints one line when every connection is open: ``held H reset R refused F`` (reset: the server
closed it before the head went out, e.g. replaced at its cap; refused: connect failed).

Usage: python slowloris.py PORT COUNT [BATCH]
"""

from __future__ import annotations

import errno
import os
import resource
import selectors
import socket
import sys

HEAD = b"GET /health HTTP/1.1\r\nHost: slow\r\n"  # and never the rest


def raise_file_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit; return the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if resource.RLIM_INFINITY not in (soft, hard) and hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def open_batch(port: int, n: int, held: list[socket.socket]) -> tuple[int, int]:
    """Open ``n`` connections at once, wait for each to connect, send the head: (reset, refused)."""
    sel = selectors.DefaultSelector()
    started = 0
    refused = 0
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        rc = s.connect_ex(("127.0.0.1", port))
        if rc not in (0, errno.EINPROGRESS):
            s.close()
            refused += 1
            continue
        sel.register(s, selectors.EVENT_WRITE)
        started += 1
    reset = 0
    waiting = started
    while waiting:
        events = sel.select(timeout=30)
        if not events:
            raise SystemExit(f"{waiting} connections did not complete within 30 s")
        for key, _ in events:
            s = key.fileobj
            assert isinstance(s, socket.socket)
            sel.unregister(s)
            waiting -= 1
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                s.close()
                refused += 1
                continue
            try:
                s.send(HEAD)
            except OSError:
                reset += 1
            held.append(s)  # held open even when reset, as a slow client would
    sel.close()
    return reset, refused


def main() -> None:
    port, count = int(sys.argv[1]), int(sys.argv[2])
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 500
    limit = raise_file_limit()
    if count > limit - 64:
        raise SystemExit(f"{count} connections need more than this process's file limit ({limit})")
    held: list[socket.socket] = []
    reset = refused = 0
    while len(held) + refused < count:
        r, f = open_batch(port, min(batch, count - len(held) - refused), held)
        reset += r
        refused += f
    print(f"held {len(held)} reset {reset} refused {refused}", flush=True)
    sys.stdin.read()  # hold until the test closes our stdin
    for s in held:
        s.close()
    os._exit(0)


if __name__ == "__main__":
    main()
