"""Command line for this package; composed into `fleetwatch` by the front door."""

from __future__ import annotations

import typer

app = typer.Typer(
    help="Grafana dashboards generated from the metric profiles.", no_args_is_help=True
)
