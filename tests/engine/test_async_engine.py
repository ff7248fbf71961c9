"""The asyncio front streams per request, aborts on request and when the consumer leaves."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest

from fleetwatch.engine_probe.engine import AsyncEngine, EngineConfigError, RequestParams
from fleetwatch.engine_probe.engine.event_log import EventLog


class ThreadCheck(EventLog):
    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()

    def on_step(self, stats) -> None:  # type: ignore[no-untyped-def]
        self.threads.add(threading.get_ident())
        super().on_step(stats)


def test_concurrent_streams_match_offline_generation(make_engine, make_prompts) -> None:
    prompts = make_prompts(6, 3, 12, seed=8)
    expected = make_engine().generate(prompts, 9)
    log = ThreadCheck()
    engine = make_engine(observer=log)

    async def one(aengine: AsyncEngine, prompt: list[int]) -> list[int]:
        tokens: list[int] = []
        async for out in aengine.generate(prompt, max_tokens=9):
            tokens += out.new_token_ids
            if out.finished:
                assert out.status == "ok"
        return tokens

    async def main() -> list[list[int]]:
        async with AsyncEngine(engine) as aengine:
            return list(await asyncio.gather(*(one(aengine, p) for p in prompts)))

    assert asyncio.run(main()) == expected
    assert len(log.threads) == 1 and threading.get_ident() not in log.threads


def test_abort_and_early_exit_free_blocks(make_engine) -> None:
    engine = make_engine()

    async def main() -> None:
        async with AsyncEngine(engine) as aengine:
            stream = aengine.generate(
                [1, 2, 3], max_tokens=200, params=RequestParams(request_id="a")
            )
            first = await anext(stream)
            assert first.new_token_ids
            assert await aengine.abort("a")
            rest = [o async for o in stream]
            assert rest[-1].finished and rest[-1].status == "aborted"
            async with contextlib.aclosing(
                aengine.generate([4, 5, 6], max_tokens=200, params=RequestParams(request_id="b"))
            ) as early:
                async for _out in early:
                    break
            assert not await aengine.abort("zzz")  # processed after b's abort
            assert engine.scheduler.pool.num_used == 0
            assert engine.unfinished_request_ids() == []

    asyncio.run(main())


def test_bad_request_raises_in_the_caller(make_engine) -> None:
    async def main() -> None:
        async with AsyncEngine(make_engine()) as aengine:
            with pytest.raises(EngineConfigError, match="empty"):
                async for _ in aengine.generate([], max_tokens=3):
                    pass

    asyncio.run(main())


def test_stop_aborts_requests_in_flight(make_engine) -> None:
    engine = make_engine()

    async def main() -> None:
        aengine = AsyncEngine(engine)
        await aengine.start()
        stream = aengine.generate([1, 2], max_tokens=400)
        await anext(stream)
        await aengine.stop()
        rest = [o async for o in stream]
        assert rest and rest[-1].status == "aborted"

    asyncio.run(main())
    assert not engine.has_unfinished() and engine.scheduler.pool.num_used == 0
