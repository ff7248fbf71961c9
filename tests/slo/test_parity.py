"""The central test: the offline backtest of request records and promtool, running the generated
rules on the series the real exporter produced, agree on when every burn-rate alert fires.

A reference engine runs under fleetwatch telemetry on a virtual clock with scripted faults (an
error burst, a throttle, periodic stalls, a slow error burn). Its registry is read at every
evaluation time, exactly as a Prometheus scraping then stores it, and those samples are
promtool's input series; the run's records go through the offline backtest. Every evaluation of
every alert is compared: promtool is given the backtest's firing state at each one, and what it
reports instead is read back. Firing intervals must match one for one, their boundaries within
one evaluation (ITL gaps count at their request's finish offline, at each token in the exporter);
every other alert must agree at every single evaluation.

A second test does the same for the vLLM profile's metric names, on series derived from records.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fleetwatch.core.duration import parse_duration
from fleetwatch.core.profiles import FLEETWATCH, Signal, get_profile
from fleetwatch.core.rules import (
    AlertCase,
    AlertingRule,
    ExpectedAlert,
    InputSeries,
    RuleTest,
    RuleTestFile,
)
from fleetwatch.scenarios.scraped_run import FaultWindow, ScrapedRun, run_scraped
from fleetwatch.scenarios.slo_records import Incident, synthetic_records
from fleetwatch.slo.backtest import Backtest
from fleetwatch.slo.load import load_spec
from fleetwatch.slo.report import backtest_spec
from fleetwatch.slo.rules import generate_rules, render_rules, render_tests
from fleetwatch.slo.rules.generate import ABSENT_ALERT, AlertInfo, RuleSet
from fleetwatch.slo.rules.series import records_series
from fleetwatch.slo.spec import SLOSpec

STEP = 5
WINDOWS = (
    "[{severity: page, long: 2m, short: 20s, burn: 10},"
    " {severity: ticket, long: 10m, short: 1m, burn: 2}]"
)
ENGINE_SPEC = f"""
service: parity
evaluation_interval: {STEP}s
slos:
  - {{name: availability, objective: 99, period: 1h, windows: {WINDOWS},
     sli: {{kind: availability, bad: [error]}}}}
  - {{name: ttft, objective: 95, period: 1h, windows: {WINDOWS},
     sli: {{kind: latency, signal: ttft, threshold: 0.04}}}}
  - {{name: tpot, objective: 95, period: 1h, windows: {WINDOWS},
     sli: {{kind: latency, signal: tpot, threshold: 0.025}}}}
  - {{name: itl, objective: 99, period: 1h, windows: {WINDOWS},
     sli: {{kind: latency, signal: itl, threshold: 0.025}}}}
  - {{name: e2e, objective: 95, period: 1h, windows: {WINDOWS},
     sli: {{kind: latency, signal: e2e, threshold: 0.5}}}}
  - {{name: goodput, objective: 95, period: 1h, windows: {WINDOWS},
     sli: {{kind: goodput, ttft: 0.04, tpot: 0.025}}}}
