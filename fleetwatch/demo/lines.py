"""The lines ``fleetwatch demo`` prints: what was found, from the summary and the verdicts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fleetwatch.demo.analysis import Verdict
from fleetwatch.demo.spec import PAGE_SLO

__all__ = ["summary_lines"]


def summary_lines(
    summary: Mapping[str, Any], verdict_list: Sequence[Verdict], out: Path
) -> tuple[str, ...]:
    """What was run, what each planted problem was found as, whether and when the page alert
    fired, the error budget left, the tail's top suspect, Prometheus and promtool, the report."""
    run = summary["run"]
    lines = [
        f"fleetwatch demo: {run['replicas']} replicas on loopback, {run['requests']} requests over "
        f"{run['duration_s']:g} s of open-loop traffic"
    ]
    for v in verdict_list:
        planted = "slowed" if v.planted == "replica" else "sent only long prompts"
        if v.side is None:
            found = "not flagged"
        elif v.side == "replica":
            found = f"replica-side ({v.cause}) on {', '.join(v.signals)}"
        else:
            found = f"workload-side ({v.cause}) on {', '.join(v.signals)}: not blamed"
        lines.append(f"  {v.replica} ({planted}): {found}")
    slo = summary["slo"]
    burst = summary["burst"]
    page = slo["page"]
    if page["first_fired_s"] is None:
        lines.append(f"  page alert {page['alert']}: did not fire")
    else:
        first = next(
            i
            for i in slo["intervals"]
            if i["alert"] == page["alert"] and i["start_s"] == page["first_fired_s"]
        )
        ended = (
            "still firing at the end"
            if first["end_s"] is None
            else f"resolved at {first['end_s']:.0f} s"
        )
        lines.append(
            f"  page alert {page['alert']} fired {page['first_fired_s']:.0f} s into the run, "
            f"{page['delay_after_burst_s']:.0f} s after the error burst began "
            f"(burst {burst['start_s']:.0f}-{burst['end_s']:.0f} s); {ended}"
        )
    rep = next(r for r in slo["reports"] if r["slo"] == PAGE_SLO)
    left = rep["budget_remaining"]
    lines.append(
        f"  error budget ({PAGE_SLO} {rep['objective']:g}% over {rep['period']}): {rep['bad']} bad of "
        f"{rep['events']} requests, "
        + ("remaining n/a" if left is None else f"remaining {left:.0%}")
        + f" (the records cover {rep['coverage']:.2%} of the period)"
    )
    tail = summary["tail"]
    if tail["suspects"]:
        top = tail["suspects"][0]
        lines.append(
            f"  e2e p99 tail: top suspect {top['name']} ({top['share']:.0%} of the excess)"
        )
    prom = summary.get("prometheus")
    if prom is not None:
        first = prom["page_first_fired_s"]
        flagged = prom["outlier_flagged"]
        lines.append(
            "  prometheus: page alert "
            + ("did not fire" if first is None else f"fired {first:.0f} s into the run")
            + "; outlier rule flagged "
            + (", ".join(f"{r} ({', '.join(s)})" for r, s in flagged.items()) or "nobody")
        )
    checks = summary["promtool"]
    if checks:
        lines.append(
            "  promtool: "
            + "; ".join(
                f"{c['command'].split()[1]} {'ok' if c['ok'] else 'skipped' if c['skipped'] else 'FAILED'}"
                for c in checks
            )
        )
    start = summary.get("startup")
    if start and start["slowest_replica"] is not None:
        phases = ", ".join(f"{k} {v:.2f} s" for k, v in start["max_phase_s"].items())
        lines.append(
            f"  cold start: slowest {start['slowest_replica']} {start['slowest_total_s']:.2f} s "
            f"(slowest per phase: {phases}); span 'startup' in traces.jsonl"
        )
    lines.append(f"  report: {out / 'report.html'}")
    return tuple(lines)
