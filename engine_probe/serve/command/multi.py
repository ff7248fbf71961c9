"""``fleetwatch engine serve --model NAME=CONFIG ... --model-cache-bytes N``: the several-model
server from the command line (flags checked here, served by ``multi_lifecycle``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import typer

from fleetwatch.engine_probe.engine.config import EngineConfig, ModelConfig
from fleetwatch.engine_probe.engine.errors import EngineConfigError
from fleetwatch.engine_probe.serve.front.config import ServerConfig
from fleetwatch.engine_probe.serve.multi.server import ServedModel, parse_model_flag

__all__ = ["models_from_flags", "serve_models"]


def models_from_flags(
    flags: Sequence[str], seed: int, engine_config: Callable[[str], EngineConfig]
) -> list[ServedModel]:
    """``--model NAME=CONFIG`` flags as ``ServedModel``s (CONFIG: a Hugging Face config.json, or
    ``default`` for the built-in shape); ``EngineConfigError`` naming the flag when bad."""
    out: list[ServedModel] = []
    for flag in flags:
        try:
            name, source = parse_model_flag(flag)
        except ValueError as exc:
            raise EngineConfigError(str(exc)) from None
        if any(m.name == name for m in out):
            raise EngineConfigError(f"--model {name!r} is given twice")
        if source == "default":
            model = ModelConfig(seed=seed)
        else:
            model = ModelConfig.from_hf_config(source, seed=seed)
        out.append(ServedModel(name, model, engine_config(name)))
    if len(out) > 32:
        raise EngineConfigError(f"--model: at most 32 models, got {len(out)}")
    return out


def serve_models(
    models: Sequence[ServedModel],
    budget: int | None,
    *,
    host: str,
    port: int,
    replica: str,
    config: ServerConfig,
    record_sink: Any,
    telemetry_options: Callable[[str], dict[str, Any]],
) -> None:
    """Serve until SIGINT/SIGTERM/SIGHUP, then drain and unload every model."""
    from fleetwatch.engine_probe.serve.lifecycle import until_signalled
    from fleetwatch.engine_probe.serve.multi.lifecycle import start_multi_model_server
    from fleetwatch.engine_probe.serve.multi.server import MultiModelServer

    total = sum(m.size_bytes for m in models)
    budget = total if budget is None else budget
    if budget < 1:
        raise EngineConfigError(f"--model-cache-bytes must be >= 1, got {budget}")
    for m in models:
        if m.size_bytes > budget:
            typer.echo(
                f"note: model {m.name!r} needs {m.size_bytes} bytes, more than "
                f"--model-cache-bytes {budget}: its requests will be refused (503)",
                err=True,
            )

    async def main() -> None:
        server = MultiModelServer(
            models,
            budget,
            replica=replica,
            config=config,
            record_sink=record_sink,
            telemetry_options=telemetry_options,
        )
        from fleetwatch.telemetry.gpu import GpuSampler

        gpu = GpuSampler(labels={"replica": replica})  # one per process, as a replica has
        server.registry.register(gpu)
        gpu.start()
        handle = await start_multi_model_server(server, host, port)
        sizes = ", ".join(f"{m.name} {m.size_bytes / 2**20:.1f} MiB" for m in models)
        typer.echo(f"serving {len(models)} models ({sizes}) on {handle.url}")
        typer.echo(f"model cache: {budget / 2**20:.1f} MiB; models load on first request")
        await until_signalled()
        typer.echo("draining in-flight requests ...")
        await handle.stop()
        await asyncio.to_thread(gpu.stop)
        typer.echo("stopped")

    asyncio.run(main())