"""
FAULTS = (
    FaultWindow(120, 240, error_rate=0.5),  # an error burst: availability and goodput page
    FaultWindow(360, 480, slowdown=12),  # a throttle: every latency SLO and goodput page
    FaultWindow(600, 780, stall_every_steps=30, stall_s=0.3),  # one slow gap in ~30
    FaultWindow(900, 1380, error_rate=0.06),  # a slow burn: an availability ticket only
)
DURATION = 1500


@pytest.fixture(scope="module")
def engine_run() -> ScrapedRun:
    p = FLEETWATCH
    families = [p.outcomes.total.name.removesuffix("_total"), p.metric(Signal.GOODPUT).name]
    families = [f.removesuffix("_total") for f in families]
    families += [p.metric(Signal(s)).name for s in ("ttft", "tpot", "itl", "e2e")]
    return run_scraped(duration_s=DURATION, scrape_s=STEP, families=families, rate_per_s=1.0,
                       faults=FAULTS, goodput=(0.04, 0.025), seed=3)  # fmt: skip


def _firing_only(ruleset: RuleSet) -> RuleSet:
    """The rules without their annotations: this test compares when alerts fire; what the
    descriptions say (the ratio an alert fires at) the golden promtool tests prove."""
    groups = tuple(
        dataclasses.replace(
            g,
            rules=tuple(
                dataclasses.replace(r, annotations={}) if isinstance(r, AlertingRule) else r
                for r in g.rules
            ),
        )
        for g in ruleset.groups
    )
    return dataclasses.replace(ruleset, groups=groups)


def _promtool_firing(
    promtool: Path,
    tmp_path: Path,
    spec: SLOSpec,
    profile_name: str,
    results: list[Backtest],
    series: Sequence[InputSeries],
    step: int,
) -> tuple[
    dict[tuple[str, str], np.ndarray[Any, Any]], dict[tuple[str, str], np.ndarray[Any, Any]]
]:
    """Python's and promtool's firing state of every (alert, SLO) at every evaluation."""
    ruleset = generate_rules(spec, get_profile(profile_name))
    infos: dict[tuple[str, str], AlertInfo] = {
        (a.name, a.slo.name): a for a in ruleset.alerts if a.name != ABSENT_ALERT
    }
    python = {(t.alert, bt.slo.name): t.firing for bt in results for t in bt.tracks}
    n = next(iter(python.values())).size
    names = sorted({alert for alert, _ in python})
    tests = []
    for k in range(n):
        for name in names:
            exp = tuple(
                ExpectedAlert(dict(infos[key].labels))
                for key, firing in sorted(python.items())
                if key[0] == name and firing[k]
            )
            tests.append(AlertCase(f"{k * step}s", name, exp))
    (tmp_path / "parity.rules.yaml").write_text(render_rules(_firing_only(ruleset)))
    doc = RuleTestFile(
        ("parity.rules.yaml",),
        f"{step}s",
        (RuleTest(f"{step}s", tuple(series), tuple(tests)),),
    )
    test_file = tmp_path / "parity_test.yaml"
    test_file.write_text(render_tests(doc))
    proc = subprocess.run([str(promtool), "test", "rules", str(test_file)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    got = {key: firing.copy() for key, firing in python.items()}
    out = proc.stdout + proc.stderr
    failures = re.findall(
        r"alertname: (\w+), time: (\w+), \n(.*?)(?=\n\s+alertname: |\Z)", out, re.S
    )
    assert proc.returncode == 0 or failures, out[-3000:]
    for name, when, body in failures:
        k = 0 if when == "0s" else parse_duration(when) // step
        fired = set(re.findall(r'slo="([^"]+)"', body.split("got:", 1)[1]))
        for key in got:
            if key[0] == name:
                got[key][k] = key[1] in fired
    return python, got


def _intervals(firing: np.ndarray[Any, Any]) -> list[tuple[int, int]]:
    flips = np.flatnonzero(np.diff(np.concatenate(([0], firing.astype(np.int8), [0]))))
    return list(zip(flips[0::2].tolist(), flips[1::2].tolist(), strict=True))


def _compare(
    python: Mapping[tuple[str, str], np.ndarray[Any, Any]],
    promtool: Mapping[tuple[str, str], np.ndarray[Any, Any]],
    exact: set[str],
    late: Mapping[str, int] | None = None,
) -> dict[tuple[str, str], int]:
    """Differing evaluations per (alert, SLO); fails unless intervals match one for one within
    one evaluation at both ends (and, for SLOs in ``exact``, at every evaluation). An alert in
    ``late`` may start and end up to that many evaluations later in the rules, never earlier
    (its day-long windows are summed from the recorded 5-minute counts, which the backtest
    reads raw)."""
    differing = {}
    for key, py in python.items():
        pt = promtool[key]
        a, b = _intervals(py), _intervals(pt)
        assert len(a) == len(b), (key, a, b)
        slack = (late or {}).get(key[0])
        for (s1, e1), (s2, e2) in zip(a, b, strict=True):
            if slack is None:
                assert abs(s1 - s2) <= 1 and abs(e1 - e2) <= 1, (key, a, b)
            else:
                assert s1 <= s2 <= s1 + slack and e1 - 1 <= e2 <= e1 + slack, (key, a, b)
        differing[key] = int(np.count_nonzero(py != pt))
        if key[1] in exact and slack is None:
            assert differing[key] == 0, (key, a, b)
    return differing


@pytest.mark.promtool
def test_backtest_matches_promtool_on_what_a_real_engine_exported(
    engine_run: ScrapedRun, promtool: Path, tmp_path: Path
) -> None:
    spec = load_spec(ENGINE_SPEC)
    frame = engine_run.records
    assert (frame["status"] == "error").sum() > 30 and frame["itl_buckets"].notna().all()
    end = (engine_run.scrapes - 1) * STEP
    results = backtest_spec(spec, frame, start_s=0.0, end_s=float(end))
    assert results[0].timeline.times.size == engine_run.scrapes
    python, got = _promtool_firing(
        promtool,
        tmp_path,
        spec,
        "fleetwatch",
        results,
        [InputSeries(s["series"], s["values"]) for s in engine_run.input_series()],
        STEP,
    )
    differing = _compare(python, got, exact={"availability", "ttft", "tpot", "e2e", "goodput"})
    assert len(python) == 12 and sum(differing.values()) <= 4, differing

    fired = {(bt.slo.name, i.severity) for bt in results for i in bt.intervals}
    for name in ("availability", "ttft", "tpot", "itl", "e2e", "goodput"):
        assert (name, "page") in fired, (name, fired)
    # One slow gap in ~30 (3% of gaps, a 3x burn of ITL's 1% budget) opens an ITL ticket but no
    # page: the exporter counts gaps, not each request's largest gap (~half the requests).
    itl = next(bt for bt in results if bt.slo.name == "itl")
    stalls = FAULTS[2]
    during = [i for i in itl.intervals if stalls.start_s <= i.start_s <= stalls.end_s + 120]
    assert {i.severity for i in during} == {"ticket"}, during
    # The slow error burn: a ticket, no page, and its delay counted from its first error.
    avail = next(bt for bt in results if bt.slo.name == "availability")
    slow = [i for i in avail.intervals if i.start_s >= FAULTS[3].start_s]
    assert slow and {i.severity for i in slow} == {"ticket"}, slow
    # Every alert's delay runs from the first bad event of the fault that caused it (to the bin).
    for bt in results:
        for i in bt.intervals:
            cause = max((f for f in FAULTS if f.start_s <= i.start_s), key=lambda f: f.start_s)
            assert i.bad_since_s is not None and i.detection_delay_s is not None, i
            assert cause.start_s - STEP <= i.bad_since_s <= i.start_s, (bt.slo.name, i, cause)
            assert i.window_delay_s is not None and i.window_delay_s <= i.detection_delay_s + STEP


VLLM_SPEC = """
service: parity
evaluation_interval: 60s
slos:
  - name: availability
    objective: 99.9
    sli: {kind: availability, bad: [error, aborted]}
  - name: tpot
    objective: 99
    period: 28d
    sli: {kind: latency, signal: tpot, threshold: 0.05}
