"""`fleetwatch records …`: check and summarise request-record files."""

from __future__ import annotations

import json
from pathlib import Path

import typer

app = typer.Typer(
    help="Request records: the shared format of finished requests.", no_args_is_help=True
)


@app.command("validate")
def validate(
    file: Path = typer.Argument(..., help="A .jsonl or .parquet record file."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    allow_empty: bool = typer.Option(
        False, "--allow-empty", help="Accept a file with no records (refused by default)."
    ),
) -> None:
    """Check a record file and print a summary: rows, time span, replicas, status counts.

    A file without a single record is an error unless ``--allow-empty``."""
    from fleetwatch.core.records.schema import RecordError
    from fleetwatch.records.io import read_records

    df = read_records(file)
    if len(df) == 0 and not allow_empty:
        raise RecordError("no records (an empty file; --allow-empty accepts it)", path=str(file))
    span = float(df["finished_s"].max() - df["arrival_s"].min()) if len(df) else 0.0
    replicas: list[str] = sorted(df["replica"].dropna().unique().tolist())
    counts = df["status"].value_counts()
    status: dict[str, int] = {str(k): int(v) for k, v in sorted(counts.items()) if v}
    summary = {
        "file": str(file),
        "rows": len(df),
        "span_s": round(span, 3),
        "replicas": replicas,
        "status": status,
    }
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    typer.echo(f"{file}: ok")
    typer.echo(f"  rows      {len(df)}")
    typer.echo(f"  span      {span:.3f} s")
    typer.echo(f"  replicas  {len(replicas)}: {', '.join(replicas)}")
    typer.echo("  status    " + ", ".join(f"{k}={v}" for k, v in status.items()))
