"""The real Prometheus wrapper: its configuration, and one start/query/stop against the binary."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetwatch.demo.prometheus import PrometheusError, PrometheusServer, ScrapeTarget


def test_config_scrapes_each_target_with_its_labels(tmp_path: Path) -> None:
    server = PrometheusServer(
        tmp_path,
        [ScrapeTarget("127.0.0.1:1", {"replica_target": "r0"})],
        [tmp_path / "a.rules.yaml"],
        scrape_interval_s=1.0,
        evaluation_interval_s=1.0,
        binary="/bin/true",
        port=9,
    )
    cfg = server.config()
    assert cfg["global"] == {"scrape_interval": "1s", "evaluation_interval": "1s"}
    assert cfg["rule_files"] == [str((tmp_path / "a.rules.yaml").resolve())]
    [job] = cfg["scrape_configs"]
    assert job["static_configs"] == [
        {"targets": ["127.0.0.1:1"], "labels": {"replica_target": "r0"}}
    ]
    assert server.url == "http://127.0.0.1:9"


def test_missing_binary_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(PrometheusError, match="prometheus not found"):
        PrometheusServer(tmp_path, [])


@pytest.mark.prometheus
def test_real_server_answers_instant_and_range_queries(
    tmp_path: Path, prometheus_bin: Path
) -> None:
    with PrometheusServer(tmp_path, [], binary=str(prometheus_bin)) as prom:
        [sample] = prom.query("vector(42)")
        assert float(sample["value"][1]) == 42
        now = time.time()
        [series] = prom.query_range("vector(1)", now - 3, now, 1.0)
        assert len(series["values"]) >= 3
        assert prom.alerts() == []
        assert prom.targets_up() == {}
        with pytest.raises(PrometheusError):
            prom.query("this is not promql")
