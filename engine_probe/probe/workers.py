"""Spreading one load level over several client processes, each with its own event loop.

One asyncio loop reads every chunk of every stream; past a few hundred streams it falls behind and
its lateness lands in the latencies. ``WorkerPool`` runs a level's requests in ``n`` processes,
each a fresh interpreter (``python -m fleetwatch.engine_probe.probe.workers``, talking over a socket pair) so
nothing of the caller's ``__main__`` is re-run in it. The schedule stays the one a single process
would follow: request ``i`` goes to worker ``i mod n`` with its own offset from a start instant
that all workers share (the monotonic clock is system-wide), chosen once every worker is connected
and ready. Results come back as raw per-request samples and are merged before any percentile is
computed (``merge``): percentiles are never averaged.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from fleetwatch.engine_probe.probe.client import OnDone, Prober, RequestBody
from fleetwatch.engine_probe.probe.clientload import LagSampler, WorkerLoad
from fleetwatch.engine_probe.probe.errors import ProbeError
from fleetwatch.engine_probe.probe.measure import RequestResult

__all__ = ["Share", "WorkerPool", "merge", "run_share", "split"]


@dataclass(frozen=True, slots=True)
class Share:
    """One worker's part of a level: which requests, when (offsets from the shared start, open
    loop) or how many at once (closed loop)."""

    indices: tuple[int, ...]
    bodies: tuple[RequestBody, ...]
    offsets_s: tuple[float, ...] | None
    """Open loop: each request's offset; None: closed loop."""
    concurrency: int
    """Closed loop: workers sending back to back; open loop: the client pool cap (0: none)."""


def _parts(total: int, n: int) -> list[int]:
    return [total // n + (1 if w < total % n else 0) for w in range(n)]


def split(
    bodies: Sequence[RequestBody],
    n: int,
    *,
    offsets_s: Sequence[float] | None = None,
    concurrency: int = 0,
) -> list[Share]:
    """Split a level over ``n`` workers: request ``i`` to worker ``i mod n``, offsets unchanged;
    the concurrency (closed loop) or pool cap (open loop) divided as evenly as whole numbers allow.
    Fewer shares come back when there are fewer requests (or concurrency slots) than workers."""
    n = max(1, min(n, len(bodies) or 1, concurrency or n))
    caps = _parts(concurrency, n) if concurrency else [0] * n
    out = []
    for w in range(n):
        idx = tuple(range(w, len(bodies), n))
        out.append(
            Share(
                indices=idx,
                bodies=tuple(bodies[i] for i in idx),
                offsets_s=None if offsets_s is None else tuple(offsets_s[i] for i in idx),
                concurrency=caps[w],
            )
        )
    return out


def merge(parts: Sequence[Sequence[RequestResult]]) -> list[RequestResult]:
    """Every worker's results as one list in request order: the union of the samples."""
    return sorted((r for part in parts for r in part), key=lambda r: r.index)


async def run_share(
    prober: Prober,
    share: Share,
    start_s: float | None,
    *,
    lag_interval_s: float = 0.01,
    on_done: OnDone | None = None,
) -> tuple[list[RequestResult], WorkerLoad]:
    """Run one share on ``prober``'s loop while sampling that loop's lag and this process's CPU."""
    sampler = LagSampler(lag_interval_s)
    sampler.start()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    if share.offsets_s is None:
        results = await prober.closed_loop(
            max(1, share.concurrency), share.bodies, indices=share.indices, on_done=on_done
        )
    else:
        results = await prober.open_loop(
            share.offsets_s,
            share.bodies,
            max_concurrency=share.concurrency or None,
            start_s=start_s,
            indices=share.indices,
            on_done=on_done,
        )
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    lags = await sampler.stop()
    return results, WorkerLoad(tuple(lags), cpu, wall)


async def _job(conn: Connection, setup: dict[str, Any], share: Share, lag: float) -> Any:
    async with Prober(**setup) as prober:
        conn.send("ready")
        start_s = await asyncio.to_thread(conn.recv)
        return await run_share(prober, share, start_s, lag_interval_s=lag)


def _worker(conn: Connection) -> None:  # pragma: no cover - runs in the worker process
    """A worker process: run each (setup, share, lag interval) it is sent until it gets None."""
    while True:
        msg = conn.recv()
        if msg is None:
            return
        try:
            conn.send(asyncio.run(_job(conn, *msg)))
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class WorkerPool:
    """``n`` client processes; ``run`` gives each a share of one level and gathers the results."""

    def __init__(self, n: int) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._conns: list[Connection] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        for _ in range(n):
            parent, child = socket.socketpair()
            fd = child.detach()
            proc = subprocess.Popen(
                [sys.executable, "-m", "fleetwatch.engine_probe.probe.workers", str(fd)],
                pass_fds=(fd,),
                env=env,
            )
            os.close(fd)
            self._conns.append(Connection(parent.detach()))
            self._procs.append(proc)

    @property
    def size(self) -> int:
        return len(self._procs)

    def _recv(self, conn: Connection) -> Any:
        try:
            msg = conn.recv()
        except EOFError:
            raise ProbeError("a probe worker process died") from None
        if isinstance(msg, tuple) and len(msg) == 2 and msg[0] == "error":
            raise ProbeError(f"probe worker failed: {msg[1]}")
        return msg

    def run(
        self,
        setup: dict[str, Any],
        shares: Sequence[Share],
        *,
        lead_s: float = 0.05,
        lag_interval_s: float = 0.01,
    ) -> list[tuple[list[RequestResult], WorkerLoad]]:
        """Blocking: start every share at one shared instant, once all workers are ready."""
        if len(shares) > self.size:
            raise ValueError(f"{len(shares)} shares for {self.size} workers")
        conns = self._conns[: len(shares)]
        for conn, share in zip(conns, shares, strict=True):
            conn.send((setup, share, lag_interval_s))
        for conn in conns:
            if self._recv(conn) != "ready":
                raise ProbeError("probe worker out of step")
        start = time.monotonic() + lead_s
        for conn in conns:
            conn.send(start)
        return [self._recv(conn) for conn in conns]

    def close(self) -> None:
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        for proc in self._procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for conn in self._conns:
            conn.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":  # pragma: no cover - the worker process
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it ends the workers
    _worker(Connection(int(sys.argv[1])))
