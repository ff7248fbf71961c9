"""Telemetry's cost told whole: the reference engine running, instrumented against bare.

Four arms per batch size: ``bare`` and ``bare2`` (no observer attached), ``on`` and ``on2`` (the
telemetry observer attached: Prometheus metrics, OpenTelemetry spans exported over OTLP/HTTP to a
collector in another process, request records to rotating JSONL files, goodput counter).
``bare2/bare`` and ``on2/on`` are A/A controls: identical code, so their spread is this run's
noise floor, printed beside every ratio. Every arm gets the same seeded prompts and must produce
the same tokens (asserted).

- Lockstep (``lockstep_table``): four identical engines stepped in turn, the order rotating every
  step. Step loop = the step-loop thread's CPU (and wall) inside ``add_request`` and
  ``engine.step``, observer callbacks included. All telemetry CPU = step loop + the histogram
  binning a scrape does + the CPU of the background threads each ``instrument`` call started
  (per-thread clocks), running at their own pace.
- Whole process (``process_table``): one engine, the arms one after another; the process's CPU
  (``time.process_time``, every thread) until ``Instrumentation.flush`` handed everything over.

Ratios are per round (arms of one round side by side), reported as the median over rounds.
"""

from __future__ import annotations

import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from benchmarks.machine import cpu, load
from benchmarks.telemetry_hooks import hook_table
from fleetwatch.engine_probe.engine import EngineConfig, LLMEngine, ModelConfig
from fleetwatch.telemetry.instrument import Instrumentation, instrument
from fleetwatch.telemetry.sink import RotatingRecordSink

BATCHES = (8, 32)
PROMPT = 32
MAX_TOKENS = 64
ROUNDS = 8
PROCESS_ROUNDS = 24
"""Rounds of the whole-process table: a round's process CPU moves ±5 % between identical arms on
this 2-core host (measured: per-round on/bare 0.92–1.10, A/A 1.03–1.04 over 8 rounds), so 8
rounds cannot resolve 1.03; the lockstep table's all-threads ratio is the sharper measure."""
REQUESTS = 32
ARMS = ("bare", "bare2", "on", "on2")
GOAL_PROCESS = 1.03
GOAL_STEP = 1.01

_COLLECTOR = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a collector does
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


