"""Command line for this package; composed into `fleetwatch` by the front door."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, cast

import typer

from fleetwatch.engine_probe.serve.command.cli import serve

app = typer.Typer(help="The reference engine: run it, serve it over HTTP.", no_args_is_help=True)
app.command("serve")(serve)

__all__ = ["app"]


@app.command("run")
def run(
    requests: int = typer.Option(64, "--requests", "-n", help="Requests in the workload."),
    prompt_len: int = typer.Option(128, "--prompt-len", help="Mean prompt length (tokens)."),
    max_tokens: int = typer.Option(
        64, "--max-tokens", help="Output tokens per request (the long ones when --mixed)."
    ),
    mixed: bool = typer.Option(False, "--mixed", help="85% short (max/16) and 15% long outputs."),
    shared_prefix: int = typer.Option(
        0, "--shared-prefix", help="Tokens of a prefix shared by every prompt."
    ),
    num_blocks: int = typer.Option(
        2048, "--num-blocks", help="KV blocks (16 tokens each by default)."
    ),
    block_size: int = typer.Option(16, "--block-size", help="Tokens per KV block."),
    max_num_seqs: int = typer.Option(64, "--max-num-seqs", help="Most sequences running at once."),
    max_batched_tokens: int = typer.Option(
        512, "--max-batched-tokens", help="Token budget per step."
    ),
    scheduling: str = typer.Option("continuous", "--scheduling", help="continuous | static."),
    preemption: str = typer.Option("recompute", "--preemption", help="recompute | restart."),
    no_prefix_cache: bool = typer.Option(
        False, "--no-prefix-cache", help="Disable prefix caching."
    ),
    no_chunked_prefill: bool = typer.Option(
        False, "--no-chunked-prefill", help="Disable chunked prefill."
    ),
    model_config: Path | None = typer.Option(
        None, "--model-config", help="Hugging Face config.json (shape only; weights stay random)."
    ),
    dtype: str = typer.Option("float32", "--dtype", help="float32 | bfloat16."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda."),
    threads: int | None = typer.Option(
        None, "--threads", help="torch CPU threads (default: $FLEETWATCH_ENGINE_THREADS, else 1)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of weights and workload."),
) -> None:
    """Run the engine on a synthetic workload and print throughput, TTFT and cache behaviour."""
    from fleetwatch.engine_probe.engine import (
        EngineConfig,
        EngineConfigError,
        LLMEngine,
        ModelConfig,
    )
    from fleetwatch.engine_probe.engine.preflight import (
        check_fits_memory,
        check_holds_request,
        require_torch,
    )
    from fleetwatch.engine_probe.engine.workload import run_offline, synthetic_workload

    for name, value in (
        ("--requests", requests),
        ("--prompt-len", prompt_len),
        ("--max-tokens", max_tokens),
    ):
        if value < 1:
            raise EngineConfigError(f"{name} must be >= 1, got {value}")
    if shared_prefix < 0:
        raise EngineConfigError(f"--shared-prefix must be >= 0, got {shared_prefix}")
    mcfg = (
        ModelConfig.from_hf_config(model_config, seed=seed)
        if model_config is not None
        else ModelConfig(seed=seed)
    )
    ecfg = EngineConfig(
        block_size=block_size,
        num_blocks=num_blocks,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_batched_tokens,
        enable_prefix_caching=not no_prefix_cache,
        enable_chunked_prefill=not no_chunked_prefill,
        scheduling=cast(Literal["continuous", "static"], scheduling),
        preemption=cast(Literal["recompute", "restart"], preemption),
        dtype=cast(Literal["float32", "bfloat16", "float64"], dtype),
        device=cast(Literal["auto", "cpu", "cuda"], device),
        num_threads=threads,
        seed=seed,
    )
    longest_prompt = shared_prefix + max(1, prompt_len * 3 // 2)
    check_holds_request(
        mcfg,
        ecfg,
        longest_prompt + max_tokens,
        f"the longest request of this workload ({longest_prompt} prompt + {max_tokens} output)",
    )
    require_torch()
    check_fits_memory(mcfg, ecfg)
    engine = LLMEngine(mcfg, ecfg)
    items = synthetic_workload(
        requests,
        prompt_len=prompt_len,
        max_tokens=max_tokens,
        vocab_size=mcfg.vocab_size,
        seed=seed,
        mixed=mixed,
        shared_prefix=shared_prefix,
    )
    s = run_offline(engine, items)
    typer.echo(
        f"model: {mcfg.num_params / 1e6:.1f} M params, {mcfg.num_layers} layers, hidden {mcfg.hidden_size}, "
        f"{ecfg.dtype} on {engine.device}; KV {ecfg.num_blocks} x {ecfg.block_size} tokens; {ecfg.scheduling}"
    )
    typer.echo(
        f"requests:        {s.completed}/{s.requests} completed in {s.elapsed_s:.2f} s, {s.steps} steps"
    )
    typer.echo(f"output tokens/s: {s.output_tokens_per_s:,.0f}  ({s.output_tokens} tokens)")
    typer.echo(f"computed tok/s:  {s.computed_tokens / s.elapsed_s if s.elapsed_s else 0:,.0f}")
    typer.echo(f"TTFT p50/p99:    {s.ttft_p50_s * 1e3:.1f} / {s.ttft_p99_s * 1e3:.1f} ms")
    typer.echo(f"mean step:       {s.mean_step_s * 1e3:.2f} ms")
    typer.echo(f"preemptions:     {s.preemptions}")
    typer.echo(f"prefix hits:     {s.prefix_cache_hit_tokens} tokens")
    if s.completed < s.requests:
        raise EngineConfigError(
            f"only {s.completed} of {s.requests} requests completed in {s.steps} steps"
        )
