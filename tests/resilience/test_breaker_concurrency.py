"""Under contention a HALF_OPEN breaker admits exactly ``half_open_calls`` probes, from threads or tasks."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator

import pytest

from fleetwatch.resilience.breaker import (
    BreakerConfig,
    CallNotPermittedError,
    CircuitBreaker,
    State,
)

PROBES = 5
WORKERS = 64


@pytest.fixture
def fast_switching() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def half_open_breaker() -> CircuitBreaker:
    breaker = CircuitBreaker(
        "probe", BreakerConfig(window_size=10, minimum_calls=10, half_open_calls=PROBES)
    )
    breaker.transition_to(State.HALF_OPEN)
    return breaker


@pytest.mark.parametrize("round_", range(10))
def test_64_threads_get_exactly_n_probes(round_: int, fast_switching: None) -> None:
    breaker = half_open_breaker()
    start = threading.Barrier(WORKERS, timeout=30)
    all_tried = threading.Event()
    tried = 0
    counted = threading.Lock()
    admitted: list[int] = []
    refused: list[int] = []

    def probe() -> None:
        all_tried.wait(timeout=30)  # hold every admitted probe until everyone has tried

    def worker(i: int) -> None:
        nonlocal tried
        start.wait()
        try:
            breaker.call(probe)
            admitted.append(i)
        except CallNotPermittedError:
            refused.append(i)
            with counted:
                tried += 1
                if tried == WORKERS - PROBES:
                    all_tried.set()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(admitted) == PROBES
    assert len(refused) == WORKERS - PROBES
    assert breaker.state is State.CLOSED  # all five probes succeeded


def test_64_tasks_get_exactly_n_probes() -> None:
    async def main() -> None:
        breaker = half_open_breaker()
        release = asyncio.Event()

        async def probe() -> str:
            await release.wait()
            return "ok"

        tasks = [asyncio.ensure_future(breaker.call_async(probe)) for _ in range(WORKERS)]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert breaker.state is State.HALF_OPEN
        release.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert results.count("ok") == PROBES
        assert sum(isinstance(r, CallNotPermittedError) for r in results) == WORKERS - PROBES
        assert breaker.state is State.CLOSED

    asyncio.run(main())


def test_cancelled_probe_frees_its_slot() -> None:
    async def main() -> None:
        breaker = half_open_breaker()
        never = asyncio.Event()

        async def hang() -> None:
            await never.wait()

        hung = [asyncio.ensure_future(breaker.call_async(hang)) for _ in range(PROBES)]
        await asyncio.sleep(0)
        assert breaker.try_acquire() is None
        hung[0].cancel()
        await asyncio.gather(*hung[:1], return_exceptions=True)
        assert breaker.try_acquire() is not None  # the cancelled probe's permit came back
        for task in hung[1:]:
            task.cancel()
        await asyncio.gather(*hung, return_exceptions=True)

    asyncio.run(main())


def test_64_threads_racing_the_end_of_the_open_wait_get_exactly_n_probes(
    fast_switching: None,
) -> None:
    now = [0.0]
    breaker = CircuitBreaker(
        "probe",
        BreakerConfig(window_size=4, minimum_calls=4, wait_in_open_s=30.0, half_open_calls=PROBES),
        clock=lambda: now[0],
    )
    for _ in range(4):
        breaker.record_error(breaker.acquire(), 0.1, RuntimeError())
    assert breaker.state is State.OPEN
    now[0] = 30.0
    start = threading.Barrier(WORKERS, timeout=30)
    permits: list[int | None] = [None] * WORKERS

    def worker(i: int) -> None:
        start.wait()
        permits[i] = breaker.try_acquire()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    granted = [p for p in permits if p is not None]
    assert len(granted) == PROBES
    assert len(set(granted)) == 1  # all from the one HALF_OPEN epoch: a single transition
    assert breaker.state is State.HALF_OPEN
