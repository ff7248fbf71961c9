"""The cold-start chain: phases timed on an injected clock, the startup span and phase gauges,
``/health`` (live) apart from ``/ready`` (warm), and the capacity planner reading the result."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest

from fleetwatch.engine_probe.engine import EngineConfig, LLMEngine
from fleetwatch.engine_probe.engine.startup import PHASES, StartupTimer, warm_up
from fleetwatch.engine_probe.serve import start_server
from fleetwatch.fleet.capacity.cold_start import cold_start_from, parse_cold_start
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.telemetry.startup import STARTUP_SECONDS

pytestmark = pytest.mark.timeout(120)


def _ticking(step: float = 1.0) -> Any:
    """A clock that moves ``step`` seconds each time it is read (thread-safe under the GIL)."""
    counter = itertools.count()
    lock = threading.Lock()

    def clock() -> float:
        with lock:
            return next(counter) * step

    return clock


def _engine(kit: Any, timer: StartupTimer) -> LLMEngine:
    from fleetwatch.engine_probe.engine import ModelConfig

    model = ModelConfig(
        num_layers=2,
        hidden_size=64,
        intermediate_size=128,
        num_heads=4,
        num_kv_heads=2,
        vocab_size=512,
        max_position_embeddings=4096,
    )
    return LLMEngine(model, EngineConfig(num_blocks=64, device="cpu"), startup=timer)


def test_phases_are_timed_in_order_on_the_injected_clock(kit: Any) -> None:
    timer = StartupTimer(clock=_ticking(), wall_clock=lambda: 1000.0)
    engine = _engine(kit, timer)
    warm_up(engine, timer)
    assert [p.name for p in timer.phases] == ["weights_load", "kv_cache_alloc", "warmup"]
    # the timer reads the clock at creation, at the first phase's start and at each phase's end
    assert timer.seconds() == {"weights_load": 1.0, "kv_cache_alloc": 1.0, "warmup": 1.0}
    assert timer.offset_s == 1000.0
    timer.since_process_start(process_start_epoch_s=990.0)
    assert timer.phases[0].name == "process_start"
    assert timer.phases[0].seconds == 10.0


def test_warm_up_is_not_traffic_and_the_engine_serves_after_it(kit: Any) -> None:
    engine = _engine(kit, StartupTimer())
    before = kit.make_engine().generate([[1, 2, 3]], max_tokens=5)
    warm_up(engine)
    assert engine.generate([[1, 2, 3]], max_tokens=5) == before
    assert not engine.has_unfinished()


def test_ready_is_503_while_warming_then_span_and_gauges_publish_the_chain(kit: Any) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    timer = StartupTimer(clock=_ticking(0.5))
    engine = _engine(kit, timer)
    release = threading.Event()
    generate = engine.generate

    def held_generate(*args: Any, **kwargs: Any) -> Any:
        assert release.wait(30)
        return generate(*args, **kwargs)

    engine.generate = held_generate  # type: ignore[method-assign]
    registry = CollectorRegistry()

    async def go() -> dict[str, Any]:
        got: dict[str, Any] = {}
        h = await start_server(engine, registry=registry, tracer_provider=provider, startup=timer)
        try:
            async with aiohttp.ClientSession() as s:
                async with s.get(f"{h.url}/health") as r:
                    got["health"] = r.status
                async with s.get(f"{h.url}/ready") as r:
                    got["ready_before"] = (r.status, await r.json())
                body = {"prompt": "hi", "max_tokens": 2}
                async with s.post(f"{h.url}/v1/completions", json=body) as r:
                    got["early"] = (r.status, r.headers.get("Retry-After"), await r.json())
                got["ready_gauge_before"] = registry.get_sample_value(
                    "fleetwatch_engine_ready", {"replica": engine.replica}
                )
                release.set()
                got["ok"] = await h.wait_ready()
                async with s.get(f"{h.url}/ready") as r:
                    got["ready_after"] = (r.status, await r.json())
                async with s.post(f"{h.url}/v1/completions", json=body) as r:
                    got["served"] = r.status
                h.instrumentation.flush()
                got["metrics"] = generate_latest(registry).decode()
        finally:
            await h.stop()
        return got

    got = asyncio.run(go())
    assert got["health"] == 200
    assert got["ready_before"] == (503, {"ready": False, "reason": "warming_up"})
    status, retry, err = got["early"]
    assert (status, retry, err["error"]["code"]) == (503, "1", "engine_not_ready")
    assert got["ready_gauge_before"] == 0.0
    assert got["ok"] and got["ready_after"] == (200, {"ready": True})
    assert got["served"] == 200

    names = [p.name for p in timer.phases]
    assert names == ["weights_load", "kv_cache_alloc", "server_start", "warmup", "readiness"]
    assert set(names) <= set(PHASES)
    for a, b in itertools.pairwise(timer.phases):  # in order, no overlaps
        assert a.end_s <= b.start_s
    for name, seconds in timer.seconds().items():
        labels = {"replica": engine.replica, "model": engine.model_name, "phase": name}
        assert registry.get_sample_value(STARTUP_SECONDS, labels) == seconds
    # the warm-up was not counted as a request; the one served request was
    finished = [
        ln
        for ln in got["metrics"].splitlines()
        if ln.startswith("fleetwatch_requests_total{") and 'status="ok"' in ln
    ]
    assert sum(float(ln.rsplit(" ", 1)[1]) for ln in finished) == 1.0

    spans = exporter.get_finished_spans()
    [root] = [s for s in spans if s.name == f"startup {engine.model_name}"]
    children = sorted(
        (s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id),
        key=lambda s: s.start_time or 0,
    )
    assert [c.name for c in children] == names
    assert root.start_time == children[0].start_time and root.end_time == children[-1].end_time
    assert root.attributes is not None
    # the span covers the wall time from first phase to last (a gap between phases included)
    wall = timer.phases[-1].end_s - timer.phases[0].start_s
    assert root.attributes["fleetwatch.startup_s"] == pytest.approx(wall)
    assert root.attributes["fleetwatch.replica"] == engine.replica


def test_each_of_several_replicas_started_in_turn_times_only_its_own_work(kit: Any) -> None:
    # a shared clock that moves only with work: 1 s at the end of each timed phase of a
    # replica's own (weights, KV cache, warm-up), and 100 s of other work on the loop right
    # after each server starts (the next replica's engine built before the warm-up task runs)
    now = [0.0]
    lock = threading.Lock()

    def work() -> None:
        with lock:
            now[0] += 1.0

    def clock() -> float:
        with lock:
            return now[0]

    async def go() -> list[StartupTimer]:
        timers, handles = [], []
        try:
            for _ in range(3):
                timer = StartupTimer(clock=clock, wall_clock=lambda: 1000.0, sync=work)
                engine = _engine(kit, timer)
                handles.append(await start_server(engine, startup=timer))
                timers.append(timer)
                with lock:
                    now[0] += 100.0  # another replica's build, on the loop
                assert await handles[-1].wait_ready()
        finally:
            await asyncio.gather(*(h.stop() for h in handles))
        return timers

    for timer in asyncio.run(go()):
        assert timer.seconds() == {
            "weights_load": 1.0,
            "kv_cache_alloc": 1.0,
            "server_start": 0.0,
            "warmup": 1.0,
            "readiness": 0.0,
        }


def test_ready_reports_draining_and_health_stays_live_without_a_startup(kit: Any) -> None:
    async def go() -> tuple[int, int]:
        h = await start_server(kit.make_engine())
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{h.url}/ready") as r:
                first = r.status
            h.server.door.draining = True
            async with s.get(f"{h.url}/ready") as r:
                assert (await r.json())["reason"] == "draining"
                second = r.status
            h.server.door.draining = False
        await h.stop()
        return first, second

    assert asyncio.run(go()) == (200, 503)


_EXPOSITION = """\
# HELP fleetwatch_engine_startup_seconds Seconds each phase of the last cold start took.
# TYPE fleetwatch_engine_startup_seconds gauge
fleetwatch_engine_startup_seconds{model="m",phase="weights_load",replica="r0"} 40.0
fleetwatch_engine_startup_seconds{model="m",phase="warmup",replica="r0"} 20.0
fleetwatch_engine_startup_seconds{model="m",phase="weights_load",replica="r1"} 50.0
fleetwatch_engine_startup_seconds{model="m",phase="warmup",replica="r1"} 25.5
# HELP other_metric x
# TYPE other_metric gauge
other_metric 7.0
"""


def test_planner_takes_the_slowest_measured_start() -> None:
    m = parse_cold_start(_EXPOSITION, "x.prom")
    assert m.seconds == 75.5
    assert m.labels == {"model": "m", "replica": "r1"}
    assert m.phases == {"weights_load": 50.0, "warmup": 25.5}
    assert m.starts == 2


def test_planner_refuses_a_source_without_the_metric(tmp_path: Path) -> None:
    f = tmp_path / "m.prom"
    f.write_text("other_metric 1\n")
    with pytest.raises(AnalysisError, match="no fleetwatch_engine_startup_seconds"):
        cold_start_from(str(f))
    with pytest.raises(AnalysisError, match="cannot read"):
        cold_start_from(str(tmp_path / "missing.prom"))


def _probe_doc() -> dict[str, Any]:
    """A small open-loop `fleetwatch probe run --json` document."""
    dist = {"n": 100, "mean": 0.1, "p50": 0.05, "p90": 0.08, "p99": 0.1, "p999": 0.1, "max": 0.1}
    return {
        "url": "http://x",
        "plan": {"mode": "open", "targets": {"ttft_s": 1, "tpot_s": 0.1}},
        "levels": [
            {
                "label": f"{load}/s",
                "mode": "open",
                "rate": load,
                "concurrency": None,
                "request_throughput": load * 0.98,
                "ttft": dist,
                "ttft_sched": {**dist, "p99": 0.1 * load},
                "tpot": {**dist, "p99": 0.02},
            }
            for load in (1, 2, 4, 8)
        ],
        "capacity": 8,
        "capacity_unit": "requests/s",
    }


def test_capacity_reads_the_cold_start_from_a_served_engines_metrics(
    kit: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fleetwatch.cli import main

    timer = StartupTimer()
    engine = _engine(kit, timer)

    async def scrape() -> str:
        h = await start_server(engine, startup=timer)
        try:
            await h.wait_ready()
            async with aiohttp.ClientSession() as s, s.get(f"{h.url}/metrics") as r:
                return await r.text()
        finally:
            await h.stop()

    saved = tmp_path / "replica.prom"
    saved.write_text(asyncio.run(scrape()))
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps(_probe_doc()))
    argv = ["fleet", "capacity", str(probe), "--cold-start-from", str(saved), "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["cold_start"]["seconds"] == pytest.approx(timer.total_s)
    assert doc["plan"]["inputs"]["cold_start_s"] == pytest.approx(timer.total_s)
    assert main(["fleet", "capacity", str(probe), "--cold-start-from", str(probe)]) == 2
    assert str(probe) in capsys.readouterr().err
