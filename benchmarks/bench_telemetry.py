"""Telemetry's cost told whole: the reference engine running, instrumented against bare.

One engine per batch size; four arms run round-robin in a rotating order, so machine noise hits
them alike: ``bare`` and ``bare2`` (no observer attached), ``on`` and ``on2`` (the telemetry
observer attached: Prometheus metrics, OpenTelemetry spans exported over OTLP/HTTP to a collector
in another process, request records to rotating JSONL files, goodput counter). ``bare2/bare``
and ``on2/on`` are A/A controls: identical code, so their spread is this machine's noise floor.

A round is one seeded workload (``batch`` requests decoded together); every arm of a round gets
the same prompts and must produce the same tokens (asserted). Per round:

- step loop (critical path): the step-loop thread's CPU time inside ``add_request`` and
  ``engine.step`` (observer callbacks included), and the wall time of the same calls;
- whole process: ``time.process_time`` from the first ``add_request`` until telemetry has
  handed everything over (``Instrumentation.flush``: histograms binned as a scrape would, spans
  built and exported, records written), every thread included;
- background: CPU of each telemetry thread over the round (``pthread_getcpuclockid``).

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
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from engine_probe.engine import EngineConfig, LLMEngine, ModelConfig
from telemetry.instrument import Instrumentation, instrument
from telemetry.sink import RotatingRecordSink

BATCHES = (8, 32)
PROMPT = 32
MAX_TOKENS = 64
ROUNDS = 9
ARMS = ("bare", "bare2", "on", "on2")
GOAL_PROCESS = 1.03
GOAL_STEP = 1.01

_COLLECTOR = r"""
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
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


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} CPUs"


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


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


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of every live thread other than this one, by thread name."""
    me = threading.get_ident()
    out: dict[str, float] = {}
    for t in threading.enumerate():
        if t.ident is None or t.ident == me:
            continue
        try:
            clock = time.pthread_getcpuclockid(t.ident)
            out[t.name] = out.get(t.name, 0.0) + time.clock_gettime(clock)
        except (OSError, ProcessLookupError, AttributeError):
            continue
    return out


def _round(
    engine: LLMEngine, prompts: Sequence[Sequence[int]], settle: Callable[[], object]
) -> tuple[dict[str, float], list[tuple[int, ...]]]:
    """One workload; its costs (seconds) and the tokens each request produced, in order."""
    tokens: dict[str, list[int]] = {}
    crit_cpu = crit_wall = 0.0
    bg0 = _thread_cpu()
    p0 = time.process_time()
    c0, w0 = time.thread_time(), time.perf_counter()
    ids = [engine.add_request(p, max_tokens=MAX_TOKENS) for p in prompts]
    crit_cpu += time.thread_time() - c0
    crit_wall += time.perf_counter() - w0
    while engine.has_unfinished():
        c0, w0 = time.thread_time(), time.perf_counter()
        outs = engine.step()
        crit_cpu += time.thread_time() - c0
        crit_wall += time.perf_counter() - w0
        for o in outs:
            tokens.setdefault(o.request_id, []).extend(o.new_token_ids)
    settle()
    proc = time.process_time() - p0
    bg1 = _thread_cpu()
    bg = sum(v - bg0.get(k, 0.0) for k, v in bg1.items() if k.startswith("fleetwatch"))
    n_tokens = sum(len(v) for v in tokens.values())
    cost = {"crit_cpu": crit_cpu, "crit_wall": crit_wall, "proc": proc, "bg": bg,
            "tokens": float(n_tokens)}  # fmt: skip
    return cost, [tuple(tokens[i]) for i in ids]


def _median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def engine_table(batch: int, endpoint: str, rounds: int = ROUNDS) -> dict[str, Any]:
    """Interleaved rounds of the four arms on one engine; per-round ratios, medians over rounds."""
    rng = random.Random(batch)
    engine = _engine(batch)
    with tempfile.TemporaryDirectory() as tmp:
        inst = _instrument(engine, tmp, endpoint)
        inst.pause()
        per: dict[str, list[dict[str, float]]] = {a: [] for a in ARMS}
        for r in range(rounds + 1):
            prompts = [[rng.randrange(1, 2000) for _ in range(PROMPT)] for _ in range(batch)]
            order = ARMS[r % len(ARMS) :] + ARMS[: r % len(ARMS)]
            answers: dict[str, list[tuple[int, ...]]] = {}
            for arm in order if r % 2 == 0 else tuple(reversed(order)):
                on = arm.startswith("on")
                if on:
                    inst.resume()
                cost, answers[arm] = _round(engine, prompts, inst.flush if on else lambda: None)
                inst.pause()
                if r > 0:  # round 0 warms up
                    per[arm].append(cost)
            first = answers[ARMS[0]]
            assert all(a == first for a in answers.values()), "instrumented tokens differ from bare"
        ok = inst.flush()
        assert ok and inst.drops.total == 0, f"telemetry dropped {inst.drops.snapshot()}"
        reg = inst.registry
        assert reg is not None
        scrape = _scrape_ms(reg)
        inst.detach()

    def ratio(a: str, b: str, key: str) -> float:
        return _median([x[key] / y[key] for x, y in zip(per[a], per[b], strict=True)])

    def extra(key: str, per_what: str) -> float:
        diffs = [(x[key] - y[key]) / (batch if per_what == "request" else x["tokens"])
                 for x, y in zip(per["on"], per["bare"], strict=True)]  # fmt: skip
        return _median(diffs) * 1e6

    bg = [x["bg"] for x in per["on"]]
    return {
        "batch": batch,
        "tokens": per["on"][0]["tokens"],
        "bare_round_cpu_ms": _median([x["proc"] for x in per["bare"]]) * 1e3,
        "step": ratio("on", "bare", "crit_cpu"),
        "step_aa": ratio("bare2", "bare", "crit_cpu"),
        "step_aa_on": ratio("on2", "on", "crit_cpu"),
        "step_wall": ratio("on", "bare", "crit_wall"),
        "step_wall_aa": ratio("bare2", "bare", "crit_wall"),
        "proc": ratio("on", "bare", "proc"),
        "proc_aa": ratio("bare2", "bare", "proc"),
        "proc_aa_on": ratio("on2", "on", "proc"),
        "extra_us_req": extra("proc", "request"),
        "extra_us_tok": extra("proc", "token"),
        "step_us_req": extra("crit_cpu", "request"),
        "bg_us_req": _median(bg) / batch * 1e6,
        "bg_us_tok": _median([x["bg"] / x["tokens"] for x in per["on"]]) * 1e6,
        "bg_bare_us": _median([x["bg"] for x in per["bare"]]) * 1e6,
        "scrape_ms": scrape,
    }


def _scrape_ms(reg: CollectorRegistry, n: int = 20) -> float:
    times = []
    for _ in range(n):
        t0 = time.process_time()
        generate_latest(reg)
        times.append(time.process_time() - t0)
    return _median(times) * 1e3


def _verdict(value: float, goal: float) -> str:
    if value <= goal:
        return "met"
    return f"short by {value - goal:.3f}"


def main() -> None:
    print(f"machine: {machine()}; Python {platform.python_version()}; {load()}")
    print(f"workload: B requests decoded together, {PROMPT}-token prompts, {MAX_TOKENS} output "
          f"tokens each, greedy; {ROUNDS} measured rounds (+1 warm-up) of 4 interleaved arms; "
          "default ModelConfig, CPU, torch 1 thread; on = metrics + spans over OTLP/HTTP to a "
          "collector process + JSONL records + goodput")  # fmt: skip
    rows = []
    with otlp_collector() as endpoint:
        for batch in BATCHES:
            t0 = time.perf_counter()
            rows.append(engine_table(batch, endpoint))
            print(f"(batch {batch}: {time.perf_counter() - t0:.0f} s, {load()})", flush=True)
    print()
    print("| batch | bare round CPU (ms) | step loop CPU on/bare | A/A bare2/bare | A/A on2/on "
          "| step loop wall on/bare | A/A wall | whole process CPU on/bare | A/A bare2/bare "
          "| A/A on2/on | extra CPU µs/request | µs/token | of which step loop µs/request "
          "| background threads µs/request | µs/token | scrape CPU (ms) |")  # fmt: skip
    print("|---:" * 16 + "|")
    for x in rows:
        print(f"| {x['batch']} | {x['bare_round_cpu_ms']:.0f} | {x['step']:.4f} | "
              f"{x['step_aa']:.4f} | {x['step_aa_on']:.4f} | {x['step_wall']:.4f} | "
              f"{x['step_wall_aa']:.4f} | {x['proc']:.4f} | {x['proc_aa']:.4f} | "
              f"{x['proc_aa_on']:.4f} | {x['extra_us_req']:.0f} | {x['extra_us_tok']:.2f} | "
              f"{x['step_us_req']:.0f} | {x['bg_us_req']:.0f} | {x['bg_us_tok']:.2f} | "
              f"{x['scrape_ms']:.2f} |")  # fmt: skip
    print()
    for x in rows:
        print(f"telemetry at batch {x['batch']}: whole-process CPU {x['proc']:.3f}x bare "
              f"(A/A {x['proc_aa']:.3f}x), goal <= {GOAL_PROCESS}x: "
              f"{_verdict(x['proc'], GOAL_PROCESS)}; step loop {x['step']:.3f}x "
              f"(A/A {x['step_aa']:.3f}x), goal <= {GOAL_STEP}x: {_verdict(x['step'], GOAL_STEP)}; "
              f"background {x['bg_us_req']:.0f} µs/request, {x['bg_us_tok']:.2f} µs/token")  # fmt: skip
    print(f"(end: {load()})")


if __name__ == "__main__":
    main()
