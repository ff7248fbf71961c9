"""The probe's numbers against a server that emits tokens at known instants."""

from __future__ import annotations

import asyncio

import pytest

from fleetwatch.engine_probe.probe.client import Prober, completion_body
from fleetwatch.engine_probe.probe.measure import RequestResult, apportion_tokens, itl_samples
from fleetwatch.engine_probe.probe.scripted_server import Script, ScriptedServer
from fleetwatch.engine_probe.probe.stats import SLOTargets, summarise

TOL = 0.03  # seconds: event-loop wake-up slack on a shared 2-core machine


def test_itl_per_token_splits_multi_token_chunks_and_sums_to_decode_time() -> None:
    times = [1.0, 1.3, 1.4, 2.0]
    tokens = [2, 3, 1, 4]
    gaps = itl_samples(times, tokens)
    assert len(gaps) == sum(tokens) - 1
    assert gaps == pytest.approx([0.0, 0.1, 0.1, 0.1, 0.1, 0.15, 0.15, 0.15, 0.15])
    assert sum(gaps) == pytest.approx(times[-1] - times[0])


def test_tpot_is_decode_time_over_tokens_after_the_first() -> None:
    r = RequestResult(
        index=0,
        request_id="r",
        scheduled_s=0.0,
        sent_s=0.5,
        first_token_s=1.0,
        finished_s=3.0,
        output_tokens=5,
    )
    assert r.ttft_s == pytest.approx(0.5)
    assert r.ttft_sched_s == pytest.approx(1.0)
    assert r.tpot_s == pytest.approx(0.5)
    assert r.send_lag_s == pytest.approx(0.5)


def test_apportion_gives_every_chunk_a_token_and_keeps_the_total() -> None:
    assert sum(apportion_tokens([3, 1, 7, 2], 29)) == 29
    assert min(apportion_tokens([3, 1, 7, 2], 29)) >= 1
    assert apportion_tokens([5, 5], 1) == [1, 0]


@pytest.mark.parametrize("send_token_ids", [True, False])
def test_ttft_itl_tpot_match_the_emitted_instants(send_token_ids: bool) -> None:
    script = Script(
        first_token_s=0.15,
        first_chunk_tokens=2,
        chunks=((0.05, 1), (0.12, 3), (0.04, 1), (0.09, 2)),
        send_token_ids=send_token_ids,
    )

    async def go() -> tuple[RequestResult, list[float], float]:
        server = ScriptedServer(script)
        url = await server.start()
        try:
            async with Prober(url) as p:
                r = await p.one(0, 0.0, completion_body("hello", 9))
        finally:
            await server.stop()
        return r, server.emitted[0], server.arrived[0]

    r, emitted, _arrived = asyncio.run(go())
    assert r.ok, r.error
    assert r.output_tokens == script.tokens  # from usage, not the 5 chunks
    assert r.tokens_from_usage
    assert list(r.chunk_tokens) == [2, 1, 3, 1, 2]
    assert r.first_token_s is not None
    assert r.first_token_s == pytest.approx(emitted[0], abs=TOL)
    assert r.ttft_s is not None and r.ttft_s >= 0.15 - 1e-3
    expected_itl = itl_samples(emitted, [2, 1, 3, 1, 2])
    assert r.itl_s() == pytest.approx(expected_itl, abs=TOL)
    expected_tpot = (r.finished_s - emitted[0]) / (script.tokens - 1)
    assert r.tpot_s == pytest.approx(expected_tpot, abs=TOL / 4)
    assert r.tpot_s == pytest.approx((emitted[-1] - emitted[0]) / 8, abs=TOL)


def test_schedule_based_latency_shows_a_stall_that_send_based_latency_hides() -> None:
    """A client with one connection slot: requests due during a stall are sent after it."""
    stall_s = 1.0
    script = Script(first_token_s=0.0, chunks=((0.0, 1),))

    async def go() -> list[RequestResult]:
        server = ScriptedServer(script)
        url = await server.start()
        try:
            async with Prober(url) as p:
                offsets = [i * 0.05 for i in range(30)]
                bodies = [completion_body("x", 2) for _ in offsets]
                stall = asyncio.create_task(_stall_later(server, 0.3, stall_s))
                results = await p.open_loop(offsets, bodies, max_concurrency=1)
                await stall
        finally:
            await server.stop()
        return results

    results = asyncio.run(go())
    assert all(r.ok for r in results)
    s = summarise(results, label="stall", mode="constant", rate=20.0, targets=SLOTargets(0.3, 0.1))
    # During the stall ~12 requests fall due; only the one in flight sees it from its send.
    assert s.ttft_sched.max >= stall_s * 0.7
    assert s.ttft_sched.p90 >= stall_s * 0.3
    assert s.ttft.p90 < stall_s * 0.3
    assert s.send_lag.max >= stall_s * 0.5  # the probe reports how late it sent
    slow_sched = sum(1 for r in results if (r.ttft_sched_s or 0) > 0.2)
    slow_sent = sum(1 for r in results if (r.ttft_s or 0) > 0.2)
    assert slow_sched >= 4 * max(1, slow_sent)
    assert s.attainment < 1.0


async def _stall_later(server: ScriptedServer, after_s: float, stall_s: float) -> None:
    await asyncio.sleep(after_s)
    await server.stall(stall_s)


def test_an_event_longer_than_the_client_line_limit_is_read_whole() -> None:
    """aiohttp's line reader stops at 64 KiB; the probe reads raw chunks and parses SSE itself."""
    script = Script(first_chunk_tokens=150_000, chunks=((0.0, 2),), send_token_ids=False)

    async def go() -> RequestResult:
        server = ScriptedServer(script)
        url = await server.start()
        try:
            async with Prober(url) as p:
                return await p.one(0, 0.0, completion_body("big", 150_002))
        finally:
            await server.stop()

    r = asyncio.run(go())
    assert r.ok, r.error
    assert r.output_tokens == 150_002
    assert list(r.chunk_tokens) == [150_000, 2]
