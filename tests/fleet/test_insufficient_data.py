"""No false all-clear: a source with no request counts or signals is insufficient data, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from fleetwatch.cli import main
from fleetwatch.core.profiles import Signal, get_profile
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.outliers import detect, table_from_metrics_dir, table_from_prometheus


def _fleetwatch_snapshot(requests: int = 200) -> str:
    p = get_profile("fleetwatch")
    reg = CollectorRegistry()
    for sig in (Signal.TTFT, Signal.TPOT, Signal.E2E):
        ref = p.metric(sig)
        h = Histogram(ref.name, "x", buckets=ref.buckets, registry=reg)
        for i in range(requests):
            h.observe(0.05 + 0.001 * (i % 7))
    total = p.outcomes.total
    c = Counter(total.name.removesuffix("_total"), "x", ["status"], registry=reg)
    c.labels("ok").inc(requests)
    return generate_latest(reg).decode()


def _dir(tmp_path: Path, texts: dict[str, str]) -> Path:
    for name, text in texts.items():
        (tmp_path / f"{name}.prom").write_text(text)
    return tmp_path


def test_three_empty_snapshots_are_insufficient_data_not_no_outlier(tmp_path, capsys):
    d = _dir(tmp_path, {f"replica-{i}": "" for i in (1, 2, 3)})
    with pytest.raises(AnalysisError) as exc:
        table_from_metrics_dir(d, get_profile("fleetwatch"))
    msg = str(exc.value)
    assert "replica-1.prom, replica-2.prom, replica-3.prom" in msg
    assert "fleetwatch_requests_total" in msg and "latency" in msg
    assert main(["fleet", "outliers", "--metrics-dir", str(d)]) == 2
    out = capsys.readouterr()
    assert "no outlier" not in out.out and out.err.count("\n") == 1
    assert "replica-3.prom" in out.err


def test_wrong_profile_names_the_profile_whose_series_are_there(tmp_path, capsys):
    d = _dir(tmp_path, {f"replica-{i}": _fleetwatch_snapshot() for i in (1, 2, 3)})
    assert len(detect(table_from_metrics_dir(d, get_profile("fleetwatch"))).judged) == 3
    code = main(["fleet", "outliers", "--metrics-dir", str(d), "--profile", "vllm"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "no vllm:request_success_total or latency series in" in err
    assert "replica-1.prom, replica-2.prom, replica-3.prom" in err
    assert "wrong --profile? (fleetwatch series found)" in err


def test_one_empty_snapshot_among_good_ones_is_named_alone(tmp_path):
    texts = {f"replica-{i}": _fleetwatch_snapshot() for i in (1, 2, 3)}
    texts["replica-4"] = ""
    d = _dir(tmp_path, texts)
    with pytest.raises(AnalysisError, match=r"series in replica-4\.prom: ") as exc:
        table_from_metrics_dir(d, get_profile("fleetwatch"))
    assert "replica-1" not in str(exc.value)


def test_zero_requests_is_data_left_to_the_volume_gate(tmp_path):
    d = _dir(tmp_path, {f"replica-{i}": _fleetwatch_snapshot(0) for i in (1, 2, 3)})
    table = table_from_metrics_dir(d, get_profile("fleetwatch"))
    assert (table.volume == 0).all()


def _api(results: dict[str, list[dict]]):
    """A fake Prometheus: the result vector of the first key contained in the query."""

    def fetch(url: str) -> bytes:
        result = next((v for k, v in results.items() if k in url), [])
        doc = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return json.dumps(doc).encode()

    return fetch


def test_prometheus_with_no_results_is_insufficient_data():
    with pytest.raises(AnalysisError, match=r"no fleetwatch_requests_total or latency series"):
        table_from_prometheus("http://p", get_profile("fleetwatch"), fetch=_api({}))


def test_prometheus_replicas_with_only_nan_latencies_are_insufficient_data():
    nan = [{"metric": {"replica": f"r{i}"}, "value": [0, "NaN"]} for i in range(3)]
    fetch = _api({"histogram_quantile": nan})
    with pytest.raises(AnalysisError, match=r"replica=r0, replica=r1, replica=r2"):
        table_from_prometheus("http://p", get_profile("fleetwatch"), fetch=fetch)


def test_prometheus_hint_names_the_profile_that_has_series():
    hit = [{"metric": {}, "value": [0, "3"]}]
    fetch = _api({"vllm%3Arequest_success_total": hit})
    with pytest.raises(AnalysisError, match=r"wrong --profile\? \(vllm series found\)"):
        table_from_prometheus("http://p", get_profile("fleetwatch"), fetch=fetch)
