"""Command line for this package; composed into `fleetwatch` by the front door."""

from __future__ import annotations

import typer

app = typer.Typer(
    help="Resilience: circuit breaker, retry budget, micro-batcher, retry-storm simulator.",
    no_args_is_help=True,
)
