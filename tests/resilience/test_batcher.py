"""Micro-batcher: flush rules, bounded queue, failure isolation, cancellation safety, close."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from fleetwatch.resilience.batcher import (
    BatcherClosedError,
    BatcherConfig,
    BatcherError,
    BatcherFullError,
    BatcherMetrics,
    BatchResultError,
    FailureMode,
    ItemTooCostlyError,
    MicroBatcher,
)
from fleetwatch.resilience.errors import ResilienceConfigError

Run = Callable[[Coroutine[Any, Any, Any]], Any]


class Recorder:
    """A batch function that doubles numbers, fails on poison, and logs when and what it ran."""

    def __init__(self, poison: set[int] | None = None, delay_s: float = 0.0) -> None:
        self.poison = poison or set()
        self.delay_s = delay_s
        self.batches: list[tuple[float, list[int]]] = []

    async def __call__(self, items: list[int]) -> list[int]:
        self.batches.append((asyncio.get_running_loop().time(), list(items)))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        bad = self.poison.intersection(items)
        if bad:
            raise ValueError(f"poison {sorted(bad)}")
        return [2 * x for x in items]


def test_flushes_when_full_without_waiting(run_virtual: Run) -> None:
    async def main() -> None:
        fn = Recorder()
        batcher = MicroBatcher(fn, BatcherConfig(max_batch_size=4, max_wait_s=1000.0))
        results = await asyncio.gather(*(batcher.submit(i) for i in range(8)))
        assert results == [2 * i for i in range(8)]
        assert [(t, b) for t, b in fn.batches] == [(0.0, [0, 1, 2, 3]), (0.0, [4, 5, 6, 7])]
        await batcher.close()

    run_virtual(main())


def test_flushes_after_max_wait_from_the_first_item(run_virtual: Run) -> None:
    async def main() -> None:
        fn = Recorder()
        batcher = MicroBatcher(fn, BatcherConfig(max_batch_size=10, max_wait_s=0.010))

        async def later(item: int, delay: float) -> int:
            await asyncio.sleep(delay)
            return await batcher.submit(item)

        first = asyncio.ensure_future(later(1, 0.100))
        second = asyncio.ensure_future(later(2, 0.104))
        third = asyncio.ensure_future(later(3, 0.115))
        assert await asyncio.gather(first, second, third) == [2, 4, 6]
        (t1, b1), (t2, b2) = fn.batches
        assert b1 == [1, 2] and t1 == pytest.approx(0.110)
        assert b2 == [3] and t2 == pytest.approx(0.125)
        await batcher.close()

    run_virtual(main())


def test_cost_budget_splits_batches(run_virtual: Run) -> None:
    async def main() -> None:
        seen: list[list[str]] = []

        async def fn(items: list[str]) -> list[int]:
            seen.append(items)
            return [len(s) for s in items]

        batcher = MicroBatcher(
            fn, BatcherConfig(max_batch_size=10, max_wait_s=1.0, max_batch_cost=10), cost_fn=len
        )
        words = ["aaaa", "bbbb", "cccc", "dd"]
        assert await asyncio.gather(*(batcher.submit(w) for w in words)) == [4, 4, 4, 2]
        assert seen == [["aaaa", "bbbb"], ["cccc", "dd"]]
        with pytest.raises(ItemTooCostlyError, match="max_batch_cost"):
            await batcher.submit("x" * 11)
        await batcher.close()

    run_virtual(main())


def test_cost_function_error_fails_only_that_caller(run_virtual: Run) -> None:
    async def main() -> None:
        def cost(item: object) -> float:
            if not isinstance(item, str):
                raise TypeError("cost needs a string")
            return float(len(item))

        async def fn(items: list[object]) -> list[object]:
            return items

        batcher = MicroBatcher(fn, BatcherConfig(max_batch_cost=100), cost_fn=cost)
        results = await asyncio.gather(
            batcher.submit("ok"), batcher.submit(3), batcher.submit("fine"), return_exceptions=True
        )
        assert results[0] == "ok" and results[2] == "fine"
        assert isinstance(results[1], TypeError)
        assert await batcher.submit("still serving") == "still serving"
        await batcher.close()

    run_virtual(main())


def test_full_queue_rejects_at_once(run_virtual: Run) -> None:
    async def main() -> None:
        batcher = MicroBatcher(
            Recorder(), BatcherConfig(max_batch_size=10, max_wait_s=1.0, max_queue=3)
        )
        waiting = [asyncio.ensure_future(batcher.submit(i)) for i in range(3)]
        await asyncio.sleep(0)
        with pytest.raises(BatcherFullError, match="queue full"):
            await batcher.submit(99)
        assert await asyncio.gather(*waiting) == [0, 2, 4]
        await batcher.close()

    run_virtual(main())


def test_bisection_fails_only_the_poison_callers(run_virtual: Run) -> None:
    async def main() -> None:
        fn = Recorder(poison={5, 11})
        batcher = MicroBatcher(fn, BatcherConfig(max_batch_size=16, max_wait_s=1.0))
        results = await asyncio.gather(
            *(batcher.submit(i) for i in range(16)), return_exceptions=True
        )
        for i, r in enumerate(results):
            if i in (5, 11):
                assert isinstance(r, ValueError) and f"poison [{i}]" in str(r)
            else:
                assert r == 2 * i
        assert len(fn.batches) <= 1 + 2 * 2 * 4  # two poisons, depth log2(16)
        await batcher.close()

    run_virtual(main())


def test_fail_batch_mode_fails_everyone_in_the_batch(run_virtual: Run) -> None:
    async def main() -> None:
        fn = Recorder(poison={2})
        batcher = MicroBatcher(
            fn, BatcherConfig(max_batch_size=4, max_wait_s=1.0, failure_mode=FailureMode.FAIL_BATCH)
        )
        results = await asyncio.gather(
            *(batcher.submit(i) for i in range(8)), return_exceptions=True
        )
        assert all(isinstance(r, ValueError) for r in results[:4])
        assert results[4:] == [8, 10, 12, 14]
        assert len(fn.batches) == 2
        await batcher.close()

    run_virtual(main())


def test_wrong_number_of_results_is_an_error_for_the_callers(run_virtual: Run) -> None:
    async def main() -> None:
        async def fn(items: list[int]) -> list[int]:
            return items[:-1]

        batcher = MicroBatcher(fn, BatcherConfig(max_batch_size=2, max_wait_s=1.0))
        results = await asyncio.gather(batcher.submit(1), batcher.submit(2), return_exceptions=True)
        assert all(isinstance(r, BatchResultError) for r in results)
        await batcher.close()

    run_virtual(main())


def test_cancelled_caller_does_not_cancel_the_batch_or_others(run_virtual: Run) -> None:
    async def main() -> None:
        fn = Recorder(delay_s=0.5)
        batcher = MicroBatcher(fn, BatcherConfig(max_batch_size=4, max_wait_s=0.01))
        tasks = [asyncio.ensure_future(batcher.submit(i)) for i in range(6)]
        await asyncio.sleep(0)
        tasks[5].cancel()  # still queued
        await asyncio.sleep(0.1)  # first batch is running
        tasks[1].cancel()  # in flight
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert results[0] == 0 and results[2:5] == [4, 6, 8]
        assert isinstance(results[1], asyncio.CancelledError) and isinstance(
            results[5], asyncio.CancelledError
        )
        assert [b for _, b in fn.batches] == [[0, 1, 2, 3], [4]]
        await batcher.close()

    run_virtual(main())


def test_batch_function_cancelling_itself_does_not_stop_the_worker(run_virtual: Run) -> None:
    async def main() -> None:
        calls = 0

        async def fn(items: list[int]) -> list[int]:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise asyncio.CancelledError
            return items

        batcher = MicroBatcher(fn, BatcherConfig(max_batch_size=1, max_wait_s=0.0))
        with pytest.raises(BatcherError, match="cancelled"):
            await batcher.submit(1)
        assert await batcher.submit(2) == 2
        await batcher.close()

    run_virtual(main())


def test_close_drains_or_rejects(run_virtual: Run) -> None:
    async def main() -> None:
        batcher = MicroBatcher(Recorder(), BatcherConfig(max_batch_size=10, max_wait_s=5.0))
        queued = [asyncio.ensure_future(batcher.submit(i)) for i in range(3)]
        await asyncio.sleep(0)
        await batcher.close(drain=True)
        assert [t.result() for t in queued] == [0, 2, 4]
        with pytest.raises(BatcherClosedError):
            await batcher.submit(1)

        batcher = MicroBatcher(Recorder(), BatcherConfig(max_batch_size=10, max_wait_s=5.0))
        queued = [asyncio.ensure_future(batcher.submit(i)) for i in range(3)]
        await asyncio.sleep(0)
        await batcher.close(drain=False)
        results = await asyncio.gather(*queued, return_exceptions=True)
        assert all(isinstance(r, BatcherClosedError) for r in results)

    run_virtual(main())


def test_metrics(run_virtual: Run) -> None:
    async def main() -> CollectorRegistry:
        registry = CollectorRegistry()
        batcher = MicroBatcher(
            Recorder(poison={3}),
            BatcherConfig(max_batch_size=4, max_wait_s=0.02, max_queue=5),
            metrics=BatcherMetrics(registry),
            name="embed",
        )
        first = [asyncio.ensure_future(batcher.submit(i)) for i in range(5)]
        await asyncio.sleep(0)
        assert (
            registry.get_sample_value("fleetwatch_batcher_queue_depth", {"batcher": "embed"}) == 5.0
        )
        with pytest.raises(BatcherFullError):
            await batcher.submit(9)
        await asyncio.gather(*first, return_exceptions=True)
        await batcher.close()
        return registry

    registry = run_virtual(main())

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, {"batcher": "embed", **labels})

    assert value("fleetwatch_batcher_batch_size_count") == 2.0
    assert value("fleetwatch_batcher_batch_size_sum") == 5.0
    assert value("fleetwatch_batcher_fill_ratio_bucket", le="0.3") == 1.0  # the batch of 1
    assert value("fleetwatch_batcher_queue_wait_seconds_count") == 5.0
    assert value("fleetwatch_batcher_items_total", outcome="success") == 4.0
    assert value("fleetwatch_batcher_items_total", outcome="failure") == 1.0
    assert value("fleetwatch_batcher_rejected_total", reason="full") == 1.0
    assert value("fleetwatch_batcher_batch_failures_total") == 3.0  # 4 items, then 2, then 1


def test_storm_of_10000_with_cancellations_and_a_poison_item(run_virtual: Run) -> None:
    rng = random.Random(7)
    n, poison = 10_000, 4321

    async def main() -> None:
        fn = Recorder(poison={poison}, delay_s=0.002)
        batcher = MicroBatcher(fn, BatcherConfig(max_batch_size=64, max_wait_s=0.005, max_queue=n))

        async def caller(i: int, start: float) -> int:
            await asyncio.sleep(start)
            return await batcher.submit(i)

        tasks = [asyncio.ensure_future(caller(i, rng.uniform(0.0, 1.0))) for i in range(n)]
        doomed = rng.sample([i for i in range(n) if i != poison], 1500)

        async def canceller() -> None:
            for i in doomed:
                await asyncio.sleep(rng.uniform(0.0, 0.001))
                tasks[i].cancel()

        await asyncio.gather(canceller(), asyncio.gather(*tasks, return_exceptions=True))
        cancelled = 0
        for i, task in enumerate(tasks):
            assert task.done()
            if task.cancelled():
                assert i in doomed
                cancelled += 1
            elif i == poison:
                assert isinstance(task.exception(), ValueError)
            else:
                assert task.result() == 2 * i
        assert cancelled > 500  # the rest were cancelled after their result was set
        others = [
            t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()
        ]
        assert [t.get_name() for t in others] == ["micro-batcher default"]  # only the idle worker
        assert await batcher.submit(5) == 10  # still serving
        await batcher.close()
        assert all(t.done() for t in others)

    run_virtual(main())


def test_impossible_config_is_refused() -> None:
    with pytest.raises(ResilienceConfigError, match="max_batch_size"):
        BatcherConfig(max_batch_size=0)
    with pytest.raises(ResilienceConfigError, match="cost_fn"):
        MicroBatcher(Recorder(), BatcherConfig(max_batch_cost=10))
    with pytest.raises(ResilienceConfigError, match="spin_s"):
        BatcherConfig(spin_s=-0.001)


LONE_WAIT_S = 0.0005  # under the selector's millisecond


@pytest.mark.parametrize("tick_s", [0.0, 1e-6], ids=["clock-stands-still", "clock-moves"])
def test_a_lone_item_waits_max_wait_not_the_selectors_millisecond(
    run_virtual: Callable[..., Any], precise_wakers: Any, tick_s: float
) -> None:
    # the selector sleeps whole milliseconds; the waker wakes the loop spin_s before the deadline
    rng = random.Random(28)
    spin = BatcherConfig().spin_s

    async def main() -> None:
        loop = asyncio.get_running_loop()
        fn = Recorder()
        config = BatcherConfig(max_batch_size=8, max_wait_s=LONE_WAIT_S)
        batcher = MicroBatcher(fn, config, waker=precise_wakers)
        for i in range(40):
            await asyncio.sleep(rng.uniform(0.0, 0.003))
            start, armed = loop.time(), len(precise_wakers.arms)
            assert await batcher.submit(i) == 2 * i
            ran = fn.batches[-1][0]
            assert start + LONE_WAIT_S <= ran <= start + LONE_WAIT_S + tick_s  # never early
            arms = precise_wakers.arms[armed:]
            assert arms[0] == pytest.approx(start + LONE_WAIT_S - spin)
            assert all(when <= start + LONE_WAIT_S for when in arms)
        await batcher.close()

    run_virtual(main(), whole_ms=True, tick_s=tick_s)


def test_without_a_waker_a_lone_item_waits_the_selectors_millisecond(
    run_virtual: Callable[..., Any], precise_wakers: Any
) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        fn = Recorder()
        config = BatcherConfig(max_batch_size=8, max_wait_s=LONE_WAIT_S, spin_s=0.0)
        batcher = MicroBatcher(fn, config, waker=precise_wakers)
        await asyncio.sleep(0.1)
        start = loop.time()
        assert await batcher.submit(1) == 2
        assert fn.batches[0][0] >= start + 0.001  # the loop timer alone
        assert precise_wakers.arms == []  # spin_s=0 asks for no waker
        await batcher.close()

    run_virtual(main(), whole_ms=True, tick_s=1e-6)


def test_a_lone_item_is_never_flushed_before_max_wait_on_the_real_clock() -> None:
    # asyncio's own loop, with the default waker thread; latency is measured in bench_resilience
    async def main() -> None:
        loop = asyncio.get_running_loop()
        fn = Recorder()
        batcher = MicroBatcher(fn, BatcherConfig(max_batch_size=8, max_wait_s=LONE_WAIT_S))
        for i in range(20):
            start = loop.time()
            assert await batcher.submit(i) == 2 * i
            assert fn.batches[-1][0] >= start + LONE_WAIT_S
        await batcher.close()

    asyncio.run(main())


def test_without_spin_the_timer_alone_flushes_on_time(run_virtual: Run) -> None:
    async def main() -> None:
        fn = Recorder()
        batcher = MicroBatcher(fn, BatcherConfig(max_batch_size=10, max_wait_s=0.010, spin_s=0.0))
        await asyncio.sleep(0.1)
        assert await batcher.submit(1) == 2
        assert fn.batches == [(pytest.approx(0.110), [1])]
        await batcher.close()

    run_virtual(main())
