"""Assemble ``report.html`` from the demo's results: four plots and the tables behind them.

Pure: values in, HTML text out (the plotting lives in ``report``). Times are seconds since the
start of the traffic phase.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from fleetwatch.demo.report import (
    Section,
    burn_rate_svg,
    latency_throughput_svg,
    render_html,
    replicas_svg,
    table_html,
    tail_svg,
)

__all__ = ["build_page"]


def _burn_section(summary: Mapping[str, Any], burn: Mapping[str, Any]) -> Section:
    slo = summary["slo"]
    page = slo["page"]
    marks = [(summary["burst"]["start_s"], summary["burst"]["end_s"], "error burst")]
    intervals = [
        (
            i["start_s"],
            i["end_s"] if i["end_s"] is not None else burn["times_s"][-1],
            f"backtest: {i['alert']}",
        )
        for i in slo["intervals"]
    ]
    extra = {}
    prom = summary.get("prometheus")
    if prom is not None:
        intervals += [
            (i["start_s"], i["end_s"], f"Prometheus: {i['alert']}") for i in prom["page_intervals"]
        ]
        if burn.get("prometheus"):
            extra[f"Prometheus burn {burn['long_window']}"] = burn["prometheus"]
    svg = burn_rate_svg(
        burn["times_s"],
        burn["series"],
        alert_intervals=intervals,
        threshold=burn["threshold"],
        marks=marks,
        extra=extra,
    )
    if page["first_fired_s"] is None:
        text = f"The page alert {page['alert']} did not fire over the records."
    else:
        text = (
            f"Backtest over the records: the page alert {page['alert']} fires "
            f"{page['first_fired_s']:.0f} s into the run, {page['delay_after_burst_s']:.0f} s "
            f"after the burst started at {summary['burst']['start_s']:.0f} s."
        )
    if prom is not None and prom["page_first_fired_s"] is not None:
        text += f" Prometheus fired it {prom['page_first_fired_s']:.0f} s into the run."
    rows = [
        {
            "slo": r["slo"],
            "objective %": r["objective"],
            "period": r["period"],
            "requests": r["events"],
            "bad": r["bad"],
            "SLI": r["sli"],
            "budget left": r["budget_remaining"],
            "firing at end": ", ".join(r["firing"]),
        }
        for r in slo["reports"]
    ]
    return Section("Error budget and burn rate", text, svg + table_html(rows))


def _replica_section(summary: Mapping[str, Any]) -> Section:
    ratios = summary["fleet"]["ratios"]
    flagged = [v["replica"] for v in summary["verdicts"] if v["found_side"] == "replica"]
    svg = replicas_svg(ratios, flagged=flagged)
    lines = []
    for v in summary["verdicts"]:
        side = v["found_side"] or "not flagged"
        lines.append(
            f"{v['replica']} (planted: {v['planted']}-side) found {side}-side"
            + (f", cause {v['cause']}" if v["cause"] else "")
        )
    rows = [
        {
            "replica": f["replica"],
            "signal": f["signal"],
            "ratio": f["ratio"],
            "robust z": f["robust_z"],
            "side": f["side"],
            "cause": f["cause"],
            "pass": f["pass"],
        }
        for f in summary["fleet"]["findings"]
    ]
    evidence = "".join(
        f"<h3>{html.escape(v['replica'])}</h3><ul>"
        + "".join(f"<li>{html.escape(e)}</li>" for e in v["evidence"])
        + "</ul>"
        for v in summary["verdicts"]
    )
    return Section(
        "Each replica against the fleet median",
        "; ".join(lines) + ". Hatched bars: blamed on the replica.",
        svg + table_html(rows) + evidence,
    )


def _tail_section(summary: Mapping[str, Any]) -> Section:
    tail = summary["tail"]
    comps = {c["name"]: (c["body_mean_s"], c["tail_mean_s"]) for c in tail["components"]}
    svg = tail_svg(comps)
    top = tail["suspects"][0] if tail["suspects"] else None
    text = (
        f"Requests at or above the e2e p{tail['percentile']:g} ({tail['threshold_s']:.3g} s): "
        f"{tail['n_tail']}, mean {tail['tail_mean_s']:.3g} s against {tail['body_mean_s']:.3g} s "
        "for the rest."
    )
    if top is not None:
        text += f" Top suspect: {top['name']} ({top['share']:.0%} of the excess)."
    rows = [
        {"suspect": s["name"], "explained s": s["explained_s"], "share": s["share"]}
        for s in tail["suspects"]
    ]
    return Section("Where the tail comes from", text, svg + table_html(rows))


def _bound_section(summary: Mapping[str, Any]) -> Section:
    sweep = summary["sweep"]
    points = [(p["output_tokens_per_s"], p["tpot_p50_s"], p["tpot_p99_s"]) for p in sweep["levels"]]
    bound = [(b["tokens_per_s"], b["step_time_s"]) for b in sweep["bound"]]
    svg = latency_throughput_svg(points, bound=bound, label="healthy replica")
    bw = sweep["bandwidth_bytes_per_s"]
    best = max((p[0] for p in points), default=math.nan)
    top_bound = max((b[0] for b in bound), default=math.nan)
    text = (
        f"Closed-loop sweep at concurrency {', '.join(str(p['concurrency']) for p in sweep['levels'])} "
        f"against one healthy replica: at most {best:.0f} output tokens/s. The bound reads every "
        f"weight ({sweep['weight_bytes'] / 1e6:.1f} MB, float32) and the KV cache once per decode "
        f"step at this machine's copy bandwidth measured on a buffer of the weights' size "
        f"({bw / 1e9:.1f} GB/s): {top_bound:.0f} tokens/s at the largest batch. The engine runs "
        "far from it: on a CPU a step of this small model is Python and kernel-launch overhead, "
        "not memory traffic."
    )
    above = [
        p["concurrency"]
        for p, b in zip(sweep["levels"], sweep["bound"], strict=False)
        if p["output_tokens_per_s"] > b["tokens_per_s"]
    ]
    if above:
        text += (
            f" At concurrency {', '.join(map(str, above))} the measured throughput exceeds the "
            "bound: the bandwidth measurement was disturbed (a busy machine) and is too low."
        )
    rows = [
        {
            "concurrency": p["concurrency"],
            "tokens/s": p["output_tokens_per_s"],
            "TPOT p50 ms": p["tpot_p50_s"] * 1e3,
            "TPOT p99 ms": p["tpot_p99_s"] * 1e3,
            "bound tokens/s": b["tokens_per_s"],
            "bound step ms": b["step_time_s"] * 1e3,
        }
        for p, b in zip(sweep["levels"], sweep["bound"], strict=False)
    ]
    return Section(
        "Latency against throughput, with the bandwidth bound", text, svg + table_html(rows)
    )


def _prometheus_section(summary: Mapping[str, Any]) -> Section | None:
    prom = summary.get("prometheus")
    if prom is None:
        return None
    flagged = prom["outlier_flagged"]
    text = (
        f"A real Prometheus ({prom['version'] or 'prometheus'}) scraped the four replicas every "
        f"second and evaluated the generated rules. Page alert first fired "
        + (
            f"{prom['page_first_fired_s']:.0f} s into the run"
            if prom["page_first_fired_s"] is not None
            else "never"
        )
        + "; the outlier rule flagged "
        + (", ".join(f"{r} ({', '.join(s)})" for r, s in flagged.items()) or "nobody")
        + "."
    )
    rows = [
        {
            "alert": i["alert"],
            "labels": ", ".join(
                f"{k}={v}" for k, v in i["labels"].items() if k in ("replica", "signal", "slo")
            ),
            "from s": i["start_s"],
            "to s": i["end_s"],
        }
        for i in [*prom["page_intervals"], *prom["outlier_intervals"], *prom["other_alerts"]]
    ]
    return Section("What Prometheus saw", text, table_html(rows))


def _startup_section(summary: Mapping[str, Any]) -> Section | None:
    rows = [
        {"replica": r["replica"], **r["startup_s"], "total": sum(r["startup_s"].values())}
        for r in summary["replicas"]
        if r.get("startup_s")
    ]
    if not rows:
        return None
    return Section(
        "Cold start, phase by phase",
        "Seconds each replica spent in each phase of its start (fleetwatch_engine_startup_seconds"
        "; a 'startup' span with a child per phase in traces.jsonl). /ready turned 200 at the end "
        "of the readiness phase.",
        table_html(rows),
    )


def _files_section(summary: Mapping[str, Any]) -> Section:
    rows = [{"file": f} for f in summary["files"]]
    checks = [
        {
            "command": c["command"],
            "result": "ok" if c["ok"] else ("skipped" if c["skipped"] else "FAILED"),
        }
        for c in summary["promtool"]
    ]
    return Section(
        "Files written",
        "Rules with their promtool tests, dashboards, traces, records and this page.",
        table_html(checks) + table_html(rows),
    )


def build_page(summary: Mapping[str, Any], burn: Mapping[str, Any], lines: Sequence[str]) -> str:
    """The whole report page."""
    intro = " ".join(lines[:1])
    sections = [
        Section(
            "Findings", "What the run found.", "<pre>" + html.escape("\n".join(lines)) + "</pre>"
        ),
        _burn_section(summary, burn),
        _replica_section(summary),
        _tail_section(summary),
        _bound_section(summary),
    ]
    for extra in (_startup_section(summary), _prometheus_section(summary)):
        if extra is not None:
            sections.append(extra)
    sections.append(_files_section(summary))
    return render_html("fleetwatch demo", intro, sections)
