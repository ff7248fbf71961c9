"""Command line for this package; composed into `fleetwatch` by the front door."""

from __future__ import annotations

import typer

app = typer.Typer(
    help="Fleet diagnosis: slow replicas, p99 tails, run comparison.", no_args_is_help=True
)
