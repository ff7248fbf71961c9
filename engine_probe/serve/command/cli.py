"""``fleetwatch engine serve``: the reference engine behind the OpenAI-compatible HTTP server.

``engine_probe/cli.py`` mounts ``serve`` as the engine's sub-command (``app.command("serve")(serve)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, cast

import typer

__all__ = ["serve"]


def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (loopback by default)."),
    port: int = typer.Option(8000, "--port", help="TCP port (0: any free port)."),
    model_config: Path | None = typer.Option(
        None, "--model-config", help="Hugging Face config.json (shape only; weights stay random)."
    ),
    model_name: str = typer.Option(
        "reference", "--model-name", help="Name clients send as 'model'."
    ),
    replica: str = typer.Option(
        "replica-0", "--replica", help="Replica label on metrics and spans."
    ),
    replicas: int = typer.Option(
        1,
        "--replicas",
        help="Engines to serve, one per port from --port up (labels <replica>-<i>).",
    ),
    num_blocks: int = typer.Option(2048, "--num-blocks", help="KV blocks."),
    max_num_seqs: int = typer.Option(64, "--max-num-seqs", help="Most sequences running at once."),
    max_queue: int = typer.Option(
        256, "--max-queue", help="Requests waiting for a first token before answering 429."
    ),
    max_lag: int = typer.Option(
        512, "--max-lag", help="Outputs a streaming reader may lag before it is dropped."
    ),
    max_tokens_cap: int | None = typer.Option(None, "--max-tokens-cap", help="Largest max_tokens."),
    drain_timeout: float = typer.Option(30.0, "--drain-timeout", help="Seconds to drain on stop."),
    telemetry_timeout: float = typer.Option(
        3.0,
        "--telemetry-timeout",
        help="Seconds to write the last records and export the last spans on stop (a collector "
        "that does not answer is given up on).",
    ),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda."),
    dtype: str = typer.Option("float32", "--dtype", help="float32 | bfloat16."),
    records: Path | None = typer.Option(
        None, "--records", help="Write each finished request's record into this folder (JSONL)."
    ),
    records_format: str = typer.Option("jsonl", "--records-format", help="jsonl | parquet."),
    records_max_records: int = typer.Option(
        100_000, "--records-max-records", help="Records per file at most."
    ),
    records_flush_interval: float = typer.Option(
        2.0,
        "--records-flush-interval",
        help="Seconds a finished request's record may wait before its file is written: a kill "
        "loses at most the records of this interval + 1 s (SIGINT/SIGTERM lose none).",
    ),
    span_file: Path | None = typer.Option(
        None, "--span-file", help="Write spans as JSON lines here (OTEL_* variables also work)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the random weights."),
    max_connections: int = typer.Option(
        1024,
        "--max-connections",
        help="Open connections at most (lowered to the file limit less 256); beyond: the oldest "
        "connection without a request head is replaced, else 503 at once.",
    ),
    header_timeout: float = typer.Option(
        10.0, "--header-timeout", help="Seconds from accept to a complete request head (408)."
    ),
    body_timeout: float = typer.Option(
        30.0, "--body-timeout", help="Seconds from a request head to its complete body (408)."
    ),
    keepalive_timeout: float = typer.Option(
        15.0, "--keepalive-timeout", help="Seconds an idle keep-alive connection stays open."
    ),
    idempotency_max_bytes: int = typer.Option(
        64 << 20,
        "--idempotency-max-bytes",
        help="Bytes of responses kept for Idempotency-Key replays (oldest dropped beyond).",
    ),
    traffic_class: str = typer.Option(
        "default",
        "--traffic-class",
        help="Traffic class of requests without an X-Fleetwatch-Traffic-Class header.",
    ),
    tenant_limits_on: bool = typer.Option(
        False,
        "--tenant-limits",
        help="Per-tenant token limits and fair queueing; the tenant is the X-Fleetwatch-Tenant "
        "header (absent: 'default'). Off by default.",
    ),
    tenant_rate: float | None = typer.Option(
        None, "--tenant-rate", help="Cost units (weighted tokens) per second per tenant [2000]."
    ),
    tenant_burst: float | None = typer.Option(
        None,
        "--tenant-burst",
        help="Cost units a tenant may use at once [16000]; a request reserving more gets 400.",
    ),
    tenant_prompt_weight: float | None = typer.Option(
        None, "--tenant-prompt-weight", help="Cost units per prompt token [1]."
    ),
    tenant_output_weight: float | None = typer.Option(
        None,
        "--tenant-output-weight",
        help="Cost units per output token (max_tokens reserved) [1].",
    ),
    tenant_weight: list[str] = typer.Option(
        [],
        "--tenant-weight",
        help="NAME=WEIGHT: a tenant's fair-queue weight (others 1); repeatable.",
    ),
    tenant_limit: list[str] = typer.Option(
        [],
        "--tenant-limit",
        help="NAME=RATE[:BURST]: one tenant's own rate and burst (burst default --tenant-burst); "
        "repeatable.",
    ),
    max_tenants: int | None = typer.Option(
        None,
        "--max-tenants",
        help="Distinct tenants with their own bucket and label [64]; the rest share 'other'.",
    ),
    models: list[str] = typer.Option(
        [],
        "--model",
        help="Serve several models: NAME=CONFIG (a config.json, or 'default'), repeated; the "
        "request's 'model' picks one, loaded on first use within --model-cache-bytes.",
    ),
    model_cache_bytes: int | None = typer.Option(
        None,
        "--model-cache-bytes",
        help="Bytes the --model models may take at once (default: all of them); beyond, the "
        "least valuable idle model (GreedyDual-Size) is unloaded.",
    ),
    goodput: str | None = typer.Option(
        None,
        "--goodput",
        help="Goodput target TTFT,TPOT in seconds (e.g. 0.5,0.05): exports "
        "fleetwatch_goodput_requests_total, counted against it. Off by default.",
    ),
) -> None:
    """Serve the reference engine: /v1/chat/completions, /v1/completions (SSE or JSON), /v1/models,
    /metrics, /health. Ctrl-C (or SIGTERM, SIGHUP) drains, writes the remaining records and stops."""
    import asyncio
    from dataclasses import replace

    from fleetwatch.core.deadline import run_bounded
    from fleetwatch.engine_probe.engine import (
        EngineConfig,
        EngineConfigError,
        LLMEngine,
        ModelConfig,
    )
    from fleetwatch.engine_probe.engine.startup import StartupTimer, startup_line
    from fleetwatch.engine_probe.serve.command.telemetry_options import (
        goodput_target,
        telemetry_options,
    )
    from fleetwatch.engine_probe.serve.command.tenant_options import tenant_limits
    from fleetwatch.engine_probe.serve.front.config import ServerConfig
    from fleetwatch.engine_probe.serve.front.limits import ConnectionLimits, raise_file_limit
    from fleetwatch.engine_probe.serve.lifecycle import start_server, until_signalled

    if not 0 <= port <= 65535:
        raise EngineConfigError(f"--port must be 0..65535, got {port}")
    if not 1 <= replicas <= 64:
        raise EngineConfigError(f"--replicas must be 1..64, got {replicas}")
    if records_format not in ("jsonl", "parquet"):
        raise EngineConfigError(f"--records-format must be jsonl or parquet, got {records_format}")
    if records_max_records < 1:
        raise EngineConfigError("--records-max-records must be >= 1")
    if not records_flush_interval > 0:
        raise EngineConfigError("--records-flush-interval must be > 0")
    tenants = tenant_limits(
        tenant_limits_on,
        rate=tenant_rate,
        burst=tenant_burst,
        prompt_weight=tenant_prompt_weight,
        output_weight=tenant_output_weight,
        weights=tenant_weight,
        overrides=tenant_limit,
        max_tenants=max_tenants,
    )
    try:
        connections = ConnectionLimits(
            max_connections=max_connections,
            header_timeout_s=header_timeout,
            body_timeout_s=body_timeout,
            keepalive_timeout_s=keepalive_timeout,
        )
        config = ServerConfig(
            max_queue=max_queue,
            max_lag=max_lag,
            drain_timeout_s=drain_timeout,
            telemetry_timeout_s=telemetry_timeout,
            max_tokens_cap=max_tokens_cap,
            idempotency_max_bytes=idempotency_max_bytes,
            connections=connections,
            traffic_class=traffic_class,
            tenants=tenants,
        )
    except ValueError as exc:
        raise EngineConfigError(_flag_message(str(exc))) from None
    mcfg = (
        ModelConfig.from_hf_config(model_config, seed=seed)
        if model_config is not None
        else ModelConfig(seed=seed)
    )

    def engine_config(i: int) -> EngineConfig:
        return EngineConfig(
            num_blocks=num_blocks,
            max_num_seqs=max_num_seqs,
            replica=replica if replicas == 1 else f"{replica}-{i}",
            model_name=model_name,
            device=cast(Literal["auto", "cpu", "cuda"], device),
            dtype=cast(Literal["float32", "bfloat16", "float64"], dtype),
            seed=seed,
        )

    from fleetwatch.engine_probe.serve.command.preflight import check_serve

    # validate everything before anything starts
    check_serve(mcfg, engine_config(0), replicas=replicas, records=records, span_file=span_file)
    target = goodput_target(goodput)
    served = None
    if models:
        from fleetwatch.engine_probe.serve.command.multi import models_from_flags, serve_models

        if replicas != 1 or model_config is not None:
            raise EngineConfigError(
                "--model serves several models: without --replicas, --model-config"
            )
        served = models_from_flags(
            models, seed, lambda name: replace(engine_config(0), model_name=name)
        )
        for m in served:  # each model must fit its own KV cache and the host on its own
            check_serve(m.model, m.engine, replicas=1, records=records, span_file=span_file)
    elif model_cache_bytes is not None:
        raise EngineConfigError("--model-cache-bytes needs --model NAME=CONFIG (several models)")
    raise_file_limit()  # before the guard sizes --max-connections to it
    sink: Any = None
    if records is not None:
        from fleetwatch.telemetry.sink import RotatingRecordSink

        sink = RotatingRecordSink(
            records,
            fmt=cast(Literal["jsonl", "parquet"], records_format),
            max_records=records_max_records,
            max_age_s=records_flush_interval,
        )

    if served is not None:
        serve_models(
            served,
            model_cache_bytes,
            host=host,
            port=port,
            replica=replica,
            config=config,
            record_sink=sink,
            telemetry_options=lambda name: telemetry_options(
                replica, goodput=target, span_file=span_file, gpu=False
            ),
        )
        return

    async def main() -> None:
        handles = []
        for i in range(replicas):
            timer = StartupTimer()
            if i == 0:
                timer.since_process_start()
            # built off the loop: the replicas already started warm up meanwhile, their phase
            # times untouched by this build
            engine = await asyncio.to_thread(LLMEngine, mcfg, engine_config(i), startup=timer)
            options = telemetry_options(engine.replica, goodput=target, span_file=span_file)
            handle = await start_server(
                engine,
                host,
                port + i if port else 0,
                config=config,
                record_sink=sink,
                telemetry_options=options,
                startup=timer,
            )
            handles.append(handle)
        try:  # /health answers during the warm-up; "serving" is said once requests are taken
            for handle in handles:
                await handle.wait_ready()
        except Exception as exc:
            typer.echo(f"warm-up failed: {type(exc).__name__}: {exc}", err=True)
            await asyncio.gather(*(h.stop() for h in handles))
            raise typer.Exit(1) from None
        for handle in handles:
            typer.echo(f"serving {model_name} ({handle.engine.replica}) on {handle.url}")
        for handle in handles:
            typer.echo(f"{handle.engine.replica} {startup_line(handle.startup)}")
        typer.echo("Ctrl-C drains in-flight requests and stops")
        await until_signalled()
        typer.echo("draining in-flight requests ...")
        cut = sum(await asyncio.gather(*(h.stop() for h in handles)))
        if sink is not None:  # closed by each server's telemetry already; bounded all the same
            await asyncio.to_thread(run_bounded, sink.close, telemetry_timeout, "records")
        typer.echo(f"stopped ({cut} requests cut off by the drain timeout)")

    asyncio.run(main())


def _flag_message(message: str) -> str:
    """A config error in the flags' words: ``ConnectionLimits.body_timeout_s`` -> ``--body-timeout``."""
    for prefix in ("ServerConfig.", "ConnectionLimits."):
        message = message.replace(prefix, "--")
    return message.replace("_s must", " must").replace("_", "-")
