"""Command line for this package; composed into `fleetwatch` by the front door."""

from __future__ import annotations

import typer

app = typer.Typer(
    help="SLOs: validate specs, generate Prometheus rules, report budgets, backtest alerts.",
    no_args_is_help=True,
)
