"""`fleetwatch telemetry …`: the serving package's commands (GPU counters).

They live with the command, not in ``fleetwatch.telemetry``: the serving distribution installs no
typer, and nothing a serving process imports pulls in a command line.
"""

from __future__ import annotations

import json
from typing import Any

import typer

__all__ = ["app", "render_snapshot"]

app = typer.Typer(help="Telemetry: GPU counters and instrumentation helpers.", no_args_is_help=True)


@app.callback()
def _telemetry() -> None:
    """Telemetry: GPU counters and instrumentation helpers."""


@app.command("gpu")
def gpu(
    once: bool = typer.Option(False, "--once", help="Print one sample and exit."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per sample."),
    interval: float = typer.Option(1.0, "--interval", min=0.05, help="Seconds between samples."),
    count: int = typer.Option(0, "--count", min=0, help="Stop after N samples (0: until Ctrl-C)."),
) -> None:
    """Print live GPU counters from NVML (GPM on Hopper+), or 'unavailable: <reason>'.

    Exit status 1 when NVML cannot be used on this machine. Only the driver is read: there is
    no replayed or made-up reading to fall back on.
    """
    import time

    from fleetwatch.telemetry.gpu.sampler import GpuSampler

    sampler = GpuSampler(interval_s=interval)
    n = 1 if once else count
    taken = 0
    try:
        while True:
            snap = sampler.sample_once()
            if taken == 0 and any(d.gpm_reason == "warming_up" for d in snap.devices):
                time.sleep(min(interval, 0.5))  # GPM needs two samples to report an interval
                snap = sampler.sample_once()
            if not snap.available:
                if as_json:
                    typer.echo(
                        json.dumps(
                            {"available": False, "reason": snap.reason, "detail": snap.detail}
                        )
                    )
                else:
                    typer.echo(f"unavailable: {snap.reason} ({snap.detail})")
                raise typer.Exit(1)
            typer.echo(render_snapshot(snap, as_json=as_json))
            taken += 1
            if n and taken >= n:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return
    finally:
        sampler.stop()


def render_snapshot(snap: Any, *, as_json: bool) -> str:
    """One ``GpuSnapshot`` of an available GPU as the command prints it: text, or one JSON
    object."""
    from dataclasses import asdict

    from fleetwatch.telemetry.gpu.nvml import CLOCK_EVENT_REASONS

    rows = []
    for d in snap.devices:
        row = asdict(d)
        bits = d.clock_event_reasons
        row["clock_event_reasons"] = (
            None if bits is None else [r for r, b in CLOCK_EVENT_REASONS.items() if bits & b]
        )
        rows.append(row)
    if as_json:
        return json.dumps({"available": True, "devices": rows, "errors": dict(snap.errors)})

    def fmt(v: Any, scale: float = 1.0, unit: str = "", digits: int = 1) -> str:
        return "-" if v is None else f"{v * scale:.{digits}f}{unit}"

    lines = []
    for d, row in zip(snap.devices, rows, strict=True):
        lines.append(
            f"gpu {d.index} {d.name} {d.uuid}\n"
            f"  sm_active {fmt(d.sm_active, 100, '%')}  sm_occupancy {fmt(d.sm_occupancy, 100, '%')}"
            f"  tensor {fmt(d.tensor_active, 100, '%')}  dram_bw {fmt(d.dram_active, 100, '%')}"
            f"  (gpm: {d.gpm_reason or 'ok'})\n"
            f"  utilization.gpu {fmt(d.utilization, 100, '%')} (time any kernel ran; misleading)\n"
            f"  sm_clock {fmt(d.sm_clock_hz, 1e-6, ' MHz', 0)} / {fmt(d.sm_clock_max_hz, 1e-6, ' MHz', 0)}"
            f"  mem_clock {fmt(d.mem_clock_hz, 1e-6, ' MHz', 0)} / {fmt(d.mem_clock_max_hz, 1e-6, ' MHz', 0)}\n"
            f"  clock events {','.join(row['clock_event_reasons'] or []) or 'none'}\n"
            f"  power {fmt(d.power_w, 1, ' W')}  energy {fmt(d.energy_j, 1e-3, ' kJ')}"
            f"  temp {fmt(d.temperature_c, 1, ' C', 0)}"
            f"  memory {fmt(d.memory_used_bytes, 2**-30, ' GiB')} / {fmt(d.memory_total_bytes, 2**-30, ' GiB')}\n"
            f"  ecc corrected {fmt(d.ecc_corrected, 1, '', 0)} uncorrected {fmt(d.ecc_uncorrected, 1, '', 0)}"
            f"  remapped rows {d.remapped_rows if d.remapped_rows is not None else '-'}"
        )
    return "\n".join(lines)