"""


def _traffic() -> pd.DataFrame:
    rng = np.random.default_rng(7)
    h = 3600.0
    incidents = [
        Incident(2 * h, 2.5 * h, latency_factor=6.0),
        Incident(4 * h, 4 * h + 1200, error_ratio=0.3),
        Incident(7 * h, 12 * h, error_ratio=0.004),
        Incident(14 * h, 14 * h + 600, error_ratio=1.0, latency_factor=3.0),
    ]
    return synthetic_records(rng, n=35_000, start_s=120.0, duration_s=16 * h - 600,
                             incidents=incidents, classes=("chat", "batch"))  # fmt: skip


@pytest.mark.promtool
def test_vllm_rules_fire_with_the_backtest_on_series_from_records(
    promtool: Path, tmp_path: Path
) -> None:
    spec = load_spec(VLLM_SPEC)
    frame = _traffic()
    steps = 16 * 3600 // 60
    results = backtest_spec(spec, frame, start_s=0.0, end_s=float(steps * 60))
    series = records_series(spec, get_profile("vllm"), frame, step_s=60, steps=steps)
    python, got = _promtool_firing(promtool, tmp_path, spec, "vllm", results, series, 60)
    # the tickets' 1d and 3d windows are summed 5-minute counts: up to 2.5 minutes later
    tickets = {"SLOAvailabilitySlowBurn": 3, "SLOLatencySlowBurn": 3}
    _compare(python, got, exact={"availability", "tpot"}, late=tickets)
    assert sum(len(bt.intervals) for bt in results) >= 3
