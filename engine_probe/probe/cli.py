"""Command line for this package; composed into `fleetwatch` by the front door."""

from __future__ import annotations

import typer

app = typer.Typer(
    help="Load-test an OpenAI-compatible endpoint; compute the bandwidth bound.",
    no_args_is_help=True,
)
