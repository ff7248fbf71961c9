"""``Idempotency-Key``: the header's check, and the keys remembered with their requests.

A key seen within the time to live names its request (in flight, or finished ok) so a retry
attaches to it; a key whose request was aborted, rejected or failed is forgotten so the retry runs
anew. Keys, bytes and age are bounded (see ``IdempotencyKeys``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from fleetwatch.engine_probe.serve.inflight import InFlight
from fleetwatch.engine_probe.serve.wire.errors import InvalidRequest

__all__ = ["IdempotencyKeys", "check_key"]


def check_key(key: str | None) -> None:
    """Raise ``InvalidRequest`` (400) unless the key is absent or 1-255 printable characters."""
    if key is not None and not (0 < len(key) <= 255 and key.isprintable()):
        raise InvalidRequest(
            400, "Idempotency-Key must be 1-255 printable characters", "Idempotency-Key"
        )


class IdempotencyKeys:
    """Keys to requests, oldest first; an entry holds the request and when it was remembered.

    Bounded three ways: at most ``max_keys`` keys, at most ``max_bytes`` bytes of kept responses
    (each entry costs its key, its request's canonical body and rendered output, and a fixed
    overhead; a request still running grows until it ends, so the bound is enforced again on every
    lookup, remember and ``expire``), and ``ttl_s``: a finished request's key expires that long
    after it was remembered. ``expire`` (run periodically by the server) drops expired keys even
    when no keyed request arrives. The oldest entries go first.
    """

    ENTRY_OVERHEAD = 256
    """Bytes counted per entry beyond its key and its request's bytes (dict slot, tuple, objects)."""

    def __init__(
        self,
        ttl_s: float,
        max_keys: int,
        clock: Callable[[], float],
        *,
        max_bytes: int = 64 << 20,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_keys = max_keys
        self.max_bytes = max_bytes
        self.clock = clock
        self.evicted = 0
        """Keys dropped for the key or byte bound (not expiry)."""
        self._keys: OrderedDict[str, tuple[InFlight, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._keys)

    def _cost(self, key: str, flight: InFlight) -> int:
        return len(key) + flight.nbytes + self.ENTRY_OVERHEAD

    @property
    def nbytes(self) -> int:
        """Bytes held now (see the class docstring for what counts)."""
        return sum(self._cost(k, f) for k, (f, _) in self._keys.items())

    def expire(self, now: float | None = None) -> int:
        """Drop every finished entry older than ``ttl_s`` and enforce the bounds; return how many
        entries were dropped."""
        now = self.clock() if now is None else now
        old = [k for k, (f, t) in self._keys.items() if f.done and now - t > self.ttl_s]
        for k in old:
            del self._keys[k]
        return len(old) + self._bound()

    def _bound(self) -> int:
        n = 0
        while len(self._keys) > self.max_keys:
            self._keys.popitem(last=False)
            n += 1
        total = self.nbytes
        while self._keys and total > self.max_bytes:
            k, (f, _) = self._keys.popitem(last=False)
            total -= self._cost(k, f)
            n += 1
        self.evicted += n
        return n

    def lookup(self, key: str) -> InFlight | None:
        """The request ``key`` names, if it still counts (expired finished entries are dropped)."""
        now = self.clock()
        self.expire(now)
        hit = self._keys.get(key)
        if hit is None:
            return None
        flight, _ = hit
        if flight.done and flight.history and flight.history[-1].status != "ok":
            self._keys.pop(key, None)  # aborted, rejected or failed work is no result: run again
            return None
        return flight

    def remember(self, key: str, flight: InFlight) -> None:
        self._keys[key] = (flight, self.clock())
        self._keys.move_to_end(key)
        self._bound()
