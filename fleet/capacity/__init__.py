"""Capacity planning: replicas, warm pool and scaling delays from a probe's capacity curve
(``plan``), queue-depth autoscaling manifests and rules (``manifests``), and a seeded burst
simulator comparing scaling signals (``simulate``)."""

from fleetwatch.fleet.capacity.plan import (
    CapacityPlan,
    CurvePoint,
    PlanInputs,
    curve_from_probe,
    plan_capacity,
)

__all__ = ["CapacityPlan", "CurvePoint", "PlanInputs", "curve_from_probe", "plan_capacity"]
