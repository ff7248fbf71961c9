"""PodMonitors for vLLM and ``fleetwatch engine serve``: the endpoint each engine really serves,
the selector, namespaces and ``job`` as asked, and bad input refused by name. (Validity against
prometheus-operator's CRD: tests/dashboards/test_kubernetes.py.)"""

from __future__ import annotations

import inspect

import pytest

from fleetwatch.core.kubernetes import ManifestError
from fleetwatch.fleet.podmonitor import ENGINES, pod_monitor


def _monitor(**changes: object) -> dict[str, object]:
    args: dict[str, object] = {
        "namespace": "llm",
        "match_labels": {"app.kubernetes.io/name": "vllm"},
        "port": "http",
    }
    engine = str(changes.pop("engine", "vllm"))
    name = str(changes.pop("name", "vllm"))
    return pod_monitor(engine, name, **{**args, **changes})  # type: ignore[arg-type]


def test_a_pod_monitor_scrapes_the_named_port_of_the_selected_pods() -> None:
    assert _monitor() == {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "vllm", "namespace": "llm"},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "vllm"}},
            "podMetricsEndpoints": [{"port": "http", "path": "/metrics", "interval": "15s"}],
        },
    }


def test_namespaces_job_and_labels_as_asked() -> None:
    spec = _monitor(namespaces=["llm-a", "llm-b"], job="vllm", labels={"release": "p"})
    assert spec["metadata"] == {"name": "vllm", "namespace": "llm", "labels": {"release": "p"}}
    assert spec["spec"]["namespaceSelector"] == {"matchNames": ["llm-a", "llm-b"]}  # type: ignore[index]
    [endpoint] = spec["spec"]["podMetricsEndpoints"]  # type: ignore[index]
    # the operator's own relabelings set namespace, pod and container; job only when asked
    assert endpoint["relabelings"] == [{"targetLabel": "job", "replacement": "vllm"}]
    assert _monitor(any_namespace=True)["spec"]["namespaceSelector"] == {"any": True}  # type: ignore[index]
    assert "relabelings" not in _monitor()["spec"]["podMetricsEndpoints"][0]  # type: ignore[index]


def test_fleetwatch_serve_is_scraped_where_it_serves_metrics() -> None:
    from fleetwatch.engine_probe.serve.command.cli import serve
    from fleetwatch.engine_probe.serve.server import CompletionServer

    routes = inspect.getsource(CompletionServer.app)
    assert f'add_get("{ENGINES["fleetwatch"].path}", self.status.metrics)' in routes
    assert inspect.signature(serve).parameters["port"].default.default == (
        ENGINES["fleetwatch"].default_port
    )
    assert _monitor(engine="fleetwatch")["spec"]["podMetricsEndpoints"][0]["path"] == "/metrics"  # type: ignore[index]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"engine": "tgi"}, r"no metrics endpoint known for engine 'tgi'; known: fleetwatch, vllm"),
        ({"name": "vLLM"}, r"PodMonitor name 'vLLM': must be a DNS-1123 subdomain"),
        ({"namespace": "LLM"}, r"PodMonitor namespace 'LLM': must be a DNS-1123 label"),
        ({"match_labels": {}}, r"selector.matchLabels: empty; it would scrape every pod"),
        ({"match_labels": {"app": "v llm"}}, r"selector.matchLabels: label 'app': value 'v llm'"),
        ({"port": "8000"}, r"PodMonitor port '8000': must be a container port name"),
        ({"interval": "15 s"}, r"PodMonitor interval: must be a duration such as 5m"),
        ({"interval": "0s"}, r"PodMonitor interval: must be longer than zero"),
        ({"namespaces": "llm-a"}, r"namespaces: a list of namespaces, got the string 'llm-a'"),
        ({"namespaces": ["Bad"]}, r"namespaceSelector.matchNames 'Bad': must be a DNS-1123 label"),
        ({"namespaces": ["a"], "any_namespace": True}, r"namespaces and any_namespace exclude"),
        ({"job": ""}, r"PodMonitor job: must be a non-empty string"),
        ({"labels": {"release": 1}}, r"metadata.labels: label 'release': value 1 is not a string"),
    ],
)
def test_bad_input_is_refused_by_name(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        _monitor(**changes)
