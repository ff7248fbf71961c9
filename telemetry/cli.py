"""Command line for this package; composed into `fleetwatch` by the front door."""

from __future__ import annotations

import typer

app = typer.Typer(help="Telemetry: GPU counters and instrumentation helpers.", no_args_is_help=True)
