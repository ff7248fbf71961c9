"""The probe watches its own load: loop lag and CPU, the client-bound verdict, receive instants
taken at the socket read, and levels spread over worker processes that merge to the union."""

from __future__ import annotations

import asyncio
import csv
import json
import threading
from pathlib import Path

import numpy as np
import pytest

from fleetwatch.engine_probe.probe.client import Prober, completion_body
from fleetwatch.engine_probe.probe.clientload import (
    CLIENT_BOUND,
    LagSampler,
    WorkerLoad,
    auto_workers,
    judge,
)
from fleetwatch.engine_probe.probe.measure import RequestResult
from fleetwatch.engine_probe.probe.report import render_table, run_to_dict, write_csv
from fleetwatch.engine_probe.probe.runner import LevelResult, ProbePlan, ProbeRun, run_plan
from fleetwatch.engine_probe.probe.rx import StampedBytes, StampingHandler
from fleetwatch.engine_probe.probe.scripted_server import Script, ScriptedServer
from fleetwatch.engine_probe.probe.stats import summarise
from fleetwatch.engine_probe.probe.workers import merge, split


def _request(i: int, gap_s: float, tokens: int = 5, start: float = 0.0) -> RequestResult:
    first = start + 0.05
    times = tuple(first + k * gap_s for k in range(tokens))
    return RequestResult(
        index=i,
        request_id=f"probe-{i}",
        scheduled_s=start,
        sent_s=start,
        finished_s=times[-1],
        first_token_s=first,
        chunk_times_s=times,
        chunk_tokens=(1,) * tokens,
        output_tokens=tokens,
    )


def _summary(results: list[RequestResult]):  # type: ignore[no-untyped-def]
    return summarise(results, label="t", mode="constant", rate=1.0)


class FakeTime:
    """A clock that only the sampler's sleep and the test move. The sleep first says the sampler
    thread is idle (its last tick handed over), then waits for the test to let it wake."""

    def __init__(self) -> None:
        self.now = 100.0
        self.idle = threading.Semaphore(0)
        self.wake = threading.Semaphore(0)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        target = self.now + seconds
        self.idle.release()
        assert self.wake.acquire(timeout=30)
        self.now = max(self.now, target)


def test_lag_sampler_records_how_late_the_loop_ran_each_tick() -> None:
    lags = [0.0, 0.002, 0.0005, 0.008, 0.03]
    fake = FakeTime()

    async def go() -> list[float]:
        sampler = LagSampler(0.01, clock=fake.clock, sleep=fake.sleep)
        sampler.start()
        assert fake.idle.acquire(timeout=30)
        for lag in lags:
            fake.wake.release()  # the tick is due: the thread hands the loop its callback ...
            assert fake.idle.acquire(timeout=30)
            fake.now += lag  # ... and the loop is busy this long before it gets to it
            for _ in range(3):
                await asyncio.sleep(0)
        stopping = asyncio.create_task(sampler.stop())
        await asyncio.sleep(0)  # stop() has begun: the thread's next wake ends it, posting nothing
        fake.wake.release()
        return await stopping

    assert asyncio.run(go()) == pytest.approx(lags)


