"""PodMonitors: the prometheus-operator objects (``monitoring.coreos.com/v1``) that make Prometheus
scrape a fleet's engine pods, vLLM's or ``fleetwatch engine serve``'s.

Both serve Prometheus metrics at ``/metrics`` on their HTTP serving port (8000 unless ``--port``
says otherwise): the pod must declare that port by name (``ports: [{name: http, containerPort:
8000}]``), and the PodMonitor names it. ``fleetwatch engine serve`` binds 127.0.0.1 unless told
``--host 0.0.0.0``, so in a pod it must be; ``vllm serve`` listens on every address by default.

Targets get ``namespace``, ``pod`` and ``container`` labels (and ``endpoint``, the port name)
from the operator itself, so a label scheme naming replicas by ``(namespace, pod)`` works as
generated. ``job`` is ``<namespace>/<PodMonitor name>`` unless ``job`` is given: a scheme whose
matchers say ``job="vllm"`` needs ``job="vllm"`` here.

>>> monitor = pod_monitor("vllm", "vllm", namespace="llm", match_labels={"app": "vllm"}, port="http")
>>> monitor["spec"]["podMetricsEndpoints"]
[{'port': 'http', 'path': '/metrics', 'interval': '15s'}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fleetwatch.core.brief import brief
from fleetwatch.core.duration import parse_duration
from fleetwatch.core.kubernetes import (
    ManifestError,
    check_dns_label,
    check_labels,
    check_port_name,
    object_metadata,
)

__all__ = ["API_VERSION", "ENGINES", "KIND", "MetricsEndpoint", "pod_monitor"]

API_VERSION: Final = "monitoring.coreos.com/v1"
KIND: Final = "PodMonitor"


@dataclass(frozen=True, slots=True)
class MetricsEndpoint:
    """Where an engine serves its metrics: HTTP ``path`` on its serving port, whose number is
    ``default_port`` unless the engine is told another."""

    path: str
    default_port: int


ENGINES: Final[Mapping[str, MetricsEndpoint]] = {
    # vllm serve: /metrics is mounted on the OpenAI API server (vllm/entrypoints/serve/
    # instrumentator/metrics.py), which listens on --port (8000).
    "vllm": MetricsEndpoint("/metrics", 8000),
    # fleetwatch engine serve: engine_probe/serve/server.py routes /metrics (--port 8000).
    "fleetwatch": MetricsEndpoint("/metrics", 8000),
}
"""Engines a PodMonitor is made for, by profile name."""


def _interval(value: str) -> str:
    try:
        parse_duration(value)
    except ValueError as exc:
        raise ManifestError(f"{KIND} interval: {exc}") from None
    return value


def _namespace_selector(namespaces: Sequence[str], any_namespace: bool) -> dict[str, Any] | None:
    if isinstance(namespaces, str):
        raise ManifestError(
            f"{KIND} namespaces: a list of namespaces, got the string {namespaces!r}"
        )
    if any_namespace and namespaces:
        raise ManifestError(f"{KIND}: namespaces and any_namespace exclude each other")
    if any_namespace:
        return {"any": True}
    if namespaces:
        names = [check_dns_label(f"{KIND} namespaceSelector.matchNames", n) for n in namespaces]
        return {"matchNames": names}
    return None


def pod_monitor(
    engine: str,
    name: str,
    *,
    namespace: str,
    match_labels: Mapping[str, str],
    port: str,
    interval: str = "15s",
    namespaces: Sequence[str] = (),
    any_namespace: bool = False,
    job: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A PodMonitor ``name`` in ``namespace`` scraping ``engine``'s metrics (an ``ENGINES`` key)
    every ``interval`` (a Prometheus duration) from the container port named ``port`` of the pods
    whose labels include ``match_labels``. Pods are looked for in the PodMonitor's own namespace,
    in ``namespaces``, or in all with ``any_namespace``; ``job`` replaces the operator's ``job``
    label value; ``labels`` go on the PodMonitor (what the operator's ``podMonitorSelector``
    matches, e.g. ``release: prometheus``). ``ManifestError`` names the first bad input."""
    endpoint = ENGINES.get(engine)
    if endpoint is None:
        raise ManifestError(
            f"{KIND}: no metrics endpoint known for engine {brief(engine)}; known: "
            + ", ".join(sorted(ENGINES))
        )
    selector = check_labels(f"{KIND} selector.matchLabels", match_labels)
    if not selector:
        raise ManifestError(
            f"{KIND} selector.matchLabels: empty; it would scrape every pod of the namespace"
        )
    scrape: dict[str, Any] = {
        "port": check_port_name(f"{KIND} port", port),
        "path": endpoint.path,
        "interval": _interval(interval),
    }
    # namespace, pod and container need no relabeling: prometheus-operator adds them to every
    # PodMonitor target (pkg/prometheus/promcfg.go, generatePodMonitorConfig, v0.93.0), then job
    # = "<namespace>/<name>" and endpoint = the port name, then the relabelings given here.
    if job is not None:
        if not isinstance(job, str) or not job:
            raise ManifestError(f"{KIND} job: must be a non-empty string, got {brief(job)}")
        scrape["relabelings"] = [{"targetLabel": "job", "replacement": job}]
    spec: dict[str, Any] = {"selector": {"matchLabels": selector}}
    chosen = _namespace_selector(namespaces, any_namespace)
    if chosen is not None:
        spec["namespaceSelector"] = chosen
    spec["podMetricsEndpoints"] = [scrape]
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": object_metadata(KIND, name, namespace=namespace, labels=labels),
        "spec": spec,
    }
