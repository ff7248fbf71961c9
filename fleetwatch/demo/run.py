"""The demo end to end: generate rules, run the fleet (optionally under a real Prometheus), sweep
one healthy replica, analyse the records, write every artifact and the report, and say what was
found. ``run_demo`` is the only function the command line calls.
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetwatch.demo.analysis import Analysis, Verdict, analyse, verdicts
from fleetwatch.demo.artifacts import RuleCheck, write_dashboards, write_rules
from fleetwatch.demo.fleet import FleetRun, SweepLevel, run_fleet, run_sweep
from fleetwatch.demo.observed import PrometheusView, observe
from fleetwatch.demo.progress import Progress, SilentProgress
from fleetwatch.demo.scenario import DemoConfig
from telemetry.atomic import atomic_write_text

__all__ = ["SPEC_PATH", "DemoResult", "Inspect", "run_demo"]

SPEC_PATH = Path(__file__).with_name("slo.yaml")
"""The demo's SLO spec (12 h period, rules evaluated every second)."""

PAGE_SLO = "availability"
GRACE_S = 3.0
"""Seconds the fleet keeps serving after the traffic so Prometheus scrapes and evaluates the end."""


Inspect = Callable[[Any, FleetRun], None]
"""Called with the running ``PrometheusServer`` and the fleet run, after the traffic and before
Prometheus stops (the end-to-end test queries the HTTP API itself from here)."""


@dataclass(frozen=True, slots=True)
class DemoResult:
    """The summary (also written as ``summary.json``) and the printed lines."""

    summary: Mapping[str, Any]
    lines: tuple[str, ...]
    out: Path


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return None if not math.isfinite(obj) else obj
    if isinstance(obj, Mapping):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