def test_a_lagging_client_is_client_bound_and_an_idle_one_is_not() -> None:
    summary = _summary([_request(i, 0.02) for i in range(20)])  # ITL p50 = 20 ms
    idle = WorkerLoad(lag_samples=(0.0001,) * 99 + (0.0004,), cpu_s=0.1, wall_s=1.0)
    busy = WorkerLoad(lag_samples=(0.0001,) * 90 + (0.004,) * 10, cpu_s=0.97, wall_s=1.0)

    ok = judge([idle], summary)
    assert ok.verdict == "ok" and not ok.client_bound
    assert ok.reference == "itl_p50" and ok.reference_s == pytest.approx(0.02)
    assert ok.limit_s == pytest.approx(0.001)  # min(10 % of 20 ms, 1 ms)
    assert ok.cpu_fraction == pytest.approx((0.1,))

    # One lagging worker of two is enough: its streams' latencies are off.
    bound = judge([idle, busy], summary)
    assert bound.verdict == CLIENT_BOUND and bound.workers == 2
    assert bound.worst_lag_p99_s == pytest.approx(0.004)
    assert bound.lag.n == 200
    assert bound.cause == "own CPU" and ok.cause == ""

    # The fraction binds when the latencies are short: 10 % of a 4 ms ITL is 0.4 ms.
    fast = _summary([_request(i, 0.004) for i in range(20)])
    mild = WorkerLoad(lag_samples=(0.0006,) * 100, cpu_s=0.2, wall_s=1.0)
    assert judge([mild], fast).client_bound
    assert judge([mild], fast).cause == "CPU contention"  # 20 % of a core: waiting, not working
    assert judge([mild], summary).verdict == "ok"
    # ... and both are flags.
    assert judge([mild], fast, lag_fraction=0.5).verdict == "ok"
    assert judge([mild], summary, lag_limit_s=0.0005).client_bound


def test_auto_workers_follows_streams_and_cpus() -> None:
    assert auto_workers(10, cpus=8) == 1
    assert auto_workers(256, cpus=8) == 1
    assert auto_workers(1000, cpus=8) == 4
    assert auto_workers(1000, cpus=2) == 2
    assert auto_workers(100_000, cpus=16) == 16


def test_split_keeps_the_schedule_and_merge_is_the_union() -> None:
    rng = np.random.default_rng(3)
    n = 103
    offsets = np.cumsum(rng.exponential(0.01, n)).tolist()
    bodies = [completion_body(f"p{i}", 4) for i in range(n)]
    shares = split(bodies, 4, offsets_s=offsets, concurrency=10)
    assert [s.concurrency for s in shares] == [3, 3, 2, 2]
    seen = {}
    for s in shares:
        for i, off, body in zip(s.indices, s.offsets_s or (), s.bodies, strict=True):
            seen[i] = (off, body)
    assert seen == {i: (offsets[i], bodies[i]) for i in range(n)}
    assert len(split(bodies[:3], 8)) == 3  # never more shares than requests
    assert len(split(bodies, 8, concurrency=2)) == 2  # ... or closed-loop slots

    # Percentiles come from the merged samples, never from averaging per-worker percentiles.
    results = [_request(i, 0.01 + 0.001 * (i % 17), start=offsets[i]) for i in range(n)]
    parts = [[results[i] for i in s.indices] for s in shares]
    merged = merge(parts)
    assert merged == results
    whole, pieces = _summary(merged), [_summary(p) for p in parts]
    assert whole == _summary(results)
    assert whole.itl.n == sum(p.itl.n for p in pieces)


class FakeContent:
    def __init__(self) -> None:
        self.total_bytes = 0


def test_stamped_bytes_give_each_piece_the_instant_its_read_happened() -> None:
    content = FakeContent()
    content.total_bytes = 4  # came with the headers
    sink = StampedBytes(content, 1.0)  # type: ignore[arg-type]
    content.total_bytes = 10
    sink.note(2.0)
    sink.note(2.5)  # no new body bytes: nothing to stamp
    content.total_bytes = 15
    sink.note(3.0)
    # The reader wakes late (at 9.0) and gets all 15 bytes at once, then 3 more not yet noted.
    got = list(sink.split(b"aaaabbbbbbccccc", 9.0))
    assert got == [(1.0, b"aaaa"), (2.0, b"bbbbbb"), (3.0, b"ccccc")]
    assert list(sink.split(b"ddd", 9.5)) == [(9.5, b"ddd")]


