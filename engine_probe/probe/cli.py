"""Command line for this package; composed into `fleetwatch` by the front door.

``fleetwatch probe run``: load-test an OpenAI-compatible endpoint (or the in-process reference
engine) on its chat API (``--api chat``, the default) or its completions API. ``fleetwatch probe bound``: the bandwidth bound of a model on a GPU. ``fleetwatch probe fingerprint``:
whether a model's replicas give the same answers to the same prompts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

from fleetwatch.engine_probe.probe.errors import ProbeError


class _RunByDefault(TyperGroup):
    """``fleetwatch probe URL …`` and ``fleetwatch probe --engine reference …`` mean
    ``fleetwatch probe run …``: anything that is not a sub-command or help goes to ``run``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return list(super().parse_args(ctx, args))


app = typer.Typer(
    cls=_RunByDefault,
    help="Load-test an OpenAI-compatible endpoint (`probe URL` = `probe run URL`); compute the "
    "bandwidth bound; fingerprint replicas.",
    no_args_is_help=True,
)

__all__ = ["app"]


def _numbers(text: str | None, what: str) -> tuple[float, ...]:
    if text is None:
        return ()
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            out.append(float(part))
        except ValueError:
            raise ProbeError(f"{what}: {part!r} is not a number") from None
    return tuple(out)


