"""The reference engine: decode throughput and achieved bandwidth, continuous vs static batching,
and a tight KV cache under recompute vs restart-from-zero preemption.

Run with ``.venv/bin/python -m benchmarks engine``. Everything is measured in this one run:
the copy bandwidth is a ``Tensor.copy_`` of a 256 MiB buffer into a preallocated, already touched
one (read + write bytes per second, the STREAM "copy" convention), timed in the same rounds as the decode steps; the achieved bandwidth
of a decode step is the engine's own ``StepStats.bytes_read`` estimate divided by the step time.
torch runs on one thread unless FLEETWATCH_ENGINE_THREADS says otherwise: on a shared,
oversubscribed two-core machine two OpenMP threads wait on each other and steps slow down 5-10x.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence

import torch

from fleetwatch.engine_probe.engine import EngineConfig, LLMEngine, ModelConfig, StepStats
from fleetwatch.engine_probe.engine.event_log import EventLog
from fleetwatch.engine_probe.engine.workload import RunSummary, run_offline, synthetic_workload

BATCHES = (1, 2, 4, 8, 16, 32, 64)
DECODE_STEPS = 40
COPY_BYTES = 256 << 20
MIXED_REQUESTS = 256


def _copy_seconds(src: torch.Tensor, dst: torch.Tensor) -> float:
    t = time.perf_counter()
    dst.copy_(src)
    return time.perf_counter() - t


def decode_sweep(
    model: ModelConfig,
    batches: Sequence[int] = BATCHES,
    prompt_len: int = 128,
    rounds: int = DECODE_STEPS,
) -> tuple[list[tuple[int, float, float, float]], float]:
    """Rows of (batch, median step s, tokens/s, bytes read per step) and the copy bandwidth.

    One engine per batch size, all prefilled first; then rounds in which every engine takes one
    decode step and a 256 MiB copy is timed, so every number sees the same machine noise.
    """
    engines: dict[int, tuple[LLMEngine, EventLog]] = {}
    for batch in batches:
        log = EventLog()
        engine = LLMEngine(
            model, EngineConfig(num_blocks=1024, max_num_seqs=64, max_num_batched_tokens=8192)
        )
        for i in range(batch):
            prompt = [(i * 31 + j) % model.vocab_size for j in range(prompt_len)]
            engine.add_request(prompt, max_tokens=rounds + 4)
        engine.step()  # the prefill of every prompt
        engine.step()  # warm-up decode
        engine.attach(log)
        engines[batch] = (engine, log)
    src = torch.ones(COPY_BYTES // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)  # touch every page once: later copies measure bandwidth, not page faults
    copy_s: list[float] = []
    for _ in range(rounds):
        copy_s.append(_copy_seconds(src, dst))
        for engine, _log in engines.values():
            engine.step()
    rows = []
    for batch, (_engine, log) in engines.items():
        steps: Sequence[StepStats] = [s for s in log.steps if s.decode_tokens == batch]
        step_s = statistics.median(s.duration_s for s in steps)
        nbytes = statistics.median(s.bytes_read for s in steps)
        rows.append((batch, step_s, batch / step_s, nbytes))
    return rows, 2 * COPY_BYTES / statistics.median(copy_s)


def batching_comparison(model: ModelConfig, repeats: int = 2) -> dict[str, list[RunSummary]]:
    """Continuous and static batching on the same mixed-length workload, interleaved."""
    items = synthetic_workload(
        MIXED_REQUESTS,
        prompt_len=16,
        max_tokens=256,
        vocab_size=model.vocab_size,
        seed=1,
        mixed=True,
        long_fraction=0.04,
    )
    results: dict[str, list[RunSummary]] = {"continuous": [], "static": []}
    for _ in range(repeats):
        for mode in ("continuous", "static"):
            engine = LLMEngine(
                model,
                EngineConfig(
                    num_blocks=4096, max_num_seqs=64, max_num_batched_tokens=1024, scheduling=mode
                ),  # type: ignore[arg-type]
            )
            results[mode].append(run_offline(engine, items))
    return results


def tight_cache(model: ModelConfig) -> dict[str, RunSummary]:
    """200 requests on a pool that holds about four full-length sequences."""
    items = synthetic_workload(
        200, prompt_len=32, max_tokens=48, vocab_size=model.vocab_size, seed=2
    )
    longest = max(len(i.prompt) + i.max_tokens for i in items)
    blocks = 4 * -(-longest // 16)
    out: dict[str, RunSummary] = {}
    for policy in ("recompute", "restart"):
        engine = LLMEngine(
            model,
            EngineConfig(
                num_blocks=blocks, max_num_seqs=64, max_num_batched_tokens=512, preemption=policy
            ),  # type: ignore[arg-type]
        )
        out[policy] = run_offline(engine, items, max_steps=20000)
    _print(
        f"tight cache: {len(items)} requests, longest {longest} tokens, pool {blocks} blocks x 16"
    )
    return out


def _table(rows: Sequence[tuple[int, float, float, float]], bw: float) -> None:
    _print(
        "\n| batch | step ms (median) | decode tok/s | bytes read/step (MB) | achieved GB/s | of copy bw |"
    )
    _print("|---:|---:|---:|---:|---:|---:|")
    for batch, step_s, tps, nbytes in rows:
        achieved = nbytes / step_s
        _print(
            f"| {batch} | {step_s * 1e3:.2f} | {tps:,.0f} | {nbytes / 1e6:.1f} | "
            f"{achieved / 1e9:.2f} | {achieved / bw:.0%} |"
        )


def _print(*args: object) -> None:
    print(*args, flush=True)


def main() -> None:
    threads = int(os.environ.get("FLEETWATCH_ENGINE_THREADS", "1"))
    torch.set_num_threads(threads)
    model = ModelConfig()
    _print(
        f"model: {model.num_params / 1e6:.2f} M params (float32), {model.num_layers} layers, hidden "
        f"{model.hidden_size}, {model.num_heads} heads / {model.num_kv_heads} kv heads, vocab "
        f"{model.vocab_size}; torch {torch.__version__}, {threads} threads"
    )
    sweep, bw = decode_sweep(model)
    _print(
        f"\ncopy bandwidth (copy_ of 256 MiB, read+write bytes, median of {DECODE_STEPS}): {bw / 1e9:.1f} GB/s"
    )
    _table(sweep, bw)
    wide = ModelConfig(
        hidden_size=1024,
        intermediate_size=2816,
        num_layers=4,
        num_heads=16,
        num_kv_heads=4,
        vocab_size=8192,
    )
    wide_rows, wide_bw = decode_sweep(wide, batches=(1, 8, 32), prompt_len=8, rounds=10)
    _print(
        f"\nlarger than the 32 MiB L3: {wide.num_params / 1e6:.0f} M params "
        f"({wide.num_params * 4 / 2**20:.0f} MiB), hidden {wide.hidden_size}; copy bandwidth in "
        f"the same rounds {wide_bw / 1e9:.1f} GB/s"
    )
    _table(wide_rows, wide_bw)

    comp = batching_comparison(model)
    cont, stat = comp["continuous"], comp["static"]
    c_tps = statistics.median([r.output_tokens_per_s for r in cont])
    s_tps = statistics.median([r.output_tokens_per_s for r in stat])
    _print(
        f"\nmixed workload: {MIXED_REQUESTS} requests, prompts 8-24 tokens, 96% ask 16 tokens, 4% ask 256; "
        "at most 64 running; static keeps finished members as padding until the batch ends"
    )
    _print("| scheduling | output tok/s | steps | TTFT p50 s | TTFT p99 s | elapsed s |")
    _print("|---|---:|---:|---:|---:|---:|")
    for name, runs in (("continuous", cont), ("static", stat)):
        _print(
            f"| {name} | {statistics.median([r.output_tokens_per_s for r in runs]):,.0f} | {runs[0].steps} | "
            f"{statistics.median([r.ttft_p50_s for r in runs]):.2f} | {statistics.median([r.ttft_p99_s for r in runs]):.2f} | "
            f"{statistics.median([r.elapsed_s for r in runs]):.2f} |"
        )
    _print(
        f"continuous / static throughput: {c_tps / s_tps:.1f}x (medians of {len(cont)} interleaved runs each)"
    )

    tight = tight_cache(model)
    _print(
        "| preemption | completed | preemptions | tokens computed | steps | elapsed s | output tok/s |"
    )
    _print("|---|---:|---:|---:|---:|---:|---:|")
    for policy in ("recompute", "restart"):
        r = tight[policy]
        _print(
            f"| {policy} | {r.completed}/{r.requests} | {r.preemptions} | {r.computed_tokens:,} | {r.steps} | "
            f"{r.elapsed_s:.2f} | {r.output_tokens_per_s:,.0f} |"
        )


if __name__ == "__main__":
    main()
