"""``Idempotency-Key``: the header's check, and the keys remembered with their requests.

A key seen within the time to live names its request (in flight, or finished ok) so a retry
attaches to it; a key whose request was aborted, rejected or failed is forgotten so the retry runs
anew. At most ``max_keys`` are kept, the oldest dropped first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from engine_probe.serve.errors import InvalidRequest
from engine_probe.serve.inflight import InFlight

__all__ = ["IdempotencyKeys", "check_key"]


def check_key(key: str | None) -> None:
    """Raise ``InvalidRequest`` (400) unless the key is absent or 1-255 printable characters."""
    if key is not None and not (0 < len(key) <= 255 and key.isprintable()):
        raise InvalidRequest(
            400, "Idempotency-Key must be 1-255 printable characters", "Idempotency-Key"
        )


class IdempotencyKeys:
    """Keys to requests, oldest first; an entry holds the request and when it was remembered."""

    def __init__(self, ttl_s: float, max_keys: int, clock: Callable[[], float]) -> None:
        self.ttl_s = ttl_s
        self.max_keys = max_keys
        self.clock = clock
        self._keys: OrderedDict[str, tuple[InFlight, float]] = OrderedDict()

    def lookup(self, key: str) -> InFlight | None:
        """The request ``key`` names, if it still counts (expired finished entries are dropped)."""
        now = self.clock()
        while self._keys:
            old, (f, t) = next(iter(self._keys.items()))
            if f.done and now - t > self.ttl_s:
                self._keys.pop(old)
            else:
                break
        hit = self._keys.get(key)
        if hit is None:
            return None
        flight, t = hit
        if flight.done and now - t > self.ttl_s:
            self._keys.pop(key, None)
            return None
        if flight.done and flight.history and flight.history[-1].status != "ok":
            self._keys.pop(key, None)  # aborted, rejected or failed work is no result: run again
            return None
        return flight

    def remember(self, key: str, flight: InFlight) -> None:
        self._keys[key] = (flight, self.clock())
        self._keys.move_to_end(key)
        while len(self._keys) > self.max_keys:
            self._keys.popitem(last=False)