def test_the_probe_stamps_reads_on_its_connections() -> None:
    async def go() -> tuple[bool, RequestResult]:
        server = ScriptedServer(Script(first_token_s=0.0, chunks=((0.01, 1),) * 3))
        url = await server.start()
        try:
            async with Prober(url) as p:
                r = await p.one(0, 0.0, completion_body("p", 4))
                assert p._session is not None
                conns = p._session.connector._conns  # type: ignore[union-attr]
                protos = [proto for keyed in conns.values() for proto, _ in keyed]
                return all(isinstance(x, StampingHandler) for x in protos) and bool(protos), r
        finally:
            await server.stop()

    stamped, r = asyncio.run(go())
    assert stamped
    assert r.ok and r.output_tokens == 4 and len(r.chunk_times_s) == 4
    assert list(r.chunk_times_s) == sorted(r.chunk_times_s)


def test_two_worker_processes_run_one_schedule_and_merge_every_sample(tmp_path: Path) -> None:
    n = 24
    script = Script(first_token_s=0.01, chunks=((0.01, 1),) * 4)
    plan = ProbePlan(
        mode="poisson",
        levels=(200.0,),
        requests=n,
        max_tokens=5,
        model="scripted",
        api="completions",
        seed=7,
        workers=2,
    )

    async def go() -> tuple[ProbeRun, ScriptedServer]:
        server = ScriptedServer(script)
        url = await server.start()
        try:
            return await run_plan(url, plan), server
        finally:
            await server.stop()

    run, server = asyncio.run(go())
    level = run.levels[0]
    assert level.client is not None and level.client.workers == 2
    assert len(level.client.cpu_s) == 2 and level.client.lag.n > 0
    assert [r.index for r in level.results] == list(range(n))
    assert all(r.ok and r.output_tokens == 5 for r in level.results)
    assert len(server.arrived) == n and sorted(server.prompts) == sorted(set(server.prompts))
    assert level.summary.itl.n == n * 4
    # The same schedule as one process: offsets from the shared start follow the seeded arrivals.
    from fleetwatch.engine_probe.probe.arrivals import gamma_arrivals
    from fleetwatch.engine_probe.probe.runner import make_prompts

    rng = np.random.default_rng(plan.seed)
    make_prompts(n, plan.prompt_tokens, rng)
    want = gamma_arrivals(200.0, n, rng=rng)
    start = level.results[0].scheduled_s
    assert [r.scheduled_s - start for r in level.results] == pytest.approx(want, abs=1e-9)

    # Reported beside the results, in every output.
    level_json = run_to_dict(run)["levels"][0]
    assert level_json["client"]["workers"] == 2
    assert level_json["client"]["verdict"] in ("ok", CLIENT_BOUND)
    assert "ttft" in level_json and "itl" in level_json  # the existing fields stay
    write_csv(tmp_path / "p.csv", run)
    row = next(csv.DictReader((tmp_path / "p.csv").open()))
    assert row["client_workers"] == "2" and row["ttft_p50"]


def test_client_bound_levels_are_marked_in_table_and_json() -> None:
    results = [_request(i, 0.02) for i in range(10)]
    summary = _summary(results)
    busy = judge([WorkerLoad((0.005,) * 50, 0.9, 1.0)], summary)
    calm = judge([WorkerLoad((0.0001,) * 50, 0.1, 1.0)], summary)
    plan = ProbePlan(mode="constant", levels=(1.0, 2.0), requests=10)
    run = ProbeRun(
        url="http://x",
        plan=plan,
        levels=(
            LevelResult(1.0, tuple(results), summary, calm),
            LevelResult(2.0, tuple(results), summary, busy),
        ),
        wall_offset_s=0.0,
    )
    levels = json.loads(json.dumps(run_to_dict(run)))["levels"]
    assert [lv["client"]["verdict"] for lv in levels] == ["ok", CLIENT_BOUND]
    from rich.console import Console

    console = Console(width=240, record=True)
    console.print(render_table(run))
    text = console.export_text()
    assert "client-bound (t: loop lag p99 5.00 ms > 1.00 ms, own CPU)" in text
    rows = [line for line in text.splitlines() if "10/10" in line]
    assert len(rows) == 2 and "*" not in rows[0] and "*" in rows[1]
