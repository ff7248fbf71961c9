"""Autoscaling on queue depth: Prometheus recording rules (with a promtool test), a Kubernetes
HPA (``autoscaling/v2``, External metric) and a KEDA ScaledObject (prometheus trigger).

The signal is the profile's waiting-requests gauge (``Signal.WAITING``: vLLM
``vllm:num_requests_waiting``, SGLang ``sglang:num_queue_reqs``, fleetwatch
``fleetwatch_num_requests_waiting``, TGI ``tgi_queue_size``), summed per model: queue depth
grows with the demand a fleet cannot take, where GPU utilisation sits near 100 % whether a
replica is saturated or not. Both scalers ask for ``ceil(sum / target)`` replicas (HPA
``AverageValue``, KEDA ``threshold``), between the steady replicas plus the warm pool (held
ready and routed to: the pool is capacity that is already loaded) and the peak. Scale-up acts at
once; scale-down waits the plan's cooldown. Metric names come from ``fleetwatch.core.profiles``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fleetwatch.core.profiles import MetricRef, Profile, ProfileError, Signal
from fleetwatch.core.profiles.types import by
from fleetwatch.core.promql import format_matchers
from fleetwatch.core.rules import (
    ExpectedSample,
    ExprCase,
    InputSeries,
    RecordingRule,
    RuleFile,
    RuleGroup,
    RuleTest,
    RuleTestFile,
    render_yaml,
)
from fleetwatch.fleet.capacity.plan import CapacityPlan
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.outliers.sources.exposition import ref_labels

__all__ = [
    "ScaleTarget",
    "capacity_rules",
    "capacity_rules_test",
    "hpa_manifest",
    "keda_manifest",
    "queue_metric",
    "render_yaml",
]

QUEUE_SUM = "fleet:queue_waiting:sum"
QUEUE_AVG = "fleet:queue_waiting:avg_per_replica"
QUEUE_DESIRED = "fleet:queue_waiting:desired_replicas"


@dataclass(frozen=True, slots=True)
class ScaleTarget:
    """What is scaled and where: a Deployment ``name`` in ``namespace`` serving ``model``."""

    name: str = "llm"
    namespace: str = "default"
    model: str = "model"
    prometheus_url: str = "http://prometheus.monitoring:9090"


def queue_metric(profile: Profile) -> MetricRef:
    """The profile's waiting-requests gauge; ``AnalysisError`` when it has none."""
    try:
        ref = profile.metric(Signal.WAITING)
    except ProfileError as exc:
        raise AnalysisError(str(exc)) from None
    if ref.kind != "gauge":
        raise AnalysisError(f"profile '{profile.name}': the waiting signal is not a gauge")
    return ref


def _bounds(plan: CapacityPlan) -> tuple[int, int]:
    low = plan.replicas + plan.warm_pool_replicas
    return low, max(low, plan.peak_replicas + plan.warm_pool_replicas)


def capacity_rules(profile: Profile, plan: CapacityPlan) -> RuleFile:
    """Recording rules: the queue per model (sum, per-replica mean) and the replicas it asks for."""
    ref, fleet = queue_metric(profile), by(profile.fleet_labels)
    low, high = _bounds(plan)
    target = plan.queue_target_per_replica
    rules = (
        RecordingRule(QUEUE_SUM, f"sum by ({fleet}) ({ref.selector()})"),
        RecordingRule(QUEUE_AVG, f"avg by ({fleet}) ({ref.selector()})"),
        RecordingRule(QUEUE_DESIRED, f"clamp(ceil({QUEUE_SUM} / {target}), {low}, {high})"),
    )
    return RuleFile((RuleGroup(f"fleetwatch-fleet-capacity-{profile.name}", rules),))


