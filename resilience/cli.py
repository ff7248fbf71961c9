"""Command line for this package; composed into `fleetwatch` by the front door."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from fleetwatch.resilience.storm import StormRow

app = typer.Typer(
    help="Resilience: circuit breaker, retry budget, micro-batcher, retry-storm simulator.",
    no_args_is_help=True,
)


@app.callback()
def _group() -> None:
    """Resilience: circuit breaker, retry budget, micro-batcher, retry-storm simulator."""


@app.command("storm")
def storm(
    clients: int = typer.Option(1000, help="Simulated clients, one request per --interval-s each."),
    outage_s: float = typer.Option(
        10.0, "--outage-s", help="Seconds the backend fails every call."
    ),
    outage_start_s: float = typer.Option(
        10.0, "--outage-start-s", help="When the outage starts (s)."
    ),
    duration_s: float = typer.Option(
        60.0, "--duration-s", help="Seconds during which clients send new requests."
    ),
    interval_s: float = typer.Option(
        1.0, "--interval-s", help="Seconds between one client's requests."
    ),
    latency_s: float = typer.Option(
        2.0, "--latency-s", help="Seconds a served request holds a backend slot."
    ),
    capacity_ratio: float = typer.Option(
        1.25, help="Backend slots as a multiple of what the base load needs."
    ),
    max_attempts: int = typer.Option(5, help="Attempt cap per request (first attempt included)."),
    base_s: float = typer.Option(0.5, "--base-s", help="Backoff base (s)."),
    cap_s: float = typer.Option(8.0, "--cap-s", help="Backoff cap (s)."),
    budget_ratio: float = typer.Option(0.1, help="Retry budget: retries allowed per request."),
    budget_min_retries_per_s: float = typer.Option(10.0, help="Retry budget reserve (retries/s)."),
    seed: int = typer.Option(0, help="Random seed; the same seed gives the same table."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Compare no / full / decorrelated jitter, each without and with a retry budget, on a simulated clock."""
    from fleetwatch.resilience.storm import StormConfig, simulate_storm

    config = StormConfig(
        clients=clients,
        outage_s=outage_s,
        outage_start_s=outage_start_s,
        duration_s=duration_s,
        interval_s=interval_s,
        latency_s=latency_s,
        capacity_ratio=capacity_ratio,
        max_attempts=max_attempts,
        base_s=base_s,
        cap_s=cap_s,
        budget_ratio=budget_ratio,
        budget_min_retries_per_s=budget_min_retries_per_s,
        seed=seed,
    )
    result = simulate_storm(config)
    if as_json:
        typer.echo(json.dumps(result.as_dict(), indent=2, sort_keys=True))
        return
    typer.echo(
        f"{clients} clients, backend down {outage_s:g} s from t={outage_start_s:g} s, "
        f"{max_attempts} attempts, base {base_s:g} s, cap {cap_s:g} s, seed {seed}"
    )
    typer.echo(format_table(result.rows))


def format_table(rows: Sequence[StormRow]) -> str:
    """The storm table as Markdown (also used by the benchmark)."""
    lines = [
        "| jitter | budget | peak arrivals/s | amplification | drain after recovery (s) | gave up |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.jitter.value} | {'yes' if row.budget else 'no'} | {row.peak_arrivals_per_s:,.0f} | "
            f"{row.amplification:.2f}x | {row.drain_s:.2f} | {row.gave_up:,} |"
        )
    return "\n".join(lines)
