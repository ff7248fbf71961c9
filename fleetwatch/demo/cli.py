"""`fleetwatch demo`: the whole toolkit on a built-in reference fleet."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path
from typing import NoReturn

import typer

__all__ = ["demo"]


def _fail(message: str) -> NoReturn:
    typer.echo(f"fleetwatch: error: {message}", err=True)
    raise typer.Exit(2)


def demo(
    out: Path = typer.Option(Path("demo-out"), "--out", "-o", help="Output folder."),
    prometheus: bool = typer.Option(
        False,
        "--prometheus",
        help="Also run a real Prometheus on loopback that scrapes the replicas every second and "
        "evaluates the generated rules; report what it fired.",
    ),
    duration: float = typer.Option(
        60.0, "--duration", min=10.0, help="Seconds of open-loop traffic (at least 10)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the traffic and the injected faults."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display."),
) -> None:
    """Run a four-replica reference fleet with a slowed replica, a long-prompt replica and an
    error burst; report what fleetwatch finds and write rules, dashboards, traces, records and
    report.html to the output folder."""
    from fleetwatch.core.preflight import output_dir
    from fleetwatch.demo.progress import RichProgress, SilentProgress
    from fleetwatch.demo.prometheus import PrometheusError
    from fleetwatch.demo.run import run_demo
    from fleetwatch.demo.scenario import DemoConfig
    from fleetwatch.engine_probe.engine.preflight import require_torch

    output_dir(out)
    require_torch()
    config = DemoConfig(duration_s=duration, seed=seed)
    if prometheus and shutil.which("prometheus") is None:
        _fail("demo --prometheus: prometheus not found on PATH (apt-get install prometheus)")
    t0 = time.monotonic()
    try:
        if quiet or not sys.stdout.isatty():
            result = run_demo(out, config, prometheus=prometheus, progress=SilentProgress())
        else:
            with RichProgress() as bar:
                result = run_demo(out, config, prometheus=prometheus, progress=bar)
    except PrometheusError as exc:
        _fail(f"demo --prometheus: {exc}")
    except OSError as exc:
        _fail(f"demo: cannot write to {out}: {exc.strerror or exc}")
    for line in result.lines:
        typer.echo(line)
    typer.echo(f"  done in {time.monotonic() - t0:.0f} s")