@contextmanager
def otlp_collector() -> Iterator[str]:
    """A minimal OTLP/HTTP receiver in its own process (its CPU is not ours); yields its URL."""
    proc = subprocess.Popen([sys.executable, "-c", _COLLECTOR], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def _engine(batch: int) -> LLMEngine:
    blocks = max(64, batch * ((PROMPT + MAX_TOKENS) // 16 + 2) + 16)
    return LLMEngine(
        ModelConfig(),
        EngineConfig(num_blocks=blocks, block_size=16, max_num_seqs=max(batch, 1), num_threads=1,
                     max_num_batched_tokens=max(2048, batch * PROMPT)),
    )  # fmt: skip


def _instrument(engine: LLMEngine, tmp: str, endpoint: str) -> Instrumentation:
    return instrument(
        engine,
        env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint},
        registry=CollectorRegistry(),
        record_sink=RotatingRecordSink(tmp, max_records=10_000),
        goodput=(1.0, 0.1),
    )


def _cpu_of(threads: Sequence[threading.Thread]) -> float:
    """CPU seconds the given threads have used so far (per-thread clocks)."""
    total = 0.0
    for t in threads:
        if t.ident is not None and t.is_alive():
            total += time.clock_gettime(time.pthread_getcpuclockid(t.ident))
    return total


def _instrumented(engine: LLMEngine, tmp: str, endpoint: str) -> tuple[Instrumentation, list[Any]]:
    """Instrument ``engine``; also return the background threads that instrumenting started."""
    before = set(threading.enumerate())
    inst = _instrument(engine, tmp, endpoint)
    return inst, [t for t in threading.enumerate() if t not in before]


def _prompts(rng: random.Random, batch: int) -> list[list[int]]:
    return [[rng.randrange(1, 2000) for _ in range(PROMPT)] for _ in range(batch)]


def _timed(cost: dict[str, float], fn: Callable[[], Any]) -> Any:
    """Call ``fn`` on the step loop; add its CPU and wall time to ``cost``."""
    c0, w0 = time.thread_time(), time.perf_counter()
    out = fn()
    cost["crit_cpu"] += time.thread_time() - c0
    cost["crit_wall"] += time.perf_counter() - w0
    return out


def _add_all(engine: LLMEngine, prompts: Sequence[Sequence[int]]) -> list[str]:
    return [engine.add_request(p, max_tokens=MAX_TOKENS) for p in prompts]


def _ratios(per: dict[str, list[dict[str, float]]], key: str) -> tuple[float, float, float]:
    """Median over rounds of on/bare, bare2/bare and on2/on for ``key``."""

    def r(a: str, b: str) -> float:
        return _median([x[key] / y[key] for x, y in zip(per[a], per[b], strict=True)])

    return r("on", "bare"), r("bare2", "bare"), r("on2", "on")


def lockstep_table(batch: int, endpoint: str, rounds: int = ROUNDS) -> dict[str, Any]:
    """Four identical engines, each instrumented, stepped in turn (order rotating every step).
    Each round the arms move one engine on (arm i runs on engine (i + round) mod 4; its
    instrumentation resumed for an ``on`` arm, paused for a ``bare`` one), so an engine's own
    speed (where its tensors landed in memory) cancels out. Per arm and round: the step loop
    (``add_request`` + ``step``, this thread's CPU and wall), the hand-over at the round's end
    (``Instrumentation.flush`` on this thread: binning, the last record file) and the CPU of the
    instrumentation's background threads (span building, export, records)."""
    rng = random.Random(batch)
    engines = [_engine(batch) for _ in ARMS]
    with tempfile.TemporaryDirectory() as tmp:
        insts = []
        for j, eng in enumerate(engines):
            os.mkdir(os.path.join(tmp, str(j)))
            inst, threads = _instrumented(eng, os.path.join(tmp, str(j)), endpoint)
            inst.pause()
            insts.append((inst, threads))
        per: dict[str, list[dict[str, float]]] = {a: [] for a in ARMS}
        for r in range(rounds + 1):
            role = {a: (i + r) % len(ARMS) for i, a in enumerate(ARMS)}
            for a, j in role.items():
                if a.startswith("on"):
                    insts[j][0].resume()
            cost = {a: dict.fromkeys(("crit_cpu", "crit_wall", "flush", "bg"), 0.0) for a in ARMS}
            tokens: dict[str, dict[str, list[int]]] = {a: {} for a in ARMS}
            ids: dict[str, list[str]] = {a: [] for a in ARMS}
            bg0 = [_cpu_of(th) for _, th in insts]
            for _ in range(max(1, REQUESTS // batch)):
                prompts = _prompts(rng, batch)
                for a in ARMS:
                    ids[a] += _timed(cost[a], partial(_add_all, engines[role[a]], prompts))
                k = 0
                while any(e.has_unfinished() for e in engines):
                    k += 1
                    order = ARMS[k % 4 :] + ARMS[: k % 4]
                    for a in order if k % 8 < 4 else tuple(reversed(order)):
                        eng = engines[role[a]]
                        if eng.has_unfinished():
                            for o in _timed(cost[a], eng.step):
                                tokens[a].setdefault(o.request_id, []).extend(o.new_token_ids)
            for a, j in role.items():
                if a.startswith("on"):
                    inst, threads = insts[j]
                    c0 = time.thread_time()
                    assert inst.flush(), "telemetry did not hand over in time"
                    cost[a]["flush"] = time.thread_time() - c0
                    cost[a]["bg"] = _cpu_of(threads) - bg0[j]
                    inst.pause()
            answers = {a: [tuple(tokens[a][i]) for i in ids[a]] for a in ARMS}
            assert all(v == answers["bare"] for v in answers.values()), "tokens differ from bare"
            if r > 0:  # round 0 warms up
                for a in ARMS:
                    c = cost[a]
                    c["whole"] = c["crit_cpu"] + c["flush"] + c["bg"]
                    c["tokens"] = float(sum(len(v) for v in answers[a]))
                    c["requests"] = float(len(answers[a]))
                    per[a].append(c)
        for inst, _ in insts:
            assert inst.drops.total == 0, f"telemetry dropped {inst.drops.snapshot()}"
            inst.detach()
    on, bare = per["on"], per["bare"]
    return {
        "batch": batch,
        "round_ms": _median([x["crit_cpu"] for x in bare]) * 1e3,
        "step": _ratios(per, "crit_cpu"),
        "wall": _ratios(per, "crit_wall"),
        "whole": _ratios(per, "whole"),
        "step_us_req": _median([(x["crit_cpu"] - y["crit_cpu"]) / x["requests"]
                                for x, y in zip(on, bare, strict=True)]) * 1e6,
        "flush_us_req": _median([x["flush"] / x["requests"] for x in on]) * 1e6,
        "bg_us_req": _median([x["bg"] / x["requests"] for x in on]) * 1e6,
        "bg_us_tok": _median([x["bg"] / x["tokens"] for x in on]) * 1e6,
    }  # fmt: skip


def _round(
    engine: LLMEngine, workloads: Sequence[Sequence[Sequence[int]]], settle: Callable[[], object]
) -> tuple[float, list[tuple[int, ...]]]:
    """Workloads one after another; the whole process's CPU seconds until ``settle`` returned,
    and the tokens of every request in order."""
    tokens: dict[str, list[int]] = {}
    ids: list[str] = []
    p0 = time.process_time()
    for prompts in workloads:
        ids += [engine.add_request(p, max_tokens=MAX_TOKENS) for p in prompts]
        while engine.has_unfinished():
            for o in engine.step():
                tokens.setdefault(o.request_id, []).extend(o.new_token_ids)
    settle()
    return time.process_time() - p0, [tuple(tokens[i]) for i in ids]


def _median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def process_table(batch: int, endpoint: str, rounds: int = PROCESS_ROUNDS) -> dict[str, Any]:
    """One engine, the four arms one after another in each round (order rotating): the whole
    process's CPU (``time.process_time``, every thread) over ``REQUESTS`` requests (workloads
    back to back) until telemetry has handed them all over (``Instrumentation.flush``: one
    forced export and record file per arm-round, every 0.3 s or so at batch 8: more often than
    telemetry's defaults, a record file every 2 s and spans exported every 5 s or 512 spans, so
    the costs paid per export and per file, about 1 ms together, are counted several times over),
    so interference between threads is included."""
    rng = random.Random(batch)
    engine = _engine(batch)
    with tempfile.TemporaryDirectory() as tmp:
        inst = _instrument(engine, tmp, endpoint)
        inst.pause()
        per: dict[str, list[dict[str, float]]] = {a: [] for a in ARMS}
        for r in range(rounds + 1):
            workloads = [_prompts(rng, batch) for _ in range(max(1, REQUESTS // batch))]
            order = ARMS[r % 4 :] + ARMS[: r % 4]
            answers: dict[str, list[tuple[int, ...]]] = {}
            for arm in order if r % 8 < 4 else tuple(reversed(order)):
                on = arm.startswith("on")
                if on:
                    inst.resume()
                cpu, answers[arm] = _round(engine, workloads, inst.flush if on else lambda: None)
                inst.pause()
                if r > 0:  # round 0 warms up
                    per[arm].append({"proc": cpu})
            assert all(v == answers["bare"] for v in answers.values()), "tokens differ from bare"
        assert inst.flush() and inst.drops.total == 0, f"telemetry dropped {inst.drops.snapshot()}"
        reg = inst.registry
        assert reg is not None
        scrape = _scrape_ms(reg)
        inst.detach()
    extra = [x["proc"] - y["proc"] for x, y in zip(per["on"], per["bare"], strict=True)]
    n = batch * len(workloads)
    return {
        "batch": batch,
        "requests": n,
        "round_ms": _median([x["proc"] for x in per["bare"]]) * 1e3,
        "proc": _ratios(per, "proc"),
        "extra_us_req": _median(extra) / n * 1e6,
        "scrape_ms": scrape,
    }


def _scrape_ms(reg: CollectorRegistry, n: int = 20) -> float:
    times = []
    for _ in range(n):
        t0 = time.process_time()
        generate_latest(reg)
        times.append(time.process_time() - t0)
    return _median(times) * 1e3


def _verdict(t: tuple[float, float, float], goal: float) -> str:
    """Met or short, with the noise floor: the larger A/A deviation of the same measure."""
    value, noise = t[0], max(abs(t[1] - 1.0), abs(t[2] - 1.0))
    if value <= goal:
        return f"met (A/A noise ±{noise:.3f})"
    short = value - goal
    within = "within" if short <= noise else "beyond"
    return f"short by {short:.3f}, {within} this run's A/A noise ±{noise:.3f}"


def _ratio_cells(t: tuple[float, float, float]) -> str:
    return f"{t[0]:.4f} | {t[1]:.4f} | {t[2]:.4f}"


def main() -> None:
    print(f"machine: {cpu()}; Python {platform.python_version()}; {load()}")
    print(f"workload: B requests decoded together, {PROMPT}-token prompts, {MAX_TOKENS} output "
          f"tokens each, greedy, seeded; {ROUNDS} measured rounds (+1 warm-up); default "
          "ModelConfig, CPU, torch 1 thread. on = metrics + spans over OTLP/HTTP to a collector "
          "process + JSONL record files + goodput; every arm's tokens asserted equal to bare's")  # fmt: skip
    lock, proc, hooks = [], [], []
    with otlp_collector() as endpoint:
        for batch in BATCHES:
            t0 = time.perf_counter()
            lock.append(lockstep_table(batch, endpoint))
            proc.append(process_table(batch, endpoint))
            hooks.append(
                hook_table(batch, _engine, partial(_instrument, endpoint=endpoint), prompt=PROMPT,
                           max_tokens=MAX_TOKENS, requests=REQUESTS, rounds=ROUNDS)
            )  # fmt: skip
            print(f"(batch {batch}: {time.perf_counter() - t0:.0f} s, {load()})", flush=True)
    print()
    print("Lockstep: four engines stepped in turn, the arms moving one engine on each round; "
          "per-thread CPU; ratios = median over rounds of per-round ratios (A/A: identical "
          f"arms); {REQUESTS} requests per arm and round")  # fmt: skip
    print()
    print("| batch | bare step loop CPU per round (ms) | step loop CPU on/bare | A/A bare2/bare "
          "| A/A on2/on | step loop wall on/bare | A/A bare2/bare | A/A on2/on "
          "| telemetry CPU, all threads, on/bare | A/A bare2/bare | A/A on2/on "
          "| step loop µs/request | hand-over µs/request | background µs/request "
          "| background µs/token |")  # fmt: skip
    print("|---:" * 15 + "|")
    for x in lock:
        print(f"| {x['batch']} | {x['round_ms']:.0f} | {_ratio_cells(x['step'])} | "
              f"{_ratio_cells(x['wall'])} | {_ratio_cells(x['whole'])} | "
              f"{x['step_us_req']:.0f} | {x['flush_us_req']:.0f} | {x['bg_us_req']:.0f} | "
              f"{x['bg_us_tok']:.2f} |")  # fmt: skip
    print()
    print("Whole process: one engine, arms one after another; time.process_time per round")
    print()
    print("| batch | bare round CPU (ms) | process CPU on/bare | A/A bare2/bare | A/A on2/on "
          "| on−bare CPU µs/request | scrape CPU (ms) |")  # fmt: skip
    print("|---:" * 7 + "|")
    for y in proc:
        print(f"| {y['batch']} | {y['round_ms']:.0f} | {_ratio_cells(y['proc'])} | "
              f"{y['extra_us_req']:.0f} | {y['scrape_ms']:.2f} |")  # fmt: skip
    print()
    print("Step-loop work for telemetry, timed where it runs (thread CPU): the observer's "
          "callbacks and the engine's work for observers (step events, StepStats, the step's cost "
          "estimate), less the meter's own cost; against the rest of the step loop "
          "(benchmarks/telemetry_hooks.py)")  # fmt: skip
    print()
    print("| batch | telemetry CPU / engine step loop (median) | largest round | µs/request "
          "| meter ns/region (subtracted) |")  # fmt: skip
    print("|---:" * 5 + "|")
    for h in hooks:
        print(
            f"| {h['batch']:.0f} | {h['share']:.3%} | {h['share_max']:.3%} | "
            f"{h['hook_us_req']:.1f} | {h['meter_ns_region']:.0f} |"
        )
    print()
    for x, y, h in zip(lock, proc, hooks, strict=True):
        met = "met" if h["share"] <= GOAL_STEP - 1.0 else "short"
        print(f"telemetry at batch {x['batch']}: telemetry's own step-loop work {h['share']:.3%} of the engine's, "
              f"goal <= {GOAL_STEP - 1.0:.0%}: {met}; "
              f"step loop {x['step'][0]:.4f}x bare, goal <= "
              f"{GOAL_STEP}x: {_verdict(x['step'], GOAL_STEP)}; all telemetry CPU by thread "
              f"{x['whole'][0]:.4f}x, goal <= {GOAL_PROCESS}x: "
              f"{_verdict(x['whole'], GOAL_PROCESS)}; whole process by process_time "
              f"{y['proc'][0]:.4f}x: {_verdict(y['proc'], GOAL_PROCESS)}; background "
              f"{x['bg_us_req']:.0f} µs/request, {x['bg_us_tok']:.2f} µs/token")  # fmt: skip
    print(f"(end: {load()})")


if __name__ == "__main__":
    main()
