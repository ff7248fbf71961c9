"""A byte-accounted cache of loaded models with pinning: which models are resident, within a
budget of bytes, when one server serves several.

Models differ in size by 50x, so a count of resident models means nothing: the budget is bytes
(each model's estimated device footprint: weights, KV cache, scratch). A request *leases* its
model for its whole life, streaming included; a leased model is *pinned* and is never evicted.

- **Load on demand.** A request for a model that is not resident loads it (a cold start, timed
  as phases like any other). Loads run one at a time: they compete for the same disk, host
  memory and bus, and one at a time keeps the accounting exact. A request for a model being
  loaded waits for that load.
- **Eviction by GreedyDual-Size.** Each resident model has a priority
  ``H = L + reload_cost / size`` (reload cost: the seconds its last load took; size: bytes),
  renewed on every lease; to make room the model with the lowest ``H`` goes first (ties: least
  recently leased), and ``L`` rises to the evicted ``H``. So a model that is cheap to reload
  per byte it frees goes before one that is dear, and ``L`` ages the priorities of models not
  used since (Cao and Irani, 1997). Pinned models and the one loading are never candidates, nor
  is a model just loaded whose waiting requests have yet to take their leases: the next load
  in line runs before they wake, and evicting it then would leave them to load it again, each
  load undoing the one before while no request is ever served.
- **Refusals** (``CacheRefusal``, answered 503): a model larger than the whole budget
  (``too_large``: retrying cannot help); not enough unpinned bytes to evict (``all_pinned``:
  answered with ``Retry-After``, the pins end when their requests do); unloading a victim
  failed and left too little room (``unload_failed``, ``Retry-After``: the victim stays resident
  and is evicted again later).
- **Cancellation.** Each load, with the evictions that make room for it, is a task the cache
  owns; requests await it shielded. A request cancelled mid-load or mid-eviction leaves the task
  to finish: no model is forgotten while still in memory, no second build of the same model
  starts while the first runs, and an evicted model's bytes stay counted until its unload ends.

Invariant (asserted by the property test): resident bytes (loaded, loading and still being
unloaded) never exceed the budget, and a model with a lease is never unloaded.

Single event loop: every method runs on it; no locks beyond the one that orders loads.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["CacheEvents", "CacheRefusal", "ModelCache", "Resident", "retry_after_header"]

T = TypeVar("T")


class CacheRefusal(Exception):
    """A model that cannot be made resident now: ``reason`` is ``too_large`` or ``all_pinned``;
    ``retry_after_s`` is set when retrying later can help."""

    def __init__(self, model: str, reason: str, message: str, retry_after_s: int | None) -> None:
        super().__init__(message)
        self.model = model
        self.reason = reason
        self.message = message
        self.retry_after_s = retry_after_s


@dataclass(slots=True, eq=False)
class Resident(Generic[T]):
    """One model in the cache: its bytes, pins (leases held), priority and loaded value."""

    name: str
    size: int
    value: T | None = None
    pins: int = 0
    priority: float = 0.0
    reload_cost_s: float = 0.0
    last_used: int = 0
    ready: bool = False


class CacheEvents:
    """What the cache reports (metrics hang here); every method is a no-op by default."""

    def loaded(self, model: str, seconds: float) -> None: ...

    def evicted(self, model: str) -> None: ...

    def refused(self, model: str, reason: str) -> None: ...

    def changed(self, cache: ModelCache[Any]) -> None:
        """Residency or pins changed (gauges read the cache here)."""


class ModelCache(Generic[T]):
    """Leases on models within ``budget_bytes``; ``sizes`` names every model that may be served.

    ``load(name)`` returns the loaded value; ``unload(name, value)`` releases it (called only
    for a model without leases). Both are awaited on the loop; a failed load leaves nothing
    resident and raises to every request waiting for it; a later request tries the load again.

    >>> async def demo():
    ...     async def load(name): return name.upper()
    ...     async def unload(name, value): pass
    ...     cache = ModelCache(100, {"a": 60, "b": 60}, load, unload)
    ...     async with cache.lease("a") as a:
    ...         pass
    ...     async with cache.lease("b") as b:  # evicts a: 120 bytes would not fit
    ...         return a, b, cache.resident_names()
    >>> asyncio.run(demo())
    ('A', 'B', ['b'])
    """

    def __init__(
        self,
        budget_bytes: int,
        sizes: Mapping[str, int],
        load: Callable[[str], Awaitable[T]],
        unload: Callable[[str, T], Awaitable[None]],
        *,
        clock: Callable[[], float] = time.monotonic,
        events: CacheEvents | None = None,
        retry_after_s: int = 1,
    ) -> None:
        if budget_bytes < 1:
            raise ValueError("model cache budget must be >= 1 byte")
        self.budget_bytes = budget_bytes
        self.sizes = dict(sizes)
        self._load = load
        self._unload = unload
        self._clock = clock
        self.events = events if events is not None else CacheEvents()
        self.retry_after_s = retry_after_s
        self._resident: dict[str, Resident[T]] = {}
        self._unloading_bytes = 0
        self._inflation = 0.0
        self._uses = itertools.count(1)
        self._loads = asyncio.Lock()
        self._tasks: dict[str, asyncio.Task[Resident[T]]] = {}
        self._waiting: dict[str, int] = {}  # requests awaiting each model's load

    # -- state ---------------------------------------------------------------------------------

    @property
    def resident_bytes(self) -> int:
        """Bytes of models loaded, loading, or still being unloaded."""
        return sum(r.size for r in self._resident.values()) + self._unloading_bytes

    def resident_names(self) -> list[str]:
        return sorted(n for n, r in self._resident.items() if r.ready)

    def pins(self, name: str) -> int:
        r = self._resident.get(name)
        return r.pins if r is not None else 0

    def entry(self, name: str) -> Resident[T] | None:
        return self._resident.get(name)

    # -- leases --------------------------------------------------------------------------------

    @asynccontextmanager
    async def lease(self, name: str) -> AsyncIterator[T]:
        """Pin ``name`` (loading it if needed) for the block; ``KeyError`` for an unknown model,
        ``CacheRefusal`` when it cannot be made resident now."""
        r = await self.acquire(name)
        try:
            assert r.value is not None
            yield r.value
        finally:
            self.release(r)

    async def acquire(self, name: str) -> Resident[T]:
        """Pin and return ``name``'s entry (``release`` it); see ``lease``.

        The load (and the evictions that make room for it) is a task the cache owns: requests
        await it shielded, so a request cancelled meanwhile leaves it running to its end and the
        accounting exact; the model it loads stays resident, unpinned."""
        size = self.sizes[name]
        while True:
            r = self._resident.get(name)
            if r is not None and r.ready:
                return self._pin(r)
            if size > self.budget_bytes:
                self.events.refused(name, "too_large")
                raise CacheRefusal(
                    name,
                    "too_large",
                    f"model {name!r} needs {size} bytes; the model cache holds {self.budget_bytes}",
                    None,
                )
            task = self._tasks.get(name)
            if task is None:
                task = asyncio.get_running_loop().create_task(self._make_resident(name, size))
                self._tasks[name] = task
                task.add_done_callback(self._task_done(name))
            self._waiting[name] = self._waiting.get(name, 0) + 1
            try:
                loaded = await asyncio.shield(task)
            finally:
                self._waiting[name] -= 1
                if not self._waiting[name]:
                    del self._waiting[name]
            if self._resident.get(name) is loaded and loaded.ready:
                return self._pin(loaded)
            # not the entry the load made (awaited, it is held against eviction): load it again

    def release(self, r: Resident[T]) -> None:
        """End one lease on ``r``."""
        r.pins -= 1
        self.events.changed(self)

    async def join(self) -> None:
        """Wait for the loads (and their evictions) in progress to end, whatever their outcome."""
        while self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    # -- inside --------------------------------------------------------------------------------

    def _task_done(self, name: str) -> Callable[[asyncio.Task[Resident[T]]], None]:
        def done(task: asyncio.Task[Resident[T]]) -> None:
            if self._tasks.get(name) is task:
                del self._tasks[name]
            if not task.cancelled():
                task.exception()  # retrieved: every waiter may have gone

        return done

    def _pin(self, r: Resident[T]) -> Resident[T]:
        r.pins += 1
        r.last_used = next(self._uses)
        r.priority = self._inflation + r.reload_cost_s / r.size
        self.events.changed(self)
        return r

    async def _make_resident(self, name: str, size: int) -> Resident[T]:
        """The cache's own task: evict what must go, then load ``name`` (loads one at a time)."""
        async with self._loads:
            r = self._resident.get(name)
            if r is not None and r.ready:
                return r
            victims = self._victims(name, size)
            for v in victims:  # out of reach at once, bytes counted until really unloaded
                del self._resident[v.name]
                self._unloading_bytes += v.size
            failed = [v for v in victims if not await self._evict(v)]
            if self.budget_bytes - self.resident_bytes < size:
                self.events.refused(name, "unload_failed")
                names = ", ".join(v.name for v in failed)
                raise CacheRefusal(
                    name,
                    "unload_failed",
                    f"model {name!r} needs {size} bytes; unloading {names} to make room failed; "
                    "retry shortly",
                    self.retry_after_s,
                )
            return await self._load_entry(name, size)

    def _victims(self, name: str, size: int) -> list[Resident[T]]:
        """The models to evict, cheapest (lowest priority) first, so ``size`` more bytes fit;
        ``CacheRefusal`` (``all_pinned``) when the unpinned ones do not free enough."""
        free = self.budget_bytes - self.resident_bytes
        if free >= size:
            return []
        candidates = sorted(
            (r for r in self._resident.values() if r.ready and not self._held(r)),
            key=lambda r: (r.priority, r.last_used),
        )
        chosen: list[Resident[T]] = []
        for r in candidates:
            if free >= size:
                break
            chosen.append(r)
            free += r.size
        if free < size:
            self.events.refused(name, "all_pinned")
            pinned = sorted(n for n, r in self._resident.items() if self._held(r) or not r.ready)
            raise CacheRefusal(
                name,
                "all_pinned",
                f"model {name!r} needs {size} bytes; the model cache ({self.budget_bytes} bytes) "
                f"is held by models serving requests ({', '.join(pinned)}); retry shortly",
                self.retry_after_s,
            )
        return chosen

    def _held(self, r: Resident[T]) -> bool:
        """Leased, or awaited by requests that will lease it as soon as they wake."""
        return r.pins > 0 or r.name in self._waiting

    async def _evict(self, v: Resident[T]) -> bool:
        """Unload ``v`` (already out of ``_resident``, its bytes in ``_unloading_bytes``): True
        when it is gone; False when the unload failed, and then it is resident again (still in
        memory as far as anyone knows), to be evicted again later. A cancelled unload (only
        ``close`` cancels the cache's tasks) keeps its bytes counted."""
        assert v.pins == 0, f"model {v.name!r} evicted with {v.pins} leases"
        assert v.value is not None
        try:
            await self._unload(v.name, v.value)
        except Exception:
            self._unloading_bytes -= v.size
            self._resident[v.name] = v
            self.events.changed(self)
            return False
        self._unloading_bytes -= v.size
        self._inflation = max(self._inflation, v.priority)
        self.events.evicted(v.name)
        self.events.changed(self)
        return True

    async def _load_entry(self, name: str, size: int) -> Resident[T]:
        r: Resident[T] = Resident(name, size)
        self._resident[name] = r
        start = self._clock()
        try:
            r.value = await self._load(name)
        except BaseException:
            del self._resident[name]
            self.events.changed(self)
            raise
        r.reload_cost_s = max(self._clock() - start, 0.0)
        r.priority = self._inflation + r.reload_cost_s / size
        r.last_used = next(self._uses)
        r.ready = True
        self.events.loaded(name, r.reload_cost_s)
        self.events.changed(self)
        return r


def retry_after_header(refusal: CacheRefusal) -> dict[str, str]:
    """``Retry-After`` for a refusal that retrying can cure, else no header."""
    if refusal.retry_after_s is None:
        return {}
    return {"Retry-After": str(max(1, math.ceil(refusal.retry_after_s)))}
