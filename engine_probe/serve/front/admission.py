"""Front-door admission: draining (503), the queue limit (429 with ``Retry-After``), and the
requests admitted and in flight. Refusals are returned, not answered: the caller answers and
records them (``refusals``), so every refused request is counted, spanned and recorded.

``waiting`` counts admitted requests without a first output yet; ``max_queue`` of them fill the
queue. ``Retry-After`` is estimated from the recent mean request time, the queue ahead and the
engine's running slots. ``drain`` closes the door and waits for the requests in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from typing import Any

from fleetwatch.engine_probe.serve.front.config import ServerConfig
from fleetwatch.engine_probe.serve.front.http_metrics import HttpMetrics
from fleetwatch.engine_probe.serve.inflight import InFlight
from fleetwatch.engine_probe.serve.wire.errors import InvalidRequest

__all__ = ["FrontDoor"]


class FrontDoor:
    """Who gets in, and the requests that did (``flights``) until their producers end."""

    def __init__(self, engine: Any, config: ServerConfig, metrics: HttpMetrics) -> None:
        self.engine = engine
        self.config = config
        self.metrics = metrics
        self.flights: set[InFlight] = set()
        self.waiting = 0
        self.draining = False
        self.mean_e2e_s = 1.0
        """Exponentially weighted mean of request times (seconds), for ``Retry-After``."""

    def retry_after(self) -> str:
        """Seconds until a slot is likely free, as the ``Retry-After`` header value (>= 1)."""
        slots = max(1, getattr(self.engine.engine_config, "max_num_seqs", 1))
        return str(max(1, math.ceil(self.mean_e2e_s * (self.waiting + 1) / slots)))

    def closed(self) -> tuple[InvalidRequest, dict[str, str]] | None:
        """The 503 refusal (and its headers) while draining, else None."""
        if not self.draining:
            return None
        return InvalidRequest(503, "server is shutting down"), {"Retry-After": "1"}

    def full(self) -> tuple[InvalidRequest, dict[str, str]] | None:
        """The 429 refusal (and its ``Retry-After``) when the queue is full, else None."""
        if self.waiting < self.config.max_queue:
            return None
        return (
            InvalidRequest(429, f"queue full ({self.waiting} requests waiting); retry later"),
            {"Retry-After": self.retry_after()},
        )

    def admit(self, flight: InFlight) -> None:
        """A new request enters the queue."""
        self.flights.add(flight)
        self.waiting += 1
        self.metrics.queue.set(self.waiting)

    def started(self) -> None:
        """An admitted request left the queue: its first output came, or it ended without one."""
        self.waiting -= 1
        self.metrics.queue.set(self.waiting)

    def left(self, flight: InFlight, took_s: float) -> None:
        """A request's producer ended after ``took_s`` seconds."""
        self.flights.discard(flight)
        self.mean_e2e_s = 0.9 * self.mean_e2e_s + 0.1 * took_s

    async def drain(self, timeout_s: float) -> int:
        """Refuse new work and wait for in-flight requests; return how many were still running."""
        self.draining = True
        pending = [f.finished.wait() for f in list(self.flights)]
        if pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*pending), timeout_s)
        left = [f for f in self.flights if not f.done]
        for f in left:
            if f.producer is not None:
                f.producer.cancel()
        return len(left)