def capacity_rules_test(profile: Profile, plan: CapacityPlan, rule_file: str) -> RuleTestFile:
    """A promtool test: three replicas of one model with 0, ``target`` and 5 × ``target``
    waiting; the sum, mean and desired replicas are checked one minute in, and a second model
    with an empty queue asks for the floor."""
    ref, m = queue_metric(profile), profile.model_label
    target = plan.queue_target_per_replica
    low, high = _bounds(plan)
    depths = [0, target, 5 * target]
    # the labels a fleet's records keep besides the model (routing, under a label scheme)
    shared = {
        k: v
        for k, v in profile.series_labels("m", "replica-0").items()
        if k in profile.fleet_labels and k != m
    }

    def series(model: str, rep: str, value: int) -> InputSeries:
        own = profile.series_labels(model, rep)
        labels = {**ref_labels(ref), m: model, **{k: v for k, v in own.items() if k != m}}
        return InputSeries(f"{ref.name}{{{format_matchers(labels)}}}", f"{value}x10")

    inputs = [series("m", f"replica-{i}", d) for i, d in enumerate(depths)]
    inputs.append(series("idle", "replica-9", 0))
    total = sum(depths)
    desired = min(high, max(low, math.ceil(total / target)))

    def sample(name: str, model: str, value: float) -> ExpectedSample:
        return ExpectedSample(f"{name}{{{format_matchers({m: model, **shared})}}}", value)

    checks = (
        ExprCase(QUEUE_SUM, "1m", (sample(QUEUE_SUM, "idle", 0), sample(QUEUE_SUM, "m", total))),
        ExprCase(f'{QUEUE_AVG}{{{m}="m"}}', "1m", (sample(QUEUE_AVG, "m", total / len(depths)),)),
        ExprCase(
            QUEUE_DESIRED,
            "1m",
            (sample(QUEUE_DESIRED, "idle", low), sample(QUEUE_DESIRED, "m", desired)),
        ),
    )
    return RuleTestFile((rule_file,), "1m", (RuleTest("1m", tuple(inputs), (), checks),))


def _behavior(plan: CapacityPlan) -> dict[str, Any]:
    step = max(1, plan.peak_replicas + plan.warm_pool_replicas - plan.replicas)
    sync = max(1, round(plan.inputs.sync_period_s))
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [{"type": "Pods", "value": step, "periodSeconds": sync}],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": math.ceil(plan.cooldown_s),
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
        },
    }


def _target_labels(profile: Profile, target: ScaleTarget) -> dict[str, str]:
    """The labels that pick the scaled deployment's queue: its model, and its Kubernetes
    namespace where the label scheme names replicas or routes alerts by ``namespace``."""
    labels = {profile.model_label: target.model}
    if "namespace" in profile.replica_set:
        labels["namespace"] = target.namespace
    return labels


def hpa_manifest(profile: Profile, plan: CapacityPlan, target: ScaleTarget) -> dict[str, Any]:
    """HPA on the recorded queue sum as an External metric (served by prometheus-adapter)."""
    queue_metric(profile)
    low, high = _bounds(plan)
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": f"{target.name}-queue", "namespace": target.namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target.name},
            "minReplicas": low,
            "maxReplicas": high,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {
                            "name": QUEUE_SUM,
                            "selector": {"matchLabels": _target_labels(profile, target)},
                        },
                        "target": {
                            "type": "AverageValue",
                            "averageValue": str(plan.queue_target_per_replica),
                        },
                    },
                }
            ],
            "behavior": _behavior(plan),
        },
    }


def keda_manifest(profile: Profile, plan: CapacityPlan, target: ScaleTarget) -> dict[str, Any]:
    """KEDA ScaledObject with a prometheus trigger on the same queue sum."""
    ref = queue_metric(profile)
    low, high = _bounds(plan)
    selector = ref.selector(format_matchers(_target_labels(profile, target)))
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": f"{target.name}-queue", "namespace": target.namespace},
        "spec": {
            "scaleTargetRef": {"name": target.name},
            "pollingInterval": max(1, round(plan.inputs.sync_period_s)),
            "cooldownPeriod": math.ceil(plan.cooldown_s),
            "minReplicaCount": low,
            "maxReplicaCount": high,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(plan)}},
            "triggers": [
                {
                    "type": "prometheus",
                    "metadata": {
                        "serverAddress": target.prometheus_url,
                        "query": f"sum({selector})",
                        "threshold": str(plan.queue_target_per_replica),
                    },
                }
            ],
        },
    }
