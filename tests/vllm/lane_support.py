"""Helpers of the vLLM lane (``test_lane.py``): probe plans and runs, the plugin's records in a
time range, alert timing for the lane, dashboard queries, firing alerts."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from fleetwatch.demo.prometheus import PrometheusServer
from fleetwatch.engine_probe.probe.runner import ProbePlan, ProbeRun, run_plan
from fleetwatch.engine_probe.probe.stats import SLOTargets
from fleetwatch.records import read_records

MODEL_NAME = "meta-llama/Llama-3.1-8B-Instruct"


def plan(
    *, concurrency: int, requests: int, prompt_tokens: int = 64, max_tokens: int = 64, seed: int = 0
) -> ProbePlan:
    """A closed-loop probe plan: ``concurrency`` requests in flight, ``requests`` in all."""
    return ProbePlan(
        mode="closed",
        levels=(float(concurrency),),
        requests=requests,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        model=MODEL_NAME,
        seed=seed,
        targets=SLOTargets(1.0, 0.05),
        timeout_s=300.0,
    )


def drive(urls: Sequence[str], p: ProbePlan) -> tuple[list[ProbeRun], float, float]:
    """Run ``p`` against every URL at once; (runs, wall start, wall end)."""

    async def all_of() -> list[ProbeRun]:
        return list(await asyncio.gather(*(run_plan(u, p) for u in urls)))

    t0 = time.time()
    runs = asyncio.run(all_of())
    return runs, t0, time.time()


def records_between(
    folder: Path, start_s: float, end_s: float, *, expect: int | None = None, timeout_s: float = 30
) -> pd.DataFrame:
    """The plugin's records with arrival in [start_s, end_s], waiting (up to ``timeout_s``) for
    ``expect`` of them: the plugin seals a file once its oldest record is a second old."""
    deadline = time.monotonic() + timeout_s
    while True:
        files = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
        frames = [read_records(f) for f in files]
        df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        if len(df):
            df = df[(df["arrival_s"] >= start_s) & (df["arrival_s"] <= end_s)]
        if expect is None or len(df) >= expect or time.monotonic() > deadline:
            return df.reset_index(drop=True)
        time.sleep(0.5)


def compress_time(paths: Iterable[Path], for_: str, interval: str) -> None:
    """Set every alert's ``for:`` to ``for_`` and every group's ``interval`` to ``interval``:
    the generated minutes (and the SLO spec's 30 s evaluation) would outlast the lane."""
    for path in paths:
        doc = yaml.safe_load(path.read_text())
        for group in doc.get("groups", []):
            group["interval"] = interval
            for rule in group.get("rules", []):
                if "alert" in rule and "for" in rule:
                    rule["for"] = for_
        path.write_text(yaml.safe_dump(doc, sort_keys=False))


def dashboard_queries(path: Path) -> list[tuple[str, str]]:
    """(panel title, expression) of every target of a Grafana dashboard JSON."""
    doc = json.loads(path.read_text())
    out: list[tuple[str, str]] = []

    def walk(panels: Iterable[Mapping[str, Any]]) -> None:
        for panel in panels:
            for target in panel.get("targets", []):
                if target.get("expr"):
                    out.append((str(panel.get("title")), str(target["expr"])))
            walk(panel.get("panels", []))

    walk(doc.get("panels", []))
    return out


def fill_template(expr: str, rate_window: str) -> str:
    """A dashboard expression with its Grafana variables set to 'everything'."""
    for var, value in (
        ("$__rate_interval", rate_window),
        ("$__interval", "15s"),
        ("$__range", "5m"),
        ("$model", ".*"),
        ("$replica", ".*"),
        ("$slo", ".*"),
        ("$topk", "10"),
    ):
        expr = expr.replace(var, value)
    return expr


def firing(prometheus: PrometheusServer) -> list[str]:
    return sorted(
        f"{a['labels'].get('alertname')}{{{a['labels'].get('slo') or a['labels'].get('signal') or ''}}}"
        for a in prometheus.alerts()
        if a["state"] == "firing"
    )
