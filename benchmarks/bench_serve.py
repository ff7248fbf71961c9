"""Serve and probe: the probe's own overhead and how many streams it holds; the HTTP server's
tokens/s against the same engine called in-process.

Run with ``.venv/bin/python -m benchmarks serve``.

1. Probe self-overhead. A scripted server in a separate process emits each stream's tokens at
   known instants (first token after 50 ms, then 8 chunks 50 ms apart). The probe and a bare
   aiohttp client (posts, reads raw bytes, stamps the first byte, parses nothing) each open N
   concurrent streams, interleaved, three rounds; medians reported. Columns: client CPU seconds
   (this process only: the server runs elsewhere), the ratio probe/bare, the probe's send lag
   (actual - scheduled send, its own timing error) and its measured TTFT beside the bare client's
   (the script says 50 ms; anything above is server + loopback + client delay).
2. Accuracy against the truth (``probe_truth``): the probe's TTFT/ITL p50/p99 beside the scripted
   server's own write instants at 256 and 1,000 streams (20 ms token gap), one process and spread
   over worker processes, with the probe's own loop lag, CPU share and verdict.
3. HTTP overhead. One engine generates 32 requests x 64 tokens offline (``LLMEngine.generate``);
   a second identical engine behind ``start_server`` serves the same 32 requests to the probe at
   concurrency 32. Interleaved, three rounds, median output tokens/s and their ratio.
4. Against the server's records. ``probe run --api chat`` in its own process (so it does not
   share the server's GIL) drives a small engine behind ``start_server`` with a record sink,
   32 requests x 96 tokens at concurrency 4; per run, the probe's output tokens/s and TPOT p50
   beside the records' of the same requests (gap: relative), and TTFT p50 from both ends (the
   probe's is above: HTTP receive and first-chunk delivery).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import aiohttp
import numpy as np

from benchmarks.probe_truth import accuracy
from fleetwatch.engine_probe.probe.client import Prober, completion_body
from fleetwatch.engine_probe.probe.stats import summarise

STREAMS = (100, 1000, 2000)
RATES = (250, 500, 1000)
ROUNDS = 3
HTTP_ROUNDS = 7


async def _bare(url: str, n: int) -> tuple[float, list[float]]:
    """A client that measures only time to first byte: no SSE parsing, no JSON."""
    ttfb: list[float] = []
    conn = aiohttp.TCPConnector(limit=n + 16, limit_per_host=0)
    async with aiohttp.ClientSession(connector=conn, read_bufsize=1 << 20) as s:

        async def one() -> None:
            t0 = time.monotonic()
            first = None
            async with s.post(f"{url}/v1/completions", json=completion_body("p", 9)) as r:
                async for _ in r.content.iter_any():
                    if first is None:
                        first = time.monotonic() - t0
            ttfb.append(first or float("nan"))

        c0 = time.process_time()
        await asyncio.gather(*(one() for _ in range(n)))
        return time.process_time() - c0, ttfb


async def _probe(url: str, n: int) -> tuple[float, float, float, float]:
    async with Prober(url, max_connections=n + 16) as p:
        bodies = [completion_body("p", 9) for _ in range(n)]
        c0 = time.process_time()
        results = await p.open_loop([0.0] * n, bodies)
        cpu = time.process_time() - c0
    s = summarise(results, label=str(n), mode="constant", concurrency=n)
    assert s.ok == n, f"{n - s.ok} of {n} streams failed"
    return cpu, s.send_lag.p99, s.ttft.p50, s.ttft.p99


async def _sustained(url: str, rate: float, seconds: float) -> tuple[float, float, float, int]:
    """Open loop at ``rate``/s for ``seconds``: send lag p50, p99 (s), achieved send rate, peak in flight."""
    n = int(rate * seconds)
    in_flight = 0
    peak = 0

    def done(_: object) -> None:
        nonlocal in_flight
        in_flight -= 1

    async with Prober(url, max_connections=int(rate) + 64) as p:
        offsets = [i / rate for i in range(n)]
        bodies = [completion_body("p", 9) for _ in range(n)]
        original = p.one

        async def counted(*args: object, **kwargs: object) -> object:
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            return await original(*args, **kwargs)  # type: ignore[arg-type]

        p.one = counted  # type: ignore[method-assign,assignment]
        results = await p.open_loop(offsets, bodies, on_done=done)
    s = summarise(results, label=str(rate), mode="constant", rate=rate)
    sends = sorted(r.sent_s for r in results)
    achieved = (n - 1) / (sends[-1] - sends[0]) if n > 1 else 0.0
    return s.send_lag.p50, s.send_lag.p99, achieved, peak


def probe_overhead() -> None:
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetwatch.engine_probe.probe.scripted_server",
            "0.05",
            "0.05",
            "8",
            "1",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        print("probe self-overhead (scripted server in its own process; TTFT by script = 50 ms)")
        head = f"{'streams':>8} {'bare cpu s':>11} {'probe cpu s':>12} {'ratio':>6} {'send lag p99 ms':>16} {'bare TTFB p50 ms':>17} {'probe TTFT p50 ms':>18} {'probe TTFT p99 ms':>18}"
        print(head)
        for n in STREAMS:
            bare_cpu, probe_cpu, lag, bare_t, p50, p99 = [], [], [], [], [], []
            for _ in range(ROUNDS):
                c, ttfb = asyncio.run(_bare(url, n))
                bare_cpu.append(c)
                bare_t.append(float(np.nanmedian(ttfb)))
                c, lag99, t50, t99 = asyncio.run(_probe(url, n))
                probe_cpu.append(c)
                lag.append(lag99)
                p50.append(t50)
                p99.append(t99)
            m = statistics.median
            print(
                f"{n:>8} {m(bare_cpu):>11.3f} {m(probe_cpu):>12.3f} {m(probe_cpu) / m(bare_cpu):>6.2f} "
                f"{m(lag) * 1e3:>16.2f} {m(bare_t) * 1e3:>17.1f} {m(p50) * 1e3:>18.1f} {m(p99) * 1e3:>18.1f}"
            )
        print(
            "\nsustained open loop (constant rate, 1.5 s per rate; each stream lasts about 0.45 s)"
        )
        print(
            f"{'rate/s':>8} {'achieved/s':>11} {'peak streams':>13} {'send lag p50 ms':>16} {'send lag p99 ms':>16}"
        )
        for rate in RATES:
            rows = [asyncio.run(_sustained(url, rate, 1.5)) for _ in range(ROUNDS)]
            m = statistics.median
            print(
                f"{rate:>8} {m(r[2] for r in rows):>11.0f} {m(r[3] for r in rows):>13.0f} "
                f"{m(r[0] for r in rows) * 1e3:>16.2f} {m(r[1] for r in rows) * 1e3:>16.2f}"
            )
    finally:
        server.kill()
        server.wait()


def http_overhead(requests: int = 32, prompt: int = 64, max_tokens: int = 64) -> None:
    from fleetwatch.engine_probe.engine import EngineConfig, LLMEngine, ModelConfig
    from fleetwatch.engine_probe.probe.runner import make_prompts
    from fleetwatch.engine_probe.serve import start_server
    from fleetwatch.engine_probe.serve.wire.text_ids import encode

    model = ModelConfig()
    texts = make_prompts(requests, prompt, np.random.default_rng(0))
    ids = [encode(t, model.vocab_size) for t in texts]

    def offline() -> float:
        # On a worker thread, as AsyncEngine runs it: torch's main-thread OpenMP team is far
        # slower on a loaded 2-core machine, which would flatter the HTTP path.
        box: list[float] = []

        def work() -> None:
            engine = LLMEngine(model, EngineConfig(device="cpu"))
            engine.generate(ids[:2], max_tokens=4)  # warm-up
            t0 = time.perf_counter()
            out = engine.generate(ids, max_tokens=max_tokens)
            box.append(sum(len(o) for o in out) / (time.perf_counter() - t0))

        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        return box[0]

    async def served() -> float:
        engine = LLMEngine(model, EngineConfig(device="cpu"))
        async with await start_server(engine, telemetry=True) as h, Prober(h.url) as p:
            await p.closed_loop(2, [completion_body(t, 4) for t in texts[:2]])  # warm-up
            results = await p.closed_loop(requests, [completion_body(t, max_tokens) for t in texts])
        s = summarise(results, label="http", mode="closed", concurrency=requests)
        assert s.ok == requests
        return s.output_tokens_per_s

    off, http = [], []
    for _ in range(HTTP_ROUNDS):
        off.append(offline())
        http.append(asyncio.run(served()))
    ratios = sorted(h / o for h, o in zip(http, off, strict=True))
    m = statistics.median
    print(
        f"\nHTTP overhead ({requests} requests x {max_tokens} tokens, prompt {prompt}, "
        f"default reference model, CPU; {HTTP_ROUNDS} interleaved pairs)"
    )
    print(f"{'path':<34} {'output tokens/s (median)':>25}")
    print(f"{'in-process LLMEngine.generate':<34} {m(off):>25,.0f}")
    print(f"{'HTTP server + probe, c=32':<34} {m(http):>25,.0f}")
    print(
        f"{'ratio HTTP / in-process':<34} {m(ratios):>25.2f}"
        f"  (median of paired ratios; range {ratios[0]:.2f}-{ratios[-1]:.2f})"
    )


def records_agreement(
    runs: int = 5, requests: int = 32, concurrency: int = 4, max_tokens: int = 96
) -> None:
    from fleetwatch.engine_probe.engine import EngineConfig, LLMEngine, ModelConfig
    from fleetwatch.engine_probe.serve import start_server
    from fleetwatch.records import read_records
    from fleetwatch.telemetry.sink import MemoryRecordSink

    model = ModelConfig(
        num_layers=4,
        hidden_size=256,
        intermediate_size=512,
        num_heads=4,
        num_kv_heads=2,
        vocab_size=512,
        max_position_embeddings=1024,
    )

    async def one(work: Path) -> tuple[float, float, float, float]:
        sink = MemoryRecordSink()
        engine = LLMEngine(model, EngineConfig(num_blocks=512, max_num_seqs=8, device="cpu"))
        out, recs = work / "run.json", work / "run.jsonl"
        async with await start_server(engine, record_sink=sink) as h:
            argv = ["probe", "run", h.url, "--api", "chat", "-c", str(concurrency)]
            argv += ["-n", str(requests), "--prompt-tokens", "32", "--max-tokens", str(max_tokens)]
            argv += ["--no-progress", "--json", str(out), "--records", str(recs)]
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "fleetwatch",
                *argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            )
            log, _ = await proc.communicate()
            assert proc.returncode == 0, log.decode()
            assert h.instrumentation is not None
            await asyncio.to_thread(h.instrumentation.flush, 10)
        level = json.loads(out.read_text())["levels"][0]
        served = [r for r in sink.records if r.status == "ok"]
        assert level["ok"] == len(served) == len(read_records(recs)) == requests
        span = max(r.finished_s for r in served) - min(r.arrival_s for r in served)
        server_tps = sum(r.output_tokens for r in served) / span
        server_tpot = float(np.median([r.tpot_s for r in served]))
        server_ttft = float(np.median([r.ttft_s for r in served]))
        tps_gap = abs(level["output_tokens_per_s"] - server_tps) / server_tps
        tpot_gap = abs(level["tpot"]["p50"] - server_tpot) / server_tpot
        return tps_gap, tpot_gap, level["ttft"]["p50"], server_ttft

    print(
        f"\nprobe against the server's records (chat API, {requests} requests x {max_tokens} "
        f"tokens at concurrency {concurrency}, probe in its own process; {runs} runs)"
    )
    print(
        f"{'run':>4} {'tok/s gap %':>12} {'TPOT p50 gap %':>15} {'probe TTFT p50 ms':>18} "
        f"{'records TTFT p50 ms':>20}"
    )
    rows = []
    for i in range(runs):
        with tempfile.TemporaryDirectory() as work:
            rows.append(asyncio.run(one(Path(work))))
        tps, tpot, probe_ttft, server_ttft = rows[-1]
        print(
            f"{i + 1:>4} {tps * 100:>12.2f} {tpot * 100:>15.2f} {probe_ttft * 1e3:>18.1f} "
            f"{server_ttft * 1e3:>20.1f}"
        )
    m = statistics.median
    print(
        f"{'med':>4} {m(r[0] for r in rows) * 100:>12.2f} {m(r[1] for r in rows) * 100:>15.2f} "
        f"{m(r[2] for r in rows) * 1e3:>18.1f} {m(r[3] for r in rows) * 1e3:>20.1f}"
    )


def main() -> None:
    probe_overhead()
    accuracy()
    http_overhead()
    records_agreement()


if __name__ == "__main__":
    main()
