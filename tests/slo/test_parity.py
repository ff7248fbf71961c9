"""The central test: the Python backtest and promtool, running the generated rules on the same
synthetic traffic, agree on when every burn-rate alert fires.

Records with scripted incidents are turned into the counters the fleetwatch profile exports
(sampled every evaluation interval), and the Python firing state at many evaluation times is
written as promtool ``alert_rule_test`` expectations. Evaluations within one interval of a
Python transition are left out: the claim is agreement within one evaluation interval.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from fleetwatch.scenarios.slo_records import Incident, synthetic_records
from slo.load import load_spec
from slo.report import backtest_spec
from slo.rules import generate_rules, render_rules, render_tests
from slo.rules.generate import ABSENT_ALERT
from slo.rules.series import records_series
from telemetry.profiles import get_profile

STEP = 60
HOURS = 16

SPECS = {
    # Per-class availability with a minimum-events guard, TTFT latency, goodput on a 7-day period.
    "fleetwatch": f"""
service: parity
evaluation_interval: {STEP}s
slos:
  - name: availability
    objective: 99.9
    selector: {{traffic_class: chat}}
    sli: {{kind: availability, bad: [error]}}
    min_events: 30
  - name: ttft
    objective: 99
    sli: {{kind: latency, signal: ttft, threshold: 0.5}}
  - name: goodput
    objective: 98
    period: 7d
    sli: {{kind: goodput, ttft: 1, tpot: 0.05}}
""",
    # vLLM: outcomes as finished_reason values, a bad outcome (abort) that never occurs, TPOT.
    "vllm": f"""
service: parity
evaluation_interval: {STEP}s
slos:
  - name: availability
    objective: 99.9
    sli: {{kind: availability, bad: [error, aborted]}}
  - name: tpot
    objective: 99
    period: 28d
    sli: {{kind: latency, signal: tpot, threshold: 0.05}}
""",
}


def _traffic() -> object:
    rng = np.random.default_rng(7)
    h = 3600.0
    incidents = [
        Incident(2 * h, 2.5 * h, latency_factor=6.0),
        Incident(4 * h, 4 * h + 1200, error_ratio=0.3),
        Incident(7 * h, 12 * h, error_ratio=0.004),
        Incident(14 * h, 14 * h + 600, error_ratio=1.0, latency_factor=3.0),
    ]
    return synthetic_records(
        rng,
        n=35_000,
        start_s=120.0,
        duration_s=HOURS * h - 600,
        incidents=incidents,
        classes=("chat", "batch"),
    )


@pytest.mark.promtool
@pytest.mark.parametrize("profile_name", list(SPECS))
def test_python_backtest_and_promtool_fire_the_same_intervals(
    profile_name: str, promtool: Path, tmp_path: Path
) -> None:
    spec = load_spec(SPECS[profile_name])
    profile = get_profile(profile_name)
    frame = _traffic()
    steps = HOURS * 3600 // STEP
    end = steps * STEP
    results = backtest_spec(spec, frame, start_s=0.0, end_s=float(end))

    # Python's firing state per alert name (several SLOs may share one name) at each evaluation.
    ruleset = generate_rules(spec, profile)
    infos = {(a.slo.name, a.name): a for a in ruleset.alerts if a.name != ABSENT_ALERT}
    by_name: dict[str, list[tuple[object, np.ndarray]]] = {}
    transitions: set[int] = set()
    n_intervals = {"page": 0, "ticket": 0}
    for bt in results:
        assert bt.timeline.times[0] == 0.0 and bt.timeline.times.size == steps + 1
        for track in bt.tracks:
            by_name.setdefault(track.alert, []).append(
                (infos[(bt.slo.name, track.alert)], track.firing)
            )
            flips = np.flatnonzero(np.diff(track.firing.astype(np.int8))) + 1
            transitions.update(int(k) for k in flips)
        for interval in bt.intervals:
            n_intervals[interval.severity] += 1
    assert n_intervals["page"] >= 2 and n_intervals["ticket"] >= 1, n_intervals

    near = {k + d for k in transitions for d in (-1, 0, 1)}
    checked = sorted(
        {k for k in range(steps + 1) if k % 10 == 0}
        | {k + d for k in transitions for d in (-3, -2, 2, 3)}
    )
    checked = [k for k in checked if 0 <= k <= steps and k not in near]
    alert_tests = []
    for name, tracks in sorted(by_name.items()):
        for k in checked:
            exp = [
                {"exp_labels": dict(info.labels), "exp_annotations": dict(info.annotations)}
                for info, firing in tracks
                if firing[k]
            ]
            alert_tests.append({"eval_time": f"{k * STEP}s", "alertname": name, "exp_alerts": exp})
    firing_checks = sum(1 for t in alert_tests if t["exp_alerts"])
    assert firing_checks > 50

    rules_file = tmp_path / "parity.rules.yaml"
    rules_file.write_text(render_rules(ruleset))
    series = records_series(spec, profile, frame, step_s=STEP, steps=steps)
    doc = {
        "rule_files": [rules_file.name],
        "evaluation_interval": f"{STEP}s",
        "tests": [{"interval": f"{STEP}s", "input_series": series, "alert_rule_test": alert_tests}],
    }
    test_file = tmp_path / "parity.test.yaml"
    test_file.write_text(render_tests(doc))
    proc = subprocess.run(
        [str(promtool), "test", "rules", str(test_file)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
