"""Telemetry overhead: instrumented vs bare engine on the same workload, interleaved in one run.

Three arms per batch size on ONE engine, run round-robin in alternating order so machine noise
hits them alike:

- ``bare``: no observer attached;
- ``off``: telemetry paused (``Instrumentation.pause``): again no observer, the engine's single
  ``is None`` check; ``off``/``bare`` is the noise floor of this machine;
- ``on``: metrics + spans (bounded processor, in-memory exporter) + records (rotating JSONL).

A round is one workload (``batch`` requests decoded together). Reported: median step wall time
and step-thread CPU time, ratios to bare, the extra CPU per generated token in µs. A second table
replays a recorded event trace straight into the observer and the span/record builders (no
engine, no noise) to give the exact cost as a share of the measured step.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest

from engine_probe.engine import EngineConfig, LLMEngine, ModelConfig
from telemetry.instrument import Instrumentation, RequestState, TelemetryObserver, instrument
from telemetry.instrument.api import to_record
from telemetry.metrics import ServingMetrics
from telemetry.records import RequestRecord
from telemetry.sink import MemoryRecordSink, RotatingRecordSink
from telemetry.spans import BoundedSpanProcessor, SpanBuilder

BATCHES = (1, 8, 32, 64)
PROMPT = 32
MAX_TOKENS = 64
ROUNDS = 6
ARMS = ("bare", "off", "on")


def _engine(batch: int) -> LLMEngine:
    blocks = max(64, batch * ((PROMPT + MAX_TOKENS) // 16 + 2) + 16)
    return LLMEngine(
        ModelConfig(),
        EngineConfig(num_blocks=blocks, block_size=16, max_num_seqs=max(batch, 1), num_threads=1,
                     max_num_batched_tokens=max(2048, batch * PROMPT)),
    )  # fmt: skip


def _instrument(engine: LLMEngine, tmp: str) -> tuple[Instrumentation, TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(BoundedSpanProcessor(InMemorySpanExporter()))
    inst = instrument(
        engine,
        tracer_provider=provider,
        registry=CollectorRegistry(),
        record_sink=RotatingRecordSink(tmp, max_records=10_000),
        goodput=(1.0, 0.1),
    )
    return inst, provider


def _round(
    engine: LLMEngine, prompts: Sequence[Sequence[int]], after: Callable[[], Any]
) -> tuple[list[tuple[float, float]], float]:
    """Run one workload; per step (wall s, this thread's CPU s), and the round's wall time."""
    steps: list[tuple[float, float]] = []
    t0 = time.perf_counter()
    for p in prompts:
        engine.add_request(p, max_tokens=MAX_TOKENS)
    while engine.has_unfinished():
        c0 = time.thread_time()
        s0 = time.perf_counter()
        engine.step()
        steps.append((time.perf_counter() - s0, time.thread_time() - c0))
    after()
    return steps, time.perf_counter() - t0


def engine_table() -> list[dict[str, float]]:
    """One engine per batch size; arms differ only in whether the observer is attached.

    ``bare`` and ``off`` are the same code path (no observer): their ratio is the noise floor.
    """
    rng = random.Random(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for batch in BATCHES:
            engine = _engine(batch)
            inst, provider = _instrument(engine, tmp)
            inst.pause()
            step_t: dict[str, list[float]] = {k: [] for k in ARMS}
            cpu_t: dict[str, list[float]] = {k: [] for k in ARMS}
            for r in range(ROUNDS + 1):
                prompts = [[rng.randrange(1, 2000) for _ in range(PROMPT)] for _ in range(batch)]
                for name in ARMS if r % 2 == 0 else tuple(reversed(ARMS)):
                    if name == "on":
                        inst.resume()
                    steps, _ = _round(engine, prompts, lambda: None)
                    inst.pause()
                    if r > 0:  # round 0 warms up
                        step_t[name].extend(w for w, _ in steps)
                        cpu_t[name].extend(c for _, c in steps)
            inst.flush()
            assert inst.drops.total == 0
            inst.detach()
            provider.shutdown()
            med = {k: statistics.median(v) for k, v in step_t.items()}
            cpu = {k: statistics.median(v) for k, v in cpu_t.items()}
            rows.append({
                "batch": batch,
                "bare_step_ms": med["bare"] * 1e3,
                "off_ratio": med["off"] / med["bare"],
                "on_ratio": med["on"] / med["bare"],
                "cpu_off_ratio": cpu["off"] / cpu["bare"],
                "cpu_on_ratio": cpu["on"] / cpu["bare"],
                "us_per_token": (cpu["on"] - cpu["bare"]) / batch * 1e6,
            })  # fmt: skip
    return rows


class _Recorder:
    """Records the engine's observer calls so they can be replayed without the engine."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Callable[..., None]:
        def record(*args: Any) -> None:
            self.calls.append((name, args))

        return record


def replay_table(batch: int, repeats: int = 5) -> dict[str, float]:
    """Replay one recorded run's events: hot-path cost, then span+record building per request."""
    engine = _engine(batch)
    rec = _Recorder()
    engine.attach(rec)
    rng = random.Random(1)
    prompts = [[rng.randrange(1, 2000) for _ in range(PROMPT)] for _ in range(batch)]
    steps, _ = _round(engine, prompts, lambda: None)
    step_s = statistics.median(s for s, _ in steps)
    n_tokens = sum(len(a[1]) for n, a in rec.calls if n == "on_tokens") + batch
    n_steps = sum(1 for n, _ in rec.calls if n == "on_step")
    best_obs = best_build = best_scrape = float("inf")
    for _ in range(repeats):
        finished: list[RequestState] = []
        metrics = ServingMetrics("reference", "bench")
        obs = TelemetryObserver(metrics, finished.append, goodput=(1.0, 0.1))
        t0 = time.perf_counter()
        for name, args in rec.calls:
            getattr(obs, name)(*args)
        best_obs = min(best_obs, time.perf_counter() - t0)
        reg = CollectorRegistry()
        reg.register(metrics)
        t0 = time.perf_counter()
        generate_latest(reg)
        best_scrape = min(best_scrape, time.perf_counter() - t0)
        provider = TracerProvider()
        provider.add_span_processor(BoundedSpanProcessor(InMemorySpanExporter()))
        builder = SpanBuilder(
            provider.get_tracer("bench"), model="reference", replica="bench", offset_s=0.0
        )
        sink = MemoryRecordSink()
        t0 = time.perf_counter()
        for st in finished:
            builder.emit(st)
        sink.write([to_record(st, "reference", "bench") for st in finished])
        best_build = min(best_build, time.perf_counter() - t0)
        provider.shutdown()
    per_req = best_build / batch
    build_share = best_build / n_steps / step_s
    return {
        "batch": batch,
        "step_ms": step_s * 1e3,
        "observer_us_per_token": best_obs / n_tokens * 1e6,
        "observer_share": best_obs / n_steps / step_s,
        "build_us_per_request": per_req * 1e6,
        "build_share": build_share,
        "total_share": (best_obs + best_build) / n_steps / step_s,
        "total_us_per_token": (best_obs + best_build) / n_tokens * 1e6,
        "scrape_ms": best_scrape * 1e3,
    }


def record_file_cost(n: int = 10_000) -> float:
    """Seconds per record to write one rotated JSONL file of ``n`` records (atomic, fsync)."""
    finished = [
        RequestRecord(request_id=f"r{i}", replica="bench", model="reference", arrival_s=float(i),
                      scheduled_s=i + 0.01, first_token_s=i + 0.1, finished_s=i + 1.0,
                      prompt_tokens=PROMPT, output_tokens=MAX_TOKENS)
        for i in range(n)
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        sink = RotatingRecordSink(tmp, max_records=n)
        t0 = time.perf_counter()
        sink.write(finished)
        return (time.perf_counter() - t0) / n


class _Holder:
    replica = "bench"
    model_name = "reference"

    def __init__(self) -> None:
        self.observer: Any = None

    def attach(self, observer: Any) -> Callable[[], None]:
        self.observer = observer
        return lambda: None


def main() -> None:
    print(f"workload: B requests decoded together, {PROMPT}-token prompts, {MAX_TOKENS} output "
          f"tokens each; {ROUNDS} measured rounds per arm, interleaved; default ModelConfig, "
          "CPU, torch 1 thread")  # fmt: skip
    print()
    print("Engine steps, median per step (wall and step-thread CPU), ratios to bare:")
    print()
    print("| batch | bare step (ms) | off/bare wall | on/bare wall | off/bare CPU | on/bare CPU "
          "| on−bare CPU per token (µs) |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in engine_table():
        print(f"| {r['batch']} | {r['bare_step_ms']:.2f} | {r['off_ratio']:.3f} | "
              f"{r['on_ratio']:.3f} | {r['cpu_off_ratio']:.3f} | {r['cpu_on_ratio']:.3f} | "
              f"{r['us_per_token']:+.1f} |")  # fmt: skip
    print()
    print("Exact cost: one recorded run's events replayed (no engine), best of 5, against that "
          "run's median step:")  # fmt: skip
    print()
    print("| batch | step (ms) | hot path µs/token | hot path % of step "
          "| spans+record µs/request | spans+record % of step | total % of step "
          "| total µs/token | scrape (ms) |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for b in BATCHES:
        x = replay_table(b)
        print(f"| {b} | {x['step_ms']:.2f} | {x['observer_us_per_token']:.2f} | "
              f"{x['observer_share']:.3%} | {x['build_us_per_request']:.0f} | "
              f"{x['build_share']:.3%} | {x['total_share']:.3%} | "
              f"{x['total_us_per_token']:.2f} | {x['scrape_ms']:.2f} |")  # fmt: skip
    print()
    print(
        f"Record files: {record_file_cost() * 1e6:.1f} µs per record to write a rotated "
        "10,000-record JSONL file (background thread, atomic rename)."
    )


if __name__ == "__main__":
    main()
