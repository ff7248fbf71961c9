"""Import OpenSLO v1 ratio SLOs (``kind: SLO`` with an inline ``ratioMetric`` indicator).

Mapping: ``spec.service`` -> service; ``metadata.name`` -> SLO name; ``objectives[0].target``
(0..1) or ``targetPercent`` -> objective; ``timeWindow[0].duration`` (rolling) -> period;
``ratioMetric.good|bad`` and ``total`` Prometheus queries -> a ``ratio`` SLI. Only counter
selectors (``metric{labels}``) are accepted, since the rules wrap them in ``increase()``.
Calendar windows, Timeslices budgeting and several objectives per SLO are refused with the path
of the field. Burn windows are the Workbook table scaled to the period.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fleetwatch.core.brief import brief
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.parse import parse_spec
from fleetwatch.slo.spec import SLOSpec

__all__ = ["parse_openslo"]


def _get(data: Any, path: str, *keys: str) -> Any:
    cur = data
    where = path
    for key in keys:
        where = f"{where}.{key}"
        if not isinstance(cur, Mapping) or key not in cur:
            raise SLOSpecError("is missing", path=where)
        cur = cur[key]
    return cur


def _query(metric: Any, path: str) -> str:
    source = _get(metric, path, "metricSource")
    kind = source.get("type") if isinstance(source, Mapping) else None
    if kind != "Prometheus":
        raise SLOSpecError(
            f"only Prometheus metric sources are supported, got {brief(kind)}",
            path=f"{path}.metricSource.type",
        )
    query = _get(source, f"{path}.metricSource", "spec", "query")
    if not isinstance(query, str):
        raise SLOSpecError("must be a string", path=f"{path}.metricSource.spec.query")
    return query.strip()


def parse_openslo(docs: Sequence[Any]) -> SLOSpec:
    """OpenSLO documents (``kind: SLO`` among them) to an ``SLOSpec``; other kinds are skipped."""
    services: set[str] = set()
    slos: list[dict[str, Any]] = []
    for i, doc in enumerate(docs):
        path = f"documents[{i}]"
        if not isinstance(doc, Mapping) or doc.get("kind") != "SLO":
            continue
        if doc.get("apiVersion") != "openslo/v1":
            raise SLOSpecError(
                f"only openslo/v1 is supported, got {brief(doc.get('apiVersion'))}",
                path=f"{path}.apiVersion",
            )
        spec = _get(doc, path, "spec")
        service = _get(spec, f"{path}.spec", "service")
        services.add(service[:100] if isinstance(service, str) else brief(service))
        method = spec.get("budgetingMethod", "Occurrences")
        if method != "Occurrences":
            raise SLOSpecError(
                f"only Occurrences budgeting is supported, got {brief(method)}",
                path=f"{path}.spec.budgetingMethod",
            )
        windows = _get(spec, f"{path}.spec", "timeWindow")
        if not isinstance(windows, list) or len(windows) != 1:
            raise SLOSpecError("must hold exactly one window", path=f"{path}.spec.timeWindow")
        if windows[0].get("isRolling", True) is not True:
            raise SLOSpecError(
                "calendar windows are not supported (rolling only)",
                path=f"{path}.spec.timeWindow[0].isRolling",
            )
        period = _get(windows[0], f"{path}.spec.timeWindow[0]", "duration")
        objectives = _get(spec, f"{path}.spec", "objectives")
        if not isinstance(objectives, list) or len(objectives) != 1:
            raise SLOSpecError("must hold exactly one objective", path=f"{path}.spec.objectives")
        obj = objectives[0]
        if isinstance(obj, Mapping) and "targetPercent" in obj:
            objective = obj["targetPercent"]
        else:
            target = _get(obj, f"{path}.spec.objectives[0]", "target")
            if isinstance(target, bool) or not isinstance(target, int | float):
                raise SLOSpecError("must be a number", path=f"{path}.spec.objectives[0].target")
            objective = round(float(target) * 100, 10)
        ipath = f"{path}.spec.indicator.spec.ratioMetric"
        ratio = _get(spec, f"{path}.spec", "indicator", "spec", "ratioMetric")
        if isinstance(ratio, Mapping) and ratio.get("counter") is False:
            raise SLOSpecError("only counter ratio metrics are supported", path=f"{ipath}.counter")
        sli: dict[str, Any] = {
            "kind": "ratio",
            "total": _query(_get(ratio, ipath, "total"), f"{ipath}.total"),
        }
        if isinstance(ratio, Mapping) and "good" in ratio:
            sli["good"] = _query(ratio["good"], f"{ipath}.good")
        else:
            sli["bad"] = _query(_get(ratio, ipath, "bad"), f"{ipath}.bad")
        name = _get(doc, path, "metadata", "name")
        slos.append(
            {"name": name, "objective": objective, "period": period, "sli": sli,
             "description": str(spec.get("description", ""))}
        )  # fmt: skip
    if not slos:
        raise SLOSpecError("no OpenSLO document of kind SLO", path="(root)")
    if len(services) != 1:
        raise SLOSpecError(
            f"all SLOs must belong to one service, got {', '.join(sorted(services))}",
            path="documents[*].spec.service",
        )
    return parse_spec({"service": services.pop(), "slos": slos})
