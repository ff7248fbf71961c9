"""The demo end to end, once, under a real Prometheus: every assertion reads the same run.

Prometheus is queried through its HTTP API from inside the run (after the traffic, before it
stops), independently of the demo's own summary. The demo keeps the fleet serving until
Prometheus has judged every replica (``fleet_phase.judged``), however busy the machine, so no
assertion here depends on how fast the host ran the run.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from fleetwatch.demo.run import DemoResult, run_demo
from fleetwatch.demo.scenario import DemoConfig

DURATION_S = 45.0
PAGE_ALERT = "SLOAvailabilityFastBurn"
OUTLIER_ALERT = "FleetReplicaOutlier"
LAG_S = 8.0
"""Scrape (1 s) + rate extrapolation + rule evaluation (1 s): how late Prometheus may see a burst."""

# The whole demo runs once in the fixture; on a busy 2-core machine (load 12–15) that alone takes
# 4–5 minutes, past the suite's default 300 s per test.
pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.promtool,
    pytest.mark.slow,
    pytest.mark.timeout(900),
]


def _get(url: str, path: str, params: dict[str, str]) -> Any:
    with urllib.request.urlopen(f"{url}{path}?{urllib.parse.urlencode(params)}", timeout=10) as r:
        body = json.loads(r.read())
    assert body["status"] == "success", body
    return body["data"]


class Seen:
    """What the test read from Prometheus's HTTP API during the run."""

    alerts: list[dict[str, Any]]
    judged: bool
    burst: tuple[float, float]
    start: float
    targets: list[dict[str, Any]]
    up: list[dict[str, Any]]


@pytest.fixture(scope="module")
def demo_run(
    tmp_path_factory: pytest.TempPathFactory, prometheus_bin: Path, promtool: Path
) -> tuple[DemoResult, Seen]:
    out = tmp_path_factory.mktemp("demo-out")
    seen = Seen()

    def inspect(prom: Any, run: Any) -> None:
        from fleetwatch.demo.fleet_phase import judged

        seen.judged = judged(prom, run.end_s, 4)
        seen.burst = run.burst_s
        seen.start = run.start_s
        now = _get(prom.url, "/api/v1/query", {"query": "time()"})["result"][0]
        seen.alerts = _get(
            prom.url,
            "/api/v1/query_range",
            {
                "query": 'ALERTS{alertstate="firing"}',
                "start": f"{run.start_s - 5:.3f}",
                "end": f"{float(now):.3f}",
                "step": "1",
            },
        )["result"]
        seen.targets = _get(prom.url, "/api/v1/targets", {"state": "active"})["activeTargets"]
        span = int(float(now) - run.start_s) + 1
        seen.up = _get(prom.url, "/api/v1/query", {"query": f"avg_over_time(up[{span}s])"})[
            "result"
        ]

    result = run_demo(
        out, DemoConfig(duration_s=DURATION_S, seed=0), prometheus=True, inspect=inspect
    )
    return result, seen


def _firing_times(seen: Seen, alertname: str, **labels: str) -> list[float]:
    return sorted(
        float(t)
        for s in seen.alerts
        if s["metric"].get("alertname") == alertname
        and all(s["metric"].get(k) == v for k, v in labels.items())
        for t, _ in s["values"]
    )


def test_prometheus_scraped_all_four_replicas(demo_run: tuple[DemoResult, Seen]) -> None:
    _, seen = demo_run
    assert len(seen.targets) == 4
    # every replica answered its scrapes through the run; one slow /metrics on a busy host can
    # leave the latest scrape "down" without the series missing anything the rules read
    share = {s["metric"]["instance"]: float(s["value"][1]) for s in seen.up}
    assert len(share) == 4 and all(v >= 0.9 for v in share.values()), (share, seen.targets)


def test_page_alert_fires_in_prometheus_during_the_error_burst(
    demo_run: tuple[DemoResult, Seen],
) -> None:
    _, seen = demo_run
    times = _firing_times(seen, PAGE_ALERT, slo="availability")
    assert times, f"{PAGE_ALERT} never fired in Prometheus"
    start, end = seen.burst
    assert start <= times[0] <= end + LAG_S, (times[0] - seen.start, start - seen.start)


def test_outlier_rule_flags_the_slowed_replica_not_the_long_prompt_one(
    demo_run: tuple[DemoResult, Seen],
) -> None:
    _, seen = demo_run
    # every replica was in the rules for their `for:` and the end was scraped and evaluated
    assert seen.judged
    flagged = {
        s["metric"].get("replica") for s in seen.alerts if s["metric"]["alertname"] == OUTLIER_ALERT
    }
    assert "replica-1" in flagged
    assert "replica-3" not in flagged


