"""The byte-accounted model cache: never over budget, never evicting a model in use, evicting by
GreedyDual-Size, refusing what cannot fit."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from fleetwatch.engine_probe.serve.multi.cache import CacheRefusal, ModelCache, Resident
from fleetwatch.engine_probe.serve.multi.cache_metrics import CacheMetrics


class World:
    """What is really in memory, kept by the load and unload callbacks (not by the cache), and
    the leases the requests really hold: the ground truth the invariants are checked against.

    ``max_loads`` bounds the loads: a request makes the cache load its model at most once, so
    more loads than requests means loads undoing each other, which would otherwise spin forever."""

    def __init__(
        self,
        sizes: dict[str, int],
        budget: int,
        rng: random.Random,
        unload_fails: float = 0.0,
        max_loads: int | None = None,
    ) -> None:
        self.sizes = sizes
        self.max_loads = max_loads
        self.unload_fails = unload_fails
        self.failed_unloads = 0
        self.budget = budget
        self.rng = rng
        self.in_memory: dict[str, int] = {}
        self.held: dict[str, int] = dict.fromkeys(sizes, 0)
        self.loads: list[str] = []
        self.evictions: list[str] = []
        self.max_bytes = 0

    async def _yield(self, most: int) -> None:
        for _ in range(self.rng.randint(0, most)):
            await asyncio.sleep(0)

    async def load(self, name: str) -> str:
        assert name not in self.in_memory
        if self.max_loads is not None and len(self.loads) >= self.max_loads:
            raise AssertionError(f"more than {self.max_loads} loads: loads evicting each other")
        self.in_memory[name] = self.sizes[name]  # allocated before the load ends
        self.max_bytes = max(self.max_bytes, sum(self.in_memory.values()))
        assert self.max_bytes <= self.budget, "resident bytes over the budget"
        self.loads.append(name)
        await self._yield(6)
        return f"engine:{name}"

    async def unload(self, name: str, value: str) -> None:
        assert value == f"engine:{name}"
        assert self.held[name] == 0, f"{name} unloaded with {self.held[name]} requests in flight"
        await self._yield(3)
        if self.rng.random() < self.unload_fails:
            self.failed_unloads += 1
            raise RuntimeError(f"unloading {name} failed; still in memory")
        del self.in_memory[name]
        self.evictions.append(name)


async def _traffic(
    seed: int, n_models: int, n_requests: int, cancels: float = 0.0, unload_fails: float = 0.0
) -> tuple[World, dict[str, int]]:
    """``cancels``: the share of requests cancelled (a client gone) at a random point of their
    life: waiting for a load, during an eviction, while streaming."""
    rng = random.Random(seed)
    sizes = {f"m{i}": rng.randint(1, 60) for i in range(n_models)}
    budget = rng.randint(max(1, max(sizes.values()) // 2), sum(sizes.values()))
    world = World(sizes, budget, rng, unload_fails, max_loads=n_requests)
    cache = ModelCache(budget, sizes, world.load, world.unload, retry_after_s=1)
    outcomes = {"ok": 0, "too_large": 0, "all_pinned": 0, "unload_failed": 0, "cancelled": 0}

    async def request(name: str, hold: int) -> None:
        await world._yield(20)
        try:
            async with cache.lease(name) as engine:
                world.held[name] += 1
                try:
                    assert engine == f"engine:{name}" and name in world.in_memory
                    for _ in range(hold):  # a stream: tokens go out across many loop turns
                        await asyncio.sleep(0)
                        assert name in world.in_memory
                finally:
                    world.held[name] -= 1
            outcomes["ok"] += 1
        except CacheRefusal as exc:
            assert exc.reason in ("too_large", "all_pinned", "unload_failed")
            assert (exc.retry_after_s is None) == (exc.reason == "too_large")
            if exc.reason == "too_large":
                assert sizes[name] > budget
            outcomes[exc.reason] += 1
        assert cache.resident_bytes <= budget

    async def cancel_later(task: asyncio.Task[None], after: int) -> None:
        for _ in range(after):
            await asyncio.sleep(0)
        if task.cancel():
            outcomes["cancelled"] += 1

    names = list(sizes)
    weights = [rng.random() + 0.05 for _ in names]
    tasks = [
        asyncio.ensure_future(request(rng.choices(names, weights)[0], rng.randint(0, 30)))
        for _ in range(n_requests)
    ]
    killers = [cancel_later(t, rng.randint(0, 60)) for t in tasks if rng.random() < cancels]
    results = await asyncio.gather(*tasks, *killers, return_exceptions=True)
    await cache.join()  # loads outlive the requests cancelled while waiting for them
    failures = [
        r
        for r in results
        if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)
    ]
    if failures:
        raise failures[0]
    assert all(n == 0 for n in world.held.values())
    assert all(r.pins == 0 for r in map(cache.entry, names) if r is not None)
    assert sum(world.in_memory.values()) == cache.resident_bytes <= budget
    return world, outcomes


@pytest.mark.parametrize("seed", range(12))
def test_concurrent_requests_never_lose_a_model_in_use_nor_exceed_the_budget(seed: int) -> None:
    world, outcomes = asyncio.run(_traffic(seed, n_models=5, n_requests=120))
    assert outcomes["ok"] > 0
    assert world.max_bytes <= world.budget


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_models=st.integers(1, 6))
def test_invariants_hold_for_any_traffic(seed: int, n_models: int) -> None:
    world, _ = asyncio.run(_traffic(seed, n_models=n_models, n_requests=40))
    assert world.max_bytes <= world.budget


def test_traffic_that_once_had_loads_evicting_each_other_for_ever_is_served() -> None:
    # three models of which only one fits: each load was evicted by the next in line before its
    # waiting requests woke, so they loaded it again; the load bound turns that into a failure
    world, outcomes = asyncio.run(_traffic(4294967295, n_models=3, n_requests=40))
    assert outcomes["ok"] > 0
    assert len(world.loads) <= 40


def test_a_model_just_loaded_is_kept_for_the_requests_waiting_for_it() -> None:
    # a and b cannot both fit; b's load, next in line, runs before a's waiter wakes
    loads: list[str] = []

    async def load(name: str) -> str:
        if len(loads) == 4:
            raise AssertionError("loads evicting each other")
        loads.append(name)
        await asyncio.sleep(0)
        return name

    async def unload(name: str, value: str) -> None:
        return None

    async def go() -> tuple[object, object]:
        cache: ModelCache[str] = ModelCache(10, {"a": 6, "b": 6}, load, unload)
        first = asyncio.ensure_future(cache.acquire("a"))
        second = asyncio.ensure_future(cache.acquire("b"))
        return await asyncio.gather(first, second, return_exceptions=True)

    a, b = asyncio.run(go())
    assert isinstance(a, Resident) and (a.name, a.pins) == ("a", 1)
    assert isinstance(b, CacheRefusal) and b.reason == "all_pinned"
    assert "serving requests (a)" in b.message
    assert loads == ["a"]


@pytest.mark.parametrize("seed", range(12))
def test_cancelled_requests_and_failed_unloads_never_lose_a_model_nor_exceed_the_budget(
    seed: int,
) -> None:
    # ground truth from the callbacks: what is in memory never passes the budget, the cache's
    # count equals it at the end (no model forgotten while loaded), no model in use unloaded
    world, outcomes = asyncio.run(
        _traffic(seed, n_models=5, n_requests=120, cancels=0.4, unload_fails=0.2)
    )
    assert outcomes["cancelled"] > 0 and outcomes["ok"] > 0
    assert world.max_bytes <= world.budget


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_models=st.integers(1, 6))
def test_invariants_hold_under_any_cancellations(seed: int, n_models: int) -> None:
    world, _ = asyncio.run(
        _traffic(seed, n_models=n_models, n_requests=40, cancels=0.5, unload_fails=0.2)
    )
    assert world.max_bytes <= world.budget


def test_a_request_cancelled_during_a_load_leaves_one_build_running() -> None:
    builds: list[str] = []
    gate = asyncio.Event

    async def go() -> list[str]:
        release = gate()

        async def load(name: str) -> str:
            builds.append(name)
            await release.wait()  # a build in a thread: a cancelled waiter cannot stop it
            return name

        async def unload(name: str, value: str) -> None:
            return None

        cache: ModelCache[str] = ModelCache(10, {"a": 5}, load, unload)
        first = asyncio.ensure_future(cache.acquire("a"))
        await asyncio.sleep(0)
        first.cancel()
        second = asyncio.ensure_future(cache.acquire("a"))
        await asyncio.sleep(0)
        assert cache.resident_bytes == 5  # the build still running is counted
        release.set()
        r = await second
        assert r.pins == 1 and cache.resident_names() == ["a"]
        return builds

    assert asyncio.run(go()) == ["a"]


def _cache(
    sizes: dict[str, int], budget: int, costs: dict[str, float] | None = None
) -> tuple[ModelCache[str], list[str]]:
    """A cache whose loads take ``costs[name]`` seconds on a fake clock."""
    now = [0.0]
    evicted: list[str] = []

    async def load(name: str) -> str:
        now[0] += (costs or {}).get(name, 1.0)
        return name

    async def unload(name: str, value: str) -> None:
        evicted.append(name)

    return ModelCache(budget, sizes, load, unload, clock=lambda: now[0]), evicted


async def _use(cache: ModelCache[str], *names: str) -> None:
    for name in names:
        async with cache.lease(name):
            pass


def test_greedy_dual_size_evicts_what_is_cheapest_to_reload_per_byte() -> None:
    # b frees as many bytes as a but reloads in a tenth of the time: b goes
    cache, evicted = _cache({"a": 40, "b": 40, "c": 40}, 80, {"a": 10.0, "b": 1.0, "c": 1.0})
    asyncio.run(_use(cache, "a", "b", "c"))
    assert evicted == ["b"] and cache.resident_names() == ["a", "c"]


def test_greedy_dual_size_ages_a_costly_model_left_unused() -> None:
    # a is dear to reload, but after enough evictions of others the inflation passes it
    cache, evicted = _cache({"a": 10, "b": 10, "c": 10}, 20, {"a": 3.0, "b": 1.0, "c": 1.0})
    asyncio.run(_use(cache, "a", *["b", "c"] * 4))
    assert "a" in evicted
    assert evicted.index("a") > 0


def test_big_model_evicts_several_small_ones_lowest_priority_first() -> None:
    cache, evicted = _cache(
        {"s1": 10, "s2": 10, "s3": 10, "big": 20}, 30, {"s1": 1.0, "s2": 3.0, "s3": 2.0}
    )
    asyncio.run(_use(cache, "s1", "s2", "s3", "big"))
    assert evicted == ["s1", "s3"] and cache.resident_names() == ["big", "s2"]
    assert cache.resident_bytes == 30


def test_refusals_say_why_and_whether_to_retry() -> None:
    cache, _ = _cache({"a": 50, "b": 50, "huge": 101}, 100)
    registry = CollectorRegistry()
    cache.events = CacheMetrics(registry, "r0", ["a", "b", "c", "huge"], 100)

    async def go() -> tuple[CacheRefusal, CacheRefusal]:
        with pytest.raises(CacheRefusal) as big:
            await cache.acquire("huge")
        a = await cache.acquire("a")
        b = await cache.acquire("b")
        cache.sizes["c"] = 10  # a model added to the list: nothing unpinned to evict for it
        with pytest.raises(CacheRefusal) as pinned:
            await cache.acquire("c")
        cache.release(a)
        cache.release(b)
        return big.value, pinned.value

    big, pinned = asyncio.run(go())
    assert (big.reason, big.retry_after_s) == ("too_large", None)
    assert "needs 101 bytes" in big.message and "holds 100" in big.message
    assert (pinned.reason, pinned.retry_after_s) == ("all_pinned", 1)
    assert "a, b" in pinned.message

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"replica": "r0", **labels})

    assert value("fleetwatch_model_cache_refusals_total", model="huge", reason="too_large") == 1
    assert value("fleetwatch_model_cache_loads_total", model="a") == 1
    assert value("fleetwatch_model_cache_resident", model="b") == 1
    assert value("fleetwatch_model_cache_pinned_requests", model="b") == 0
    assert value("fleetwatch_model_cache_resident_bytes") == 100
    assert value("fleetwatch_model_cache_load_seconds_count", model="a") == 1


def test_a_failed_load_leaves_nothing_resident_and_a_later_request_retries() -> None:
    attempts: list[str] = []

    async def load(name: str) -> str:
        attempts.append(name)
        if len(attempts) == 1:
            raise RuntimeError("disk full")
        return name

    async def unload(name: str, value: str) -> None:
        return None

    cache: ModelCache[str] = ModelCache(10, {"a": 5}, load, unload)

    async def go() -> Any:
        with pytest.raises(RuntimeError):
            await cache.acquire("a")
        assert cache.resident_bytes == 0
        async with cache.lease("a") as v:
            return v

    assert asyncio.run(go()) == "a" and attempts == ["a", "a"]


def test_unknown_model_is_a_key_error() -> None:
    cache, _ = _cache({"a": 1}, 10)
    with pytest.raises(KeyError):
        asyncio.run(cache.acquire("nope"))
