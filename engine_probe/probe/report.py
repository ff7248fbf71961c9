"""Writing and showing a probe run: JSON, CSV, request records, and a terminal table.

Every file goes through ``fleetwatch.core.atomic`` so an interrupted run leaves no half-written output.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fleetwatch.core.atomic import atomic_write_text
from fleetwatch.engine_probe.probe.clientload import ClientLoad
from fleetwatch.engine_probe.probe.runner import LevelResult, ProbeRun, to_records
from fleetwatch.engine_probe.probe.stats import RunSummary

__all__ = ["render_table", "run_to_dict", "write_csv", "write_json", "write_records_file"]


def _clean(value: Any) -> Any:
    """NaN and inf are not JSON: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def run_to_dict(run: ProbeRun) -> dict[str, Any]:
    plan = run.plan
    out: dict[str, Any] = _clean(
        {
            "url": run.url,
            "plan": {
                "mode": plan.mode,
                "levels": list(plan.levels),
                "requests": plan.requests,
                "prompt_tokens": plan.prompt_tokens,
                "max_tokens": plan.max_tokens,
                "burstiness": plan.burstiness,
                "max_concurrency": plan.max_concurrency,
                "model": run.model or plan.model,
                "api": plan.api,
                "seed": plan.seed,
                "warmup": plan.warmup,
                "workers": plan.workers,
                "lag_fraction": plan.lag_fraction,
                "lag_limit_s": plan.lag_limit_s,
                "targets": {
                    "ttft_s": plan.targets.ttft_s,
                    "tpot_s": plan.targets.tpot_s,
                    "ttft_from_schedule": plan.targets.from_schedule,
                },
            },
            "levels": [_level_dict(lv) for lv in run.levels],
            "capacity": run.capacity,
            "capacity_unit": "concurrency" if plan.mode == "closed" else "requests/s",
        }
    )
    return out


def _level_dict(lv: LevelResult) -> dict[str, Any]:
    """A level's summary, plus ``client``: the probe's own load and its verdict on the numbers."""
    out = lv.summary.to_dict()
    if lv.client is not None:
        out["client"] = asdict(lv.client)
    return out


def _client_flat(client: ClientLoad | None) -> dict[str, Any]:
    if client is None:
        return {}
    return {
        "client_verdict": client.verdict,
        "client_cause": client.cause,
        "client_workers": client.workers,
        "client_lag_p50": client.lag.p50,
        "client_lag_p99": client.lag.p99,
        "client_lag_max": client.lag.max,
        "client_worst_lag_p99": client.worst_lag_p99_s,
        "client_lag_limit": client.limit_s,
        "client_cpu_s": sum(client.cpu_s),
        "client_cpu_fraction_max": max(client.cpu_fraction, default=0.0),
    }


def write_json(path: str | Path, run: ProbeRun) -> None:
    atomic_write_text(path, json.dumps(run_to_dict(run), indent=2) + "\n")


def write_csv(path: str | Path, run: ProbeRun) -> None:
    rows = [_clean({**lv.summary.flat(), **_client_flat(lv.client)}) for lv in run.levels]
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    atomic_write_text(path, buf.getvalue())


def write_records_file(path: str | Path, run: ProbeRun) -> int:
    from fleetwatch.records import write_records

    return write_records(path, to_records(run))


def _ms(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x * 1e3:.1f}"


def render_table(run: ProbeRun) -> Any:
    """A rich ``Table``: one row per load level (milliseconds, per second)."""
    from rich.table import Table

    t = Table(title=f"probe {run.url} ({run.plan.mode})", show_lines=False)
    cols = [
        "load",
        "ok",
        "req/s",
        "tok/s",
        "ttft50",
        "ttft99",
        "ttft99 sch",
        "tpot50",
        "tpot99",
        "itl99",
        "good/s",
        "meet",
        "lag99",
        "loop99",
    ]
    for c in cols:
        t.add_column(c, justify="right")
    if any(lv.summary.bound_fraction is not None for lv in run.levels):
        t.add_column("bound", justify="right")
    bound_notes: list[str] = []
    for lv in run.levels:
        s: RunSummary = lv.summary
        cl = lv.client
        mark = "*" if cl is not None and cl.client_bound else ""
        if cl is not None and cl.client_bound:
            bound_notes.append(
                f"{s.label}: loop lag p99 {cl.worst_lag_p99_s * 1e3:.2f} ms > "
                f"{cl.limit_s * 1e3:.2f} ms, {cl.cause}"
            )

        def p(x: float, mark: str = mark) -> str:
            return _ms(x) + mark

        row = [
            s.label,
            f"{s.ok}/{s.requests}",
            f"{s.request_throughput:.2f}",
            f"{s.output_tokens_per_s:.0f}",
            p(s.ttft.p50),
            p(s.ttft.p99),
            p(s.ttft_sched.p99),
            p(s.tpot.p50),
            p(s.tpot.p99),
            p(s.itl.p99),
            f"{s.goodput_rps:.2f}",
            f"{s.attainment:.0%}",
            _ms(s.send_lag.p99),
            "-" if cl is None else f"{_ms(cl.worst_lag_p99_s)} x{cl.workers}",
        ]
        if len(t.columns) > len(cols):
            row.append("-" if s.bound_fraction is None else f"{s.bound_fraction:.1%}")
        t.add_row(*row)
    cap = run.capacity
    unit = "concurrency" if run.plan.mode == "closed" else "req/s"
    t.caption = (
        f"times in ms; targets TTFT<={run.plan.targets.ttft_s:g}s TPOT<={run.plan.targets.tpot_s:g}s; "
        + (
            f"capacity (>=90% meet both): {cap:g} {unit}"
            if cap is not None
            else "capacity: no level met the targets"
        )
        + (
            "\n* client-bound ("
            + "; ".join(bound_notes)
            + "): these percentiles include the probe's own delay; spread it with --workers "
            "or a bigger client"
            if bound_notes
            else ""
        )
    )
    return t
