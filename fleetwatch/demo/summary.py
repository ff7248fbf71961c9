"""The demo's summary: every result of the run as one JSON-ready dict (``summary.json``, and
what the report and the printed lines are made from).

Times are seconds since the start of the traffic; non-finite numbers become null.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from fleetwatch.demo.analysis import Analysis, Verdict
from fleetwatch.demo.fleet import FleetRun, SweepLevel
from fleetwatch.demo.observed import PrometheusView
from fleetwatch.demo.scenario import DemoConfig
from fleetwatch.demo.spec import PAGE_SLO, SPEC_PATH, page_alert

__all__ = ["build_summary"]


def _clean(obj: Any) -> Any:
    """``obj`` with mappings and sequences rebuilt as dicts and lists, non-finite floats as None."""
    if isinstance(obj, float):
        return None if not math.isfinite(obj) else obj
    if isinstance(obj, Mapping):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def _bound(
    levels: Sequence[SweepLevel], model_config: Any, config: DemoConfig, bandwidth: float
) -> list[dict[str, float]]:
    from fleetwatch.engine_probe.probe.bound import bound_at, shape_from_model_config
    from fleetwatch.engine_probe.probe.gpus import GPUSpec

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
    from fleetwatch.core.duration import format_duration

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


def _startup(fleet: FleetRun) -> dict[str, Any]:
    """The replicas' cold starts: per phase the slowest replica's seconds, and the slowest total
    (what ``fleetwatch fleet capacity --cold-start-from`` would plan with)."""
    phases: dict[str, float] = {}
    for seconds in fleet.startups.values():
        for phase, s in seconds.items():
            phases[phase] = max(phases.get(phase, 0.0), s)
    totals = {r: sum(p.values()) for r, p in fleet.startups.items()}
    slowest = max(totals, key=lambda r: totals[r], default=None)
    return {
        "metric": "fleetwatch_engine_startup_seconds",
        "span": "startup reference",
        "max_phase_s": phases,
        "slowest_replica": slowest,
        "slowest_total_s": totals.get(slowest, 0.0) if slowest is not None else 0.0,
    }


def _findings_rows(analysis: Analysis) -> list[dict[str, Any]]:
    return [{**f.to_dict(), "pass": f.found_in} for f in analysis.outliers.findings]


def _slo_summary(
    analysis: Analysis, spec: Any, config: DemoConfig, origin: float, burst: tuple[float, float]
) -> dict[str, Any]:
    from fleetwatch.slo.report import report_json

    alert = page_alert(spec)
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
    pages = [i for i in intervals if i["slo"] == PAGE_SLO and i["alert"] == alert]
    first = min((i["start_s"] for i in pages), default=None)
    return {
        "spec": str(SPEC_PATH.name),
        "reports": report_json(analysis.slo_reports),
        "intervals": intervals,
        "page": {
            "alert": alert,
            "first_fired_s": first,
            "delay_after_burst_s": None if first is None else first - (burst[0] - origin),
            "during_burst": first is not None
            and burst[0] - origin <= first <= burst[1] - origin + 5.0,
        },
    }


def build_summary(
    *,
    config: DemoConfig,
    spec: Any,
    model_config: Any,
    fleet: FleetRun,
    analysis: Analysis,
    verdict_list: Sequence[Verdict],
    levels: Sequence[SweepLevel],
    bandwidth: Any,
    weight_bytes: float,
    promtool: Sequence[Any],
    view: PrometheusView | None,
    version: str | None,
    files: list[str],
    started_s: float,
) -> dict[str, Any]:
    """The summary of a finished run (``started_s``: its ``time.monotonic()`` start, for the
    wall time); ``bandwidth`` is the copy-bandwidth measurement the sweep's bound rests on."""
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
                "startup_s": dict(fleet.startups.get(r.name, {})),
            }
            for r in fleet.roles
        ],
        "startup": _startup(fleet),
        "host": None if fleet.host is None else fleet.host.to_dict(),
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
    summary["files"] = files
    summary["run"]["wall_s"] = time.monotonic() - started_s
    summary["slo"]["burn"] = _burn_series(analysis, origin, view)
    cleaned: dict[str, Any] = _clean(summary)
    return cleaned
