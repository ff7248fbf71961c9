"""The fleet phase of the demo: the fleet's run, optionally scraped by a real Prometheus that
evaluates the generated rules, and what that Prometheus observed.

With Prometheus, it starts once the replicas listen and its first scrape is awaited; the fleet
keeps serving ``GRACE_S`` after the traffic, then until Prometheus has scraped every replica and
evaluated the rules after the end, and has had every replica's requests in the outlier rules for
their whole ``for:`` (a slowed replica on a busy host finishes its first requests late), at most
``HOLD_TIMEOUT_S``: the run lasts as long as the host needs, not a fixed time. Its config
and log are copied to ``<out>/prometheus/``; its working folder is removed.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fleetwatch.demo.fleet import FleetRun, run_fleet
from fleetwatch.demo.observed import PrometheusView, observe
from fleetwatch.demo.progress import Progress
from fleetwatch.demo.scenario import DemoConfig
from fleetwatch.demo.spec import PAGE_SLO, page_alert

__all__ = ["GRACE_S", "HOLD_TIMEOUT_S", "Inspect", "fleet_phase", "judged"]

GRACE_S = 3.0
"""Seconds the fleet keeps serving after the traffic so Prometheus scrapes and evaluates the end."""


HOLD_TIMEOUT_S = 60.0
"""The longest the fleet keeps serving after the traffic for Prometheus to catch up."""


def judged(prom: Any, end_s: float, replicas: int) -> bool:
    """Whether ``prom`` has scraped every target and evaluated the outlier rules after ``end_s``
    (Unix seconds), and has had each of ``replicas`` serving in those rules for their ``for:``."""
    from fleetwatch.core.duration import parse_duration
    from fleetwatch.demo.artifacts import OUTLIER_FOR, OUTLIER_WINDOW
    from fleetwatch.fleet.outliers.rules.generate import RuleOptions

    rate = f"replica:fleet_requests:rate{OUTLIER_WINDOW}"
    serving = f"{rate} >= {RuleOptions().min_rate_per_s:g}"
    steps = int(parse_duration(OUTLIER_FOR)) + 1
    checks = (
        (f"min(timestamp(up)) > {end_s:.3f}", 1),
        (f"min(timestamp({rate})) > {end_s:.3f}", 1),
        (f"count_over_time(({serving})[{steps}s:1s]) >= {steps}", replicas),
    )
    return all(len(prom.query(q)) >= n for q, n in checks)


async def _hold(prom: Any, end_s: float, replicas: int) -> None:
    deadline = time.monotonic() + HOLD_TIMEOUT_S
    while time.monotonic() < deadline:
        if await asyncio.to_thread(judged, prom, end_s, replicas):
            return
        await asyncio.sleep(0.5)


Inspect = Callable[[Any, FleetRun], None]
"""Called with the running ``PrometheusServer`` and the fleet run, after the traffic and before
Prometheus stops (the end-to-end test queries the HTTP API itself from here)."""


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


async def fleet_phase(
    config: DemoConfig,
    model_config: Any,
    out: Path,
    rule_files: Sequence[Path],
    *,
    trace_path: Path,
    prometheus: bool,
    progress: Progress,
    spec: Any,
    inspect: Inspect | None = None,
) -> tuple[FleetRun, PrometheusView | None, str | None]:
    """Run the fleet (spans to ``trace_path``); return the run, and with ``prometheus`` what it
    observed and its version line."""
    from fleetwatch.demo.prometheus import PrometheusServer, ScrapeTarget

    if not prometheus:
        run = await run_fleet(config, model_config, span_file=trace_path, progress=progress)
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
            span_file=trace_path,
            progress=progress,
            on_ready=on_ready,
            grace_s=GRACE_S,
            hold=lambda end_s: _hold(holder[0], end_s, config.replicas),
        )
        prom = holder[0]
        slo = next(s for s in spec.slos if s.name == PAGE_SLO)
        long_window = max(w.long_s for w in slo.windows if w.severity == "page" and w.burn > 10)
        from fleetwatch.core.duration import format_duration

        view = await asyncio.to_thread(
            observe,
            prom,
            prom.url,
            start_s=run.start_s - 2.0,
            end_s=time.time(),
            page_alert=page_alert(spec),
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