def test_findings_blame_the_slowed_replica_and_not_the_long_prompt_one(
    demo_run: tuple[DemoResult, Seen],
) -> None:
    result, _ = demo_run
    by_replica = {v["replica"]: v for v in result.summary["verdicts"]}
    assert by_replica["replica-1"]["found_side"] == "replica"
    assert by_replica["replica-3"]["found_side"] == "workload"
    assert by_replica["replica-3"]["cause"] == "prompt_length_mix"


def test_backtest_pages_during_the_burst(demo_run: tuple[DemoResult, Seen]) -> None:
    result, _ = demo_run
    page = result.summary["slo"]["page"]
    assert page["alert"] == PAGE_ALERT
    assert page["during_burst"], page


def test_summary_lines_say_what_was_found(demo_run: tuple[DemoResult, Seen]) -> None:
    result, _ = demo_run
    text = "\n".join(result.lines)
    assert "replica-1 (slowed): replica-side" in text
    assert "replica-3 (sent only long prompts): workload-side" in text
    assert f"page alert {PAGE_ALERT} fired" in text
    assert "outlier rule flagged replica-1" in text


def test_records_parquet_is_readable_and_complete(demo_run: tuple[DemoResult, Seen]) -> None:
    from fleetwatch.records import read_records

    result, _ = demo_run
    frame = read_records(result.out / "records.parquet")
    assert len(frame) == result.summary["run"]["requests"] == result.summary["run"]["planned"]
    assert set(frame["replica"].astype(str)) == {f"replica-{i}" for i in range(4)}
    assert (frame["status"].astype(str) == "error").sum() > 0


def test_rules_pass_promtool(demo_run: tuple[DemoResult, Seen], promtool: Path) -> None:
    result, _ = demo_run
    rules = sorted((result.out / "rules").glob("*.rules.yaml"))
    assert [p.name for p in rules] == [
        "operational.rules.yaml",
        "outliers.rules.yaml",
        "slo.rules.yaml",
    ]
    done = subprocess.run(
        [str(promtool), "check", "rules", *map(str, rules)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # `promtool test rules` ran during the demo (it takes tens of seconds for the SLO tests).
    checks = {c["command"].split()[1]: c for c in result.summary["promtool"]}
    assert checks["check"]["ok"] and checks["test"]["ok"], checks


def test_output_folder_holds_every_artifact(demo_run: tuple[DemoResult, Seen]) -> None:
    result, _ = demo_run
    out = result.out
    for name in result.summary["files"]:
        assert (out / name).is_file(), name
    dashboards = sorted((out / "dashboards").glob("*.json"))
    assert len(dashboards) == 4
    for d in dashboards:
        assert json.loads(d.read_text())["panels"]
    spans = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
    assert spans
    # each served replica's cold start: one startup span with a child per phase, and the
    # summary's phase seconds
    starts = [s for s in spans if s["name"] == "startup reference"]
    assert len(starts) == 4
    ids = {x["context"]["span_id"] for x in starts}
    phases = {s["name"] for s in spans if s.get("parent_id") in ids}
    assert phases == {"weights_load", "kv_cache_alloc", "server_start", "warmup", "readiness"}
    for r in result.summary["replicas"]:
        assert set(r["startup_s"]) == phases and all(v >= 0 for v in r["startup_s"].values())
    assert "cold start: slowest replica-" in "\n".join(result.lines)
    assert json.loads((out / "summary.json").read_text())["verdicts"]


def test_report_has_the_four_plots(demo_run: tuple[DemoResult, Seen]) -> None:
    result, _ = demo_run
    page = (result.out / "report.html").read_text()
    assert page.count("<svg") == 4
    for title in (
        "Error budget and burn rate",
        "Each replica against the fleet median",
        "Where the tail comes from",
        "Latency against throughput, with the bandwidth bound",
        "What Prometheus saw",
    ):
        assert title in page


def _browser() -> str | None:
    import shutil

    return next(
        (p for n in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(n))),
        None,
    )


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium: apt-get install chromium")
def test_report_renders_in_headless_chromium(
    demo_run: tuple[DemoResult, Seen], tmp_path: Path
) -> None:
    """A person's view of the report: a real browser renders it, and the page is not blank."""
    from matplotlib.image import imread

    result, _ = demo_run
    shot = tmp_path / "report.png"
    browser = _browser()
    assert browser is not None
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1100,3600",
            f"--screenshot={shot}",
            (result.out / "report.html").resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.is_file(), done.stderr[-2000:]
    pixels = imread(shot)
    assert pixels.shape[:2] == (3600, 1100)
    ink = (pixels[..., :3].mean(axis=2) < 0.9).mean()
    assert ink > 0.02, f"only {ink:.1%} of the page is drawn on"
