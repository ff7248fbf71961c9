"""The bandwidth bound for ``probe bound`` and the probe's bound column: the arithmetic is
``fleetwatch.core.bound`` (``fleet capacity`` plans from it too); here its errors are the probe's
own (``ProbeError``, one line and exit 2) and the reference engine's config is read as a shape."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, ParamSpec, TypeVar

from fleetwatch.core import bound as _bound
from fleetwatch.core.bound import BoundPoint, CapacityReport
from fleetwatch.core.model import ModelShape, ModelShapeError
from fleetwatch.engine_probe.probe.errors import ProbeError

__all__ = [
    "BoundPoint",
    "CapacityReport",
    "bound_at",
    "capacity_report",
    "shape_from_model_config",
]

P = ParamSpec("P")
R = TypeVar("R")


def _probe_errors(fn: Callable[P, R]) -> Callable[P, R]:
    @wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except ModelShapeError as exc:
            raise ProbeError(str(exc)) from None

    return run


bound_at = _probe_errors(_bound.bound_at)
capacity_report = _probe_errors(_bound.capacity_report)


def shape_from_model_config(mc: Any) -> ModelShape:
    """Shape of the reference engine's ``ModelConfig`` (duck-typed: no engine import here)."""
    return ModelShape(
        name=str(getattr(mc, "name", "reference")),
        num_layers=int(mc.num_layers),
        hidden_size=int(mc.hidden_size),
        num_heads=int(mc.num_heads),
        num_kv_heads=int(mc.num_kv_heads),
        head_dim=int(mc.head_dim),
        total_params=float(mc.num_params),
    )