async def _wait_targets(prom: Any, n: int, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        up = await asyncio.to_thread(prom.targets_up)
        if len(up) >= n and all(up.values()):
            return
        await asyncio.sleep(0.25)


def _prometheus_version(binary: str) -> str | None:
    try:
        done = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = (done.stdout or done.stderr).splitlines()
    return first[0].strip() if first else None


async def _fleet_phase(
    config: DemoConfig,
    model_config: Any,
    out: Path,
    rule_files: Sequence[Path],
    *,
    prometheus: bool,
    progress: Progress,
    spec: Any,
    inspect: Inspect | None = None,
) -> tuple[FleetRun, PrometheusView | None, str | None]:
    from fleetwatch.demo.prometheus import PrometheusServer, ScrapeTarget

    if not prometheus:
        run = await run_fleet(
            config, model_config, span_file=out / "traces.jsonl", progress=progress
        )
        return run, None, None

    workdir = Path(tempfile.mkdtemp(prefix="fleetwatch-demo-prom-"))
    holder: list[PrometheusServer] = []

    async def on_ready(addresses: Mapping[str, str]) -> None:
        progress.phase("prometheus: start and first scrape", None)
        targets = [ScrapeTarget(a, {"replica_target": r}) for r, a in addresses.items()]
        prom = PrometheusServer(workdir, targets, rule_files)
        await asyncio.to_thread(prom.start)
        holder.append(prom)
        await _wait_targets(prom, len(targets))
        progress.advance()

    try:
        run = await run_fleet(
            config,
            model_config,
            span_file=out / "traces.jsonl",
            progress=progress,
            on_ready=on_ready,
            grace_s=GRACE_S,
        )
        prom = holder[0]
        slo = next(s for s in spec.slos if s.name == PAGE_SLO)
        long_window = max(w.long_s for w in slo.windows if w.severity == "page" and w.burn > 10)
        from telemetry.duration import format_duration

        view = await asyncio.to_thread(
            observe,
            prom,
            prom.url,
            start_s=run.start_s - 2.0,
            end_s=time.time(),
            page_alert=_page_alert(spec),
            outlier_alert="FleetReplicaOutlier",
            service=spec.service,
            slo=PAGE_SLO,
            burn_window=format_duration(long_window),
            error_budget=slo.error_budget,
        )
        if inspect is not None:
            await asyncio.to_thread(inspect, prom, run)
        version = _prometheus_version(prom.binary)
        (out / "prometheus").mkdir(exist_ok=True)
        for name in ("prometheus.yml", "prometheus.log"):
            if (workdir / name).exists():
                shutil.copyfile(workdir / name, out / "prometheus" / name)
        return run, view, version
    finally:
        for prom in holder:
            prom.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _page_alert(spec: Any) -> str:
    from slo.rules.generate import alert_name

    slo = next(s for s in spec.slos if s.name == PAGE_SLO)
    return alert_name(slo, "page")


def _bound(
    levels: Sequence[SweepLevel], model_config: Any, config: DemoConfig, bandwidth: float
) -> list[dict[str, float]]:
    from engine_probe.probe.bound import bound_at, shape_from_model_config
    from engine_probe.probe.gpus import GPUSpec

    shape = shape_from_model_config(model_config)
    # Memory-bound only: the CPU's FLOP/s are not known, so compute is never the limit here.
    device = GPUSpec("this machine (measured copy)", 0.0, bandwidth, math.inf, "measured")
    context = sum(config.short_prompt_tokens) // 2 + config.sweep_max_tokens // 2
    out = []
    for lv in levels:
        b = bound_at(
            shape,
            device,
            batch=lv.concurrency,
            context_tokens=context,
            weight_bytes_per_param=4.0,
            kv_bytes=4.0,
        )
        out.append(
            {"batch": lv.concurrency, "tokens_per_s": b.tokens_per_s, "step_time_s": b.step_time_s}
        )
    return out


def _burn_series(analysis: Analysis, origin: float, view: PrometheusView | None) -> dict[str, Any]:
    bt = next(b for b in analysis.backtests if b.slo.name == PAGE_SLO)
    slo = bt.slo
    tl = bt.timeline
    page = [w for w in slo.windows if w.severity == "page"]
    fast = max(page, key=lambda w: w.burn)
    from telemetry.duration import format_duration

    series = {}
    for w_s in (fast.long_s, fast.short_s):
        series[f"burn {format_duration(w_s)}"] = [
            None if not math.isfinite(v) else float(v) for v in tl.burn(w_s, slo.error_budget)
        ]
    out: dict[str, Any] = {
        "times_s": [float(t - origin) for t in tl.times],
        "series": series,
        "threshold": fast.burn,
        "long_window": format_duration(fast.long_s),
    }
    if view is not None:
        out["prometheus"] = [(t - origin, b) for t, b in view.burn]
    return out


def _findings_rows(analysis: Analysis) -> list[dict[str, Any]]:
    return [{**f.to_dict(), "pass": f.found_in} for f in analysis.outliers.findings]


def _slo_summary(
    analysis: Analysis, spec: Any, config: DemoConfig, origin: float, burst: tuple[float, float]
) -> dict[str, Any]:
    from slo.report import report_json

    page_alert = _page_alert(spec)
    intervals = []
    for bt in analysis.backtests:
        for i in bt.intervals:
            intervals.append(
                {
                    "slo": bt.slo.name,
                    "alert": i.alert,
                    "severity": i.severity,
                    "start_s": i.start_s - origin,
                    "end_s": None if i.end_s is None else i.end_s - origin,
                    "detection_delay_s": i.detection_delay_s,
                    "peak_burn": i.peak_burn,
                }
            )
    pages = [i for i in intervals if i["slo"] == PAGE_SLO and i["alert"] == page_alert]
    first = min((i["start_s"] for i in pages), default=None)
    return {
        "spec": str(SPEC_PATH.name),
        "reports": report_json(analysis.slo_reports),
        "intervals": intervals,
        "page": {
            "alert": page_alert,
            "first_fired_s": first,
            "delay_after_burst_s": None if first is None else first - (burst[0] - origin),
            "during_burst": first is not None
            and burst[0] - origin <= first <= burst[1] - origin + 5.0,
        },
    }


def _lines(
    summary: Mapping[str, Any], verdict_list: Sequence[Verdict], out: Path
) -> tuple[str, ...]:
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
    lines.append(f"  report: {out / 'report.html'}")
    return tuple(lines)


def run_demo(
    out: Path,
    config: DemoConfig | None = None,
    *,
    prometheus: bool = False,
    progress: Progress | None = None,
    inspect: Inspect | None = None,
) -> DemoResult:
    """Run the whole demo and write its artifacts under ``out``; ``inspect`` see ``Inspect``."""
    import torch

    threads = torch.get_num_threads()
    try:
        return _run_demo(
            out, config or DemoConfig(), prometheus, progress or SilentProgress(), inspect
        )
    finally:
        torch.set_num_threads(threads)  # the engines ran with one thread each


def _run_demo(
    out: Path,
    config: DemoConfig,
    prometheus: bool,
    progress: Progress,
    inspect: Inspect | None,
) -> DemoResult:
    from engine_probe.engine import ModelConfig
    from slo.load import read_spec
    from telemetry.gpu.peak import measure_memory_bandwidth
    from telemetry.records import write_records

    t_start = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    spec = read_spec(SPEC_PATH)
    shutil.copyfile(SPEC_PATH, out / "slo.yaml")
    phases: dict[str, float] = {}
    mark = time.monotonic()

    def lap(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        phases[name] = round(now - mark, 2)
        mark = now

    # Copy bandwidth on a buffer the size of the weights (the bytes a decode step streams), before
    # anything else runs: on a CPU they may sit in the last-level cache, and the bound must hold.
    model_config = ModelConfig()
    weight_bytes = float(model_config.num_params) * 4.0
    bandwidth = measure_memory_bandwidth(
        "cpu", nbytes=max(4 << 20, int(weight_bytes) // 4 * 4), repeats=10
    )
    lap("bandwidth")
    progress.phase("rules, dashboards, promtool", 3)
    rule_files = write_rules(out / "rules", spec)
    progress.advance()
    dashboards = write_dashboards(out / "dashboards")
    progress.advance()
    checker = RuleCheck(rule_files)
    progress.advance()

    lap("rules")
    trace_path = out / "traces.jsonl"
    trace_path.unlink(missing_ok=True)
    try:
        fleet, view, version = asyncio.run(
            _fleet_phase(
                config,
                model_config,
                out,
                rule_files.rules,
                prometheus=prometheus,
                progress=progress,
                spec=spec,
                inspect=inspect,
            )
        )
        lap("fleet")
        levels = asyncio.run(run_sweep(config, model_config, progress=progress))
        lap("sweep")
        progress.phase("promtool test rules", 1)
        promtool = checker.results()
        progress.advance()
        lap("promtool")
    finally:
        checker.cancel()

    progress.phase("analysis and report", 3)
    records_path = out / "records.parquet"
    write_records(records_path, fleet.records)
    analysis = analyse(fleet.records, spec)
    progress.advance()
    verdict_list = verdicts(analysis, fleet.roles)
    lap("analysis")
    origin = fleet.start_s
    burst = (fleet.burst_s[0] - origin, fleet.burst_s[1] - origin)
    summary: dict[str, Any] = {
        "run": {
            "replicas": len(fleet.roles),
            "requests": len(fleet.records),
            "planned": fleet.planned,
            "duration_s": config.duration_s,
            "seed": config.seed,
            "start_unix_s": origin,
            "telemetry_dropped": fleet.dropped,
        },
        "replicas": [
            {
                "replica": r.name,
                "address": fleet.addresses[r.name],
                "planted": r.planted,
                "faults": dict(fleet.faults[r.name]),
                "prompt_tokens": list(r.prompt_tokens),
            }
            for r in fleet.roles
        ],
        "burst": {
            "start_s": burst[0],
            "end_s": burst[1],
            "error_rate": config.burst_error_rate,
        },
        "verdicts": [v.to_dict() for v in verdict_list],
        "slo": _slo_summary(analysis, spec, config, origin, fleet.burst_s),
        "fleet": {
            "outliers": analysis.outliers.to_dict(),
            "findings": _findings_rows(analysis),
            "ratios": analysis.ratios,
        },
        "tail": analysis.tail.to_dict(),
        "sweep": {
            "levels": [
                {
                    "concurrency": lv.concurrency,
                    "requests": lv.requests,
                    "ok": lv.ok,
                    "output_tokens_per_s": lv.output_tokens_per_s,
                    "tpot_p50_s": lv.tpot_p50_s,
                    "tpot_p99_s": lv.tpot_p99_s,
                    "ttft_p50_s": lv.ttft_p50_s,
                }
                for lv in levels
            ],
            "bound": _bound(levels, model_config, config, bandwidth.bandwidth_bytes_per_s),
            "bandwidth_bytes_per_s": bandwidth.bandwidth_bytes_per_s,
            "bandwidth_source": bandwidth.source,
            "weight_bytes": weight_bytes,
        },
        "promtool": [c.to_dict() for c in promtool],
        "prometheus": None,
    }
    if view is not None:
        summary["prometheus"] = {**view.to_dict(origin), "version": version}
    files = sorted(
        str(p.relative_to(out))
        for p in [
            *rule_files.rules,
            *rule_files.tests,
            *dashboards,
            trace_path,
            records_path,
            out / "slo.yaml",
            out / "summary.json",
            out / "report.html",
        ]
    )
    summary["files"] = files
    summary["run"]["wall_s"] = time.monotonic() - t_start
    summary["slo"]["burn"] = _burn_series(analysis, origin, view)
    summary = _clean(summary)
    lines = _lines(summary, verdict_list, out)
    progress.advance()
    from fleetwatch.demo.page import build_page

    atomic_write_text(out / "report.html", build_page(summary, summary["slo"]["burn"], lines))
    progress.advance()
    lap("report")
    summary["phases_s"] = phases
    summary["lines"] = list(lines)
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    return DemoResult(summary, lines, out)
