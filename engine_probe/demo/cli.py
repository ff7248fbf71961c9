"""`fleetwatch demo`: the whole toolkit on a built-in reference fleet."""

from __future__ import annotations

from pathlib import Path

import typer


def demo(
    out: Path = typer.Option(Path("demo-out"), "--out", "-o", help="Output folder."),
) -> None:
    """Run a four-replica reference fleet and report what fleetwatch finds."""
    typer.echo(f"demo: nothing to run yet (output folder {out})")