@app.command("run")
def run(
    url: str | None = typer.Argument(None, help="Server root, e.g. http://127.0.0.1:8000."),
    engine: str | None = typer.Option(
        None,
        "--engine",
        help="'reference': serve the reference engine in this process and probe it.",
    ),
    concurrency: str | None = typer.Option(
        None, "--concurrency", "-c", help="Closed loop: comma-separated concurrencies, e.g. 1,4,16."
    ),
    rate: str | None = typer.Option(
        None, "--rate", "-r", help="Open loop: comma-separated request rates per second."
    ),
    arrivals: str = typer.Option("poisson", help="Open-loop arrivals: poisson, gamma or constant."),
    burstiness: float = typer.Option(1.0, help="Gamma shape: 1 is Poisson, <1 burstier."),
    max_concurrency: int | None = typer.Option(
        None,
        help="Open loop: cap on requests in flight (a client pool); late sends show in sched latency.",
    ),
    requests: int = typer.Option(100, "--requests", "-n", help="Requests per load level."),
    prompt_tokens: int = typer.Option(128, help="Prompt length in tokens (characters)."),
    max_tokens: int = typer.Option(64, help="Output tokens per request."),
    model: str | None = typer.Option(
        None, help="The 'model' field sent (default: the first model GET /v1/models lists)."
    ),
    api: str = typer.Option(
        "chat",
        "--api",
        help="chat (/v1/chat/completions, what users call) or completions (/v1/completions).",
    ),
    ttft: float = typer.Option(1.0, help="TTFT target, seconds (goodput, capacity)."),
    tpot: float = typer.Option(0.1, help="TPOT target, seconds."),
    ttft_from_send: bool = typer.Option(
        False, help="Judge TTFT from the actual send instead of the scheduled send."
    ),
    seed: int = typer.Option(0, help="Seed for prompts and arrivals."),
    timeout: float = typer.Option(600.0, help="Per-request timeout, seconds."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the summary as JSON."),
    csv_out: Path | None = typer.Option(None, "--csv", help="Write one CSV row per load level."),
    records_out: Path | None = typer.Option(
        None, "--records", help="Write every request as a record (.jsonl or .parquet)."
    ),
    gpu: str | None = typer.Option(
        None, help="Report throughput as a fraction of this GPU's bound."
    ),
    config: Path | None = typer.Option(
        None, "--config", help="The served model's config.json (its size, for the bound)."
    ),
    warmup: int = typer.Option(0, "--warmup", help="Uncounted requests sent first."),
    header: list[str] = typer.Option(
        [], "--header", "-H", help="Extra header 'Name: value' (repeatable), e.g. authorization."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    workers: int = typer.Option(
        0,
        "--workers",
        help="Client processes, each with its own event loop, sharing one schedule. "
        "0: one per 256 concurrent streams, at most one per CPU.",
    ),
    lag_fraction: float = typer.Option(
        0.1,
        "--lag-fraction",
        help="Mark a level client-bound when the probe's p99 event-loop lag exceeds this "
        "fraction of the ITL p50 (TPOT p50, else TTFT p50, when ITL p50 is 0)...",
    ),
    lag_limit_ms: float = typer.Option(
        1.0, "--lag-limit-ms", help="...or this many milliseconds, whichever is smaller."
    ),
) -> None:
    """Sweep load levels against an endpoint; print TTFT/TPOT/ITL percentiles, goodput, capacity.

    The probe measures its own event-loop lag and CPU at every level; where the lag could bend the
    latencies (p99 lag over --lag-fraction of ITL p50 or over --lag-limit-ms), the level's
    percentiles are marked client-bound (* in the table, client.verdict in --json).
    """
    import asyncio

    from fleetwatch.engine_probe.probe.checks import check_run_options, parse_headers
    from fleetwatch.engine_probe.probe.runner import ProbePlan
    from fleetwatch.engine_probe.probe.stats import SLOTargets

    check_run_options(
        url=url,
        engine=engine,
        outputs={"--json": json_out, "--csv": csv_out, "--records": records_out},
        timeout=timeout,
        ttft=ttft,
        tpot=tpot,
        burstiness=burstiness,
    )
    conc, rates = _numbers(concurrency, "--concurrency"), _numbers(rate, "--rate")
    if conc and rates:
        raise ProbeError("give --concurrency (closed loop) or --rate (open loop), not both")
    if arrivals not in ("poisson", "gamma", "constant"):
        raise ProbeError(f"--arrivals must be poisson, gamma or constant, got {arrivals!r}")
    headers = parse_headers(header)
    plan = ProbePlan(
        mode="closed" if not rates else arrivals,  # type: ignore[arg-type]
        levels=rates or conc or (1.0,),
        requests=requests,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        burstiness=burstiness,
        max_concurrency=max_concurrency,
        model=model,
        seed=seed,
        targets=SLOTargets(ttft, tpot, from_schedule=not ttft_from_send),
        timeout_s=timeout,
        warmup=warmup,
        headers=headers,
        api=api,
        workers=workers,
        lag_fraction=lag_fraction,
        lag_limit_s=lag_limit_ms / 1e3,
    )
    if engine is not None:
        from fleetwatch.engine_probe.probe.checks import check_reference_engine

        check_reference_engine(config, request_tokens=prompt_tokens + max_tokens)
    run_result = asyncio.run(_run(url, plan, gpu=gpu, config=config, progress=progress))

    from rich.console import Console

    from fleetwatch.engine_probe.probe.report import (
        render_table,
        write_csv,
        write_json,
        write_records_file,
    )

    Console().print(render_table(run_result))
    if json_out is not None:
        write_json(json_out, run_result)
    if csv_out is not None:
        write_csv(csv_out, run_result)
    if records_out is not None:
        write_records_file(records_out, run_result)
    _report_failures(run_result)


def _report_failures(run_result: Any) -> None:
    """Print the causes of failed requests; all failed is an error (exit 2) naming them."""
    from fleetwatch.engine_probe.probe.failures import failure_causes, failure_text

    failed, total, causes = failure_causes(run_result)
    if not failed:
        return
    if failed == total:
        raise ProbeError(f"all {total} requests failed: {failure_text(causes)}")
    typer.echo(f"{failed} of {total} requests failed:")
    for cause, n in causes[:5]:
        typer.echo(f"  {n:>6}  {cause}")


async def _run(
    url: str | None, plan: Any, *, gpu: str | None, config: Path | None, progress: bool
) -> Any:
    from contextlib import AsyncExitStack

    from fleetwatch.engine_probe.probe.runner import run_plan

    bound = None
    async with AsyncExitStack() as stack:
        shape = None
        if config is not None:
            from fleetwatch.core.model import load_shape

            shape = load_shape(config)
        if url is None:
            from fleetwatch.engine_probe.serve.inprocess import serve_reference

            url, model_config = await stack.enter_async_context(serve_reference(config))
            assert url is not None
            if shape is None:
                from fleetwatch.engine_probe.probe.bound import shape_from_model_config

                shape = shape_from_model_config(model_config)
        if gpu is not None:
            if shape is None:
                raise ProbeError("--gpu needs the model's size: give --config config.json")
            from fleetwatch.engine_probe.probe.bound import bound_at
            from fleetwatch.engine_probe.probe.gpus import get_gpu

            spec = get_gpu(gpu)
            context = plan.prompt_tokens + plan.max_tokens // 2
            the_shape = shape

            def bound(batch: float) -> float:
                b = max(1, round(batch))
                return bound_at(the_shape, spec, batch=b, context_tokens=context).tokens_per_s

        assert url is not None
        if not progress:
            return await run_plan(url, plan, bound_tokens_per_s=bound)
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        counts = {"ok": 0, "failed": 0}
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("ok {task.fields[ok]} failed {task.fields[failed]}"),
            TimeElapsedColumn(),
            transient=False,
        ) as bar:
            task_ids: list[Any] = []

            def on_level(level: float, n: int) -> None:
                counts.update(ok=0, failed=0)
                task_ids.append(bar.add_task(plan.level_label(level), total=n, ok=0, failed=0))

            def on_done(r: Any) -> None:
                counts["ok" if r.ok else "failed"] += 1
                bar.update(task_ids[-1], advance=1, ok=counts["ok"], failed=counts["failed"])

            return await run_plan(
                url, plan, on_done=on_done, on_level=on_level, bound_tokens_per_s=bound
            )


@app.command("bound")
def bound(
    config: Path = typer.Option(..., "--config", help="The model's config.json (or its folder)."),
    gpu: str = typer.Option("H100-SXM", help="GPU: H100-SXM, H200, B200, A100, L40S."),
    gpus: int | None = typer.Option(
        None,
        "--gpus",
        help="GPUs: --tp x --pp x --dp-attention (default: their product; given alone, one "
        "tensor-parallel group per stage and replica).",
    ),
    tp: int | None = typer.Option(
        None,
        "--tp",
        help="Tensor-parallel degree: must divide the attention heads (default: what --gpus "
        "leaves).",
    ),
    pp: int = typer.Option(
        1, "--pp", help="Pipeline-parallel stages, splitting the layers (vLLM's uneven split)."
    ),
    ep: int = typer.Option(
        1,
        "--ep",
        help="Expert-parallel groups holding whole routed experts: must divide a stage's GPUs.",
    ),
    dp_attention: int = typer.Option(
        1,
        "--dp-attention",
        help="Attention replicas (data-parallel attention), each with its own sequences and "
        "tensor parallel over --gpus / this; routed experts split over all GPUs.",
    ),
    context: int = typer.Option(4096, help="Tokens in each sequence's KV cache."),
    memory_fraction: float = typer.Option(0.9, help="Share of GPU memory for weights and KV."),
    batch: str = typer.Option("1,8,32,64,128,256", help="Batch sizes to show."),
    dtype: str | None = typer.Option(
        None,
        help="Weight dtype for every parameter, overriding the checkpoint's (default: as shipped, "
        "from torch_dtype and quantization_config, scales counted).",
    ),
    kv_dtype: str = typer.Option("bfloat16", help="KV-cache dtype."),
    price: float | None = typer.Option(None, help="Price per GPU-hour, US dollars."),
    utilisation: float = typer.Option(1.0, help="Share of time serving at this batch (0..1]."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the report as JSON."),
) -> None:
    """Weights, KV bytes per token, sequences that fit, decode step bound, tokens/s, cost."""
    from rich.console import Console
    from rich.table import Table

    from fleetwatch.core.atomic import atomic_write_text
    from fleetwatch.core.model import dtype_bytes, load_shape
    from fleetwatch.engine_probe.probe.bound import capacity_report
    from fleetwatch.engine_probe.probe.checks import check_bound_options
    from fleetwatch.engine_probe.probe.gpus import get_gpu

    check_bound_options(
        config=config, context=context, utilisation=utilisation, price=price, json_out=json_out
    )
    shape = load_shape(config)
    batches = tuple(int(b) for b in _numbers(batch, "--batch"))
    rep = capacity_report(
        shape,
        get_gpu(gpu),
        context_tokens=context,
        memory_fraction=memory_fraction,
        batches=batches,
        weight_bytes_per_param=None if dtype is None else dtype_bytes(dtype),
        kv_bytes=dtype_bytes(kv_dtype),
        num_gpus=gpus,
        price_per_gpu_hour=price,
        utilisation=utilisation,
        data_parallel_attention=dp_attention,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        expert_parallel=ep,
    )
    console = Console(highlight=False)
    active = (
        f" ({rep.active_params / 1e9:.2f} B active)"
        if rep.active_params < 0.9 * rep.total_params
        else ""
    )
    console.print(
        f"{rep.model} on {rep.num_gpus}x {rep.gpu}: {rep.total_params / 1e9:.2f} B params{active}, "
        f"weights {rep.weight_bytes / 1e9:.2f} GB, KV {rep.kv_bytes_per_token / 1024:.1f} KiB/token, "
        f"KV budget {rep.kv_budget_bytes / 1e9:.1f} GB -> {rep.max_concurrent_sequences} sequences "
        f"of {context} tokens; ridge {rep.ridge_flops_per_byte:.0f} FLOP/byte"
    )
    shipped = (
        f"as shipped: {rep.weight_format}"
        if rep.weights_as_shipped
        else f"at {dtype}: --dtype overrides the checkpoint's {rep.weight_format}"
    )
    console.print(f"  weights {shipped}")
    if rep.mtp_params:
        console.print(
            f"  MTP layers: {rep.mtp_params / 1e9:.1f} B params more, not counted: engines load "
            f"them only for speculative decoding"
        )
    cache = (
        f"  cache: {rep.kv_layout}; {rep.kv_bytes_per_token_per_gpu / 1024:.1f} KiB/token per GPU "
        f"at {context} tokens ({rep.split})"
    )
    if rep.sliding_saving > 0:
        cache += f"; sliding-window and chunked layers save {rep.sliding_saving:.0%} of the cache"
    console.print(cache)
    t = Table(title="decode bound")
    for c in ("batch", "step ms", "tokens/s", "FLOP/byte", "bound by", "$/M tokens"):
        t.add_column(c, justify="right")
    for p in rep.points:
        t.add_row(
            str(p.batch),
            f"{p.step_time_s * 1e3:.2f}",
            f"{p.tokens_per_s:,.0f}",
            f"{p.arithmetic_intensity:.1f}",
            p.bound_by,
            "-" if p.cost_per_million_tokens is None else f"{p.cost_per_million_tokens:.3f}",
        )
    console.print(t)
    console.print(f"a best case: the step times leave out {', '.join(rep.leaves_out)}")
    if json_out is not None:
        atomic_write_text(json_out, json.dumps(rep.to_dict(), indent=2) + "\n")


@app.command("fingerprint")
def fingerprint(
    urls: list[str] = typer.Argument(None, help="Replica roots, e.g. http://10.0.0.7:8000."),
    model: str | None = typer.Option(
        None, help="The 'model' field sent (default: the first model each replica lists)."
    ),
    prompts_file: Path | None = typer.Option(
        None, "--prompts", help="A prompt set (JSON; default: the shipped fingerprint-v1)."
    ),
    against: Path | None = typer.Option(
        None,
        "--against",
        help="Judge every replica against this earlier fingerprint (--json of a past run on the "
        "same prompt set) instead of the live majority.",
    ),
    logprob_tolerance: float = typer.Option(
        0.05,
        "--logprob-tolerance",
        help="Where the text agrees, a sampled token's logprob off the reference by more than "
        "this (nats) counts as a difference.",
    ),
    json_out: Path | None = typer.Option(
        None, "--json", help="Write the fingerprint as JSON (what --against reads)."
    ),
    meta: list[str] = typer.Option(
        [], "--meta", help="key=value recorded in --json, e.g. image=vllm:0.11 (repeatable)."
    ),
    header: list[str] = typer.Option(
        [], "--header", "-H", help="Extra header 'Name: value' (repeatable), e.g. authorization."
    ),
    timeout: float = typer.Option(120.0, help="Per-request timeout, seconds."),
    repeat: int = typer.Option(
        1,
        "--repeat",
        help="Ask the whole set this many times over: a replica's answer is the one most of its "
        "runs gave (a failed run is a failure, not an answer); where that is the reference, "
        "runs that answered otherwise are a near-tie token flipping from run to run, not held "
        "against it.",
    ),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Every differing prompt, not the first."
    ),
) -> None:
    """Ask every replica the same prompts (greedy, seeded, one at a time) and name the replicas
    whose answers differ from their model's majority: another chat template or tokenizer (prompt
    token counts), other weights or sampling defaults (text), other numerics (logprobs).

    Exit status: 0 every model's replicas agree; 3 a replica differs or failed, or a prompt has
    no majority answer; 2 bad input.
    """
    import asyncio
    import datetime

    from fleetwatch.core.atomic import atomic_write_text
    from fleetwatch.engine_probe.probe.checks import (
        check_fingerprint_options,
        parse_headers,
        parse_meta,
    )
    from fleetwatch.engine_probe.probe.fingerprint.collect import collect
    from fleetwatch.engine_probe.probe.fingerprint.judge import judge
    from fleetwatch.engine_probe.probe.fingerprint.prompts import load_prompt_set
    from fleetwatch.engine_probe.probe.fingerprint.report import load_reference, render, to_dict

    urls = list(urls or [])
    check_fingerprint_options(
        urls=urls,
        against=against,
        json_out=json_out,
        tolerance=logprob_tolerance,
        timeout=timeout,
        repeat=repeat,
    )
    headers, notes = dict(parse_headers(header)), parse_meta(meta)
    prompts = load_prompt_set(prompts_file)
    reference = None if against is None else load_reference(against, prompts)
    taken_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    prints = asyncio.run(
        collect(urls, prompts, model=model, headers=headers, timeout_s=timeout, repeat=repeat)
    )
    if all(p.error is not None for p in prints):
        raise ProbeError(f"no replica answered; {prints[0].url}: {prints[0].error}")
    if reference is not None:
        missing = sorted({p.model for p in prints if p.model and p.model not in reference})
        if missing:
            raise ProbeError(
                f"--against {against}: has no fingerprint of model {missing[0]!r} "
                f"(it has {', '.join(sorted(reference)) or 'none'})"
            )
    result = judge(
        prints,
        prompts,
        tolerance=logprob_tolerance,
        against=reference,
        against_name=str(against or ""),
    )
    for line in render(result, prompts, verbose=verbose):
        typer.echo(line)
    if json_out is not None:
        data = to_dict(prints, prompts, result, taken_at=taken_at, meta=notes)
        atomic_write_text(json_out, json.dumps(data, indent=2) + "\n")
    if not result.ok:
        raise typer.Exit(3)
