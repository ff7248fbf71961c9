"""The reference engine: decode throughput and achieved bandwidth, continuous vs static batching,
and a tight KV cache under recompute vs restart-from-zero preemption.

Run with ``.venv/bin/python -m benchmarks engine``. Everything is measured in this one run:
the copy bandwidth is a ``torch.clone`` of a 256 MiB buffer (read + write bytes per second, the
STREAM "copy" convention), measured before and after the decode sweep; the achieved bandwidth of
a decode step is the engine's own ``StepStats.bytes_read`` estimate divided by the step time.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence

import torch

from engine_probe.engine import EngineConfig, LLMEngine, ModelConfig, StepStats
from engine_probe.engine.event_log import EventLog
from engine_probe.engine.workload import RunSummary, run_offline, synthetic_workload

BATCHES = (1, 2, 4, 8, 16, 32, 64)
DECODE_STEPS = 40


def copy_bandwidth(nbytes: int = 256 << 20, repeats: int = 5) -> float:
    """Bytes per second (read + written) of cloning a large float32 tensor; median of repeats."""
    src = torch.ones(nbytes // 4)
    src.clone()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        src.clone()
        times.append(time.perf_counter() - t)
    return 2 * nbytes / statistics.median(times)


def decode_sweep(model: ModelConfig) -> list[tuple[int, float, float, float]]:
    """(batch, median step s, tokens/s, bytes read per step) for each batch size."""
    rows = []
    for batch in BATCHES:
        log = EventLog()
        engine = LLMEngine(model, EngineConfig(num_blocks=2048, max_num_seqs=64, max_num_batched_tokens=4096))
        for i in range(batch):
            engine.add_request([(i * 31 + j) % model.vocab_size for j in range(128)], max_tokens=DECODE_STEPS + 8)
        engine.step()  # the prefill of every prompt
        engine.step()  # warm-up decode
        engine.attach(log)
        for _ in range(DECODE_STEPS):
            engine.step()
        steps: Sequence[StepStats] = [s for s in log.steps if s.decode_tokens == batch]
        step_s = statistics.median(s.duration_s for s in steps)
        nbytes = statistics.median(s.bytes_read for s in steps)
        rows.append((batch, step_s, batch / step_s, nbytes))
    return rows


def batching_comparison(model: ModelConfig, repeats: int = 2) -> dict[str, list[RunSummary]]:
    """Continuous and static batching on the same mixed-length workload, interleaved."""
    items = synthetic_workload(
        384, prompt_len=48, max_tokens=192, vocab_size=model.vocab_size, seed=1, mixed=True, long_fraction=0.08
    )
    results: dict[str, list[RunSummary]] = {"continuous": [], "static": []}
    for _ in range(repeats):
        for mode in ("continuous", "static"):
            engine = LLMEngine(
                model,
                EngineConfig(num_blocks=4096, max_num_seqs=64, max_num_batched_tokens=1024, scheduling=mode),  # type: ignore[arg-type]
            )
            results[mode].append(run_offline(engine, items))
    return results


def tight_cache(model: ModelConfig) -> dict[str, RunSummary]:
    """200 requests on a pool that holds about four full-length sequences."""
    items = synthetic_workload(200, prompt_len=32, max_tokens=48, vocab_size=model.vocab_size, seed=2)
    longest = max(len(i.prompt) + i.max_tokens for i in items)
    blocks = 4 * -(-longest // 16)
    out: dict[str, RunSummary] = {}
    for policy in ("recompute", "restart"):
        engine = LLMEngine(
            model,
            EngineConfig(num_blocks=blocks, max_num_seqs=64, max_num_batched_tokens=512, preemption=policy),  # type: ignore[arg-type]
        )
        out[policy] = run_offline(engine, items, max_steps=20000)
    _print(f"tight cache: {len(items)} requests, longest {longest} tokens, pool {blocks} blocks x 16")
    return out


def _print(*args: object) -> None:
    print(*args, flush=True)


def _median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def main() -> None:
    threads = int(os.environ.get("FLEETWATCH_ENGINE_THREADS", "2"))
    torch.set_num_threads(threads)
    model = ModelConfig()
    _print(
        f"model: {model.num_params / 1e6:.2f} M params (float32), {model.num_layers} layers, hidden "
        f"{model.hidden_size}, {model.num_heads} heads / {model.num_kv_heads} kv heads, vocab "
        f"{model.vocab_size}; torch {torch.__version__}, {threads} threads"
    )
    bw_before = copy_bandwidth()
    sweep = decode_sweep(model)
    bw_after = copy_bandwidth()
    bw = statistics.median([bw_before, bw_after])
    _print(f"\ncopy bandwidth (clone of 256 MiB, read+write): {bw / 1e9:.1f} GB/s "
          f"(before {bw_before / 1e9:.1f}, after {bw_after / 1e9:.1f})")
    _print("\n| batch | step ms (median) | decode tok/s | bytes read/step (MB) | achieved GB/s | of copy bw |")
    _print("|---:|---:|---:|---:|---:|---:|")
    for batch, step_s, tps, nbytes in sweep:
        achieved = nbytes / step_s
        _print(f"| {batch} | {step_s * 1e3:.2f} | {tps:,.0f} | {nbytes / 1e6:.1f} | {achieved / 1e9:.2f} | {achieved / bw:.0%} |")

    comp = batching_comparison(model)
    cont, stat = comp["continuous"], comp["static"]
    c_tps = _median([r.output_tokens_per_s for r in cont])
    s_tps = _median([r.output_tokens_per_s for r in stat])
    _print("\nmixed workload: 384 requests, prompts 24-72 tokens, 92% ask 12 tokens, 8% ask 192; max 64 running")
    _print("| scheduling | output tok/s | steps | TTFT p50 s | TTFT p99 s | elapsed s |")
    _print("|---|---:|---:|---:|---:|---:|")
    for name, runs in (("continuous", cont), ("static", stat)):
        _print(
            f"| {name} | {_median([r.output_tokens_per_s for r in runs]):,.0f} | {runs[0].steps} | "
            f"{_median([r.ttft_p50_s for r in runs]):.2f} | {_median([r.ttft_p99_s for r in runs]):.2f} | "
            f"{_median([r.elapsed_s for r in runs]):.2f} |"
        )
    _print(f"continuous / static throughput: {c_tps / s_tps:.1f}x (medians of {len(cont)} interleaved runs each)")

    tight = tight_cache(model)
    _print("| preemption | completed | preemptions | tokens computed | steps | elapsed s | output tok/s |")
    _print("|---|---:|---:|---:|---:|---:|---:|")
    for policy in ("recompute", "restart"):
        r = tight[policy]
        _print(
            f"| {policy} | {r.completed}/{r.requests} | {r.preemptions} | {r.computed_tokens:,} | {r.steps} | "
            f"{r.elapsed_s:.2f} | {r.output_tokens_per_s:,.0f} |"
        )


if __name__ == "__main__":
    main()
