"""How long each request waited in the engine's queue, reported back to the client.

A tiny engine observer: arrival and first admission per request id, kept only while the request
lives (a dict entry per in-flight request, nothing per token). The server adds the queue time to the
last chunk (``"timing": {"queue_s": ...}``) so a client-side record can carry the server's
admission time, which no client can see otherwise.
"""

from __future__ import annotations

import threading

from fleetwatch.telemetry.hooks import NullObserver, RequestInfo

__all__ = ["QueueTimes"]


class QueueTimes(NullObserver):
    """Engine observer (step-loop thread) whose ``take(request_id)`` is read on the event loop."""

    def __init__(self) -> None:
        self._arrived: dict[str, float] = {}
        self._queue: dict[str, float] = {}
        self._lock = threading.Lock()

    def take(self, request_id: str) -> float | None:
        """The request's queue time in seconds (engine clock), once; None if never scheduled."""
        with self._lock:
            self._arrived.pop(request_id, None)
            return self._queue.pop(request_id, None)

    def on_request_arrived(self, t: float, info: RequestInfo) -> None:
        with self._lock:
            self._arrived[info.request_id] = t

    def on_request_scheduled(self, t: float, request_id: str, batch_size: int) -> None:
        with self._lock:
            start = self._arrived.pop(request_id, None)
            if start is not None:
                self._queue[request_id] = max(0.0, t - start)

    def on_request_finished(
        self,
        t: float,
        request_id: str,
        status: str,
        finish_reason: str | None,
        error_type: str | None,
        output_tokens: int,
        cached_prompt_tokens: int,
    ) -> None:
        if status != "ok":
            with self._lock:
                self._arrived.pop(request_id, None)
                self._queue.pop(request_id, None)
