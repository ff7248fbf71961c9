"""The demo end to end: generate rules, run the fleet (optionally under a real Prometheus), sweep
one healthy replica, analyse the records, write every artifact and the report, and say what was
found. ``run_demo`` is the only function the command line calls.

This module orders the phases and times them; the parts live beside it: ``artifacts`` (rules,
dashboards, promtool), ``fleet_phase``, ``analysis``, ``summary``, ``lines`` and ``outputs``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetwatch.demo.analysis import analyse, verdicts
from fleetwatch.demo.artifacts import RuleCheck, write_dashboards, write_rules
from fleetwatch.demo.fleet import run_sweep
from fleetwatch.demo.fleet_phase import Inspect, fleet_phase
from fleetwatch.demo.lines import summary_lines
from fleetwatch.demo.outputs import Outputs
from fleetwatch.demo.progress import Progress, SilentProgress
from fleetwatch.demo.scenario import DemoConfig
from fleetwatch.demo.spec import SPEC_PATH
from fleetwatch.demo.summary import build_summary

__all__ = ["DemoResult", "run_demo"]


@dataclass(frozen=True, slots=True)
class DemoResult:
    """The summary (also written as ``summary.json``) and the printed lines."""

    summary: Mapping[str, Any]
    lines: tuple[str, ...]
    out: Path


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
    from fleetwatch.engine_probe.engine import ModelConfig
    from fleetwatch.slo.load import read_spec
    from fleetwatch.telemetry.gpu.peak import measure_memory_bandwidth

    t_start = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    files = Outputs(out)
    spec = read_spec(SPEC_PATH)
    files.copy_spec()
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
    files.traces.unlink(missing_ok=True)
    try:
        fleet, view, version = asyncio.run(
            fleet_phase(
                config,
                model_config,
                out,
                rule_files.rules,
                trace_path=files.traces,
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
    files.write_records(fleet.records)
    analysis = analyse(
        fleet.records, spec, cpu_wait=None if fleet.host is None else fleet.host.cpu_wait
    )
    progress.advance()
    verdict_list = verdicts(analysis, fleet.roles)
    lap("analysis")
    summary = build_summary(
        config=config,
        spec=spec,
        model_config=model_config,
        fleet=fleet,
        analysis=analysis,
        verdict_list=verdict_list,
        levels=levels,
        bandwidth=bandwidth,
        weight_bytes=weight_bytes,
        promtool=promtool,
        view=view,
        version=version,
        files=files.listing(rule_files, dashboards),
        started_s=t_start,
    )
    lines = summary_lines(summary, verdict_list, out)
    progress.advance()
    files.write_report(summary, lines)
    progress.advance()
    lap("report")
    summary["phases_s"] = phases
    summary["lines"] = list(lines)
    files.write_summary(summary)
    return DemoResult(summary, lines, out)
