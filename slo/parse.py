"""Validate a parsed fleetwatch SLO document into ``SLOSpec``; every error names its YAML path.

The format (``version: fleetwatch/slo/v1``)::

    service: chat-api
    labels: {team: inference}            # added to every alert
    evaluation_interval: 30s             # rule group interval and backtest step
    runbook_base: runbooks/              # deprecated: links.runbooks in the labels file
    slos:
      - name: ttft
        objective: 99                    # percent, 0 < objective < 100
        period: 28d                      # any rolling length (default 30d)
        selector: {traffic_class: chat}  # optional: only these requests
        sli: {kind: latency, signal: ttft, threshold: 0.5}
        min_events: 100                  # burn alerts need this many requests in the long window
        windows: [{severity: page, long: 1h, short: 5m, burn: 14.4}, ...]   # default: Workbook
        alerting: {page: {labels: {team: oncall}}, annotations: {dashboard: "..."}}

Reading files and YAML text, and telling this format from OpenSLO, is ``fleetwatch.slo.load``'s job.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Final

from fleetwatch.core.brief import brief
from fleetwatch.core.duration import parse_duration
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.spec import (
    LATENCY_SIGNALS,
    OUTCOMES,
    SEVERITIES,
    SLI,
    Alerting,
    AvailabilitySLI,
    BurnWindow,
    GoodputSLI,
    LatencySLI,
    RatioSLI,
    Selector,
    ServiceLevelObjective,
    SLIKind,
    SLOSpec,
)
from fleetwatch.slo.windows import scaled_windows

__all__ = ["VERSION", "parse_spec"]

VERSION: Final = "fleetwatch/slo/v1"
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_LABEL: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ALERT_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SELECTOR: Final = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})?")
_MAX_LABEL_VALUE: Final = 256


def _fail(path: str, message: str) -> SLOSpecError:
    return SLOSpecError(message, path=path)


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(path, f"must be a mapping, got {_show(value)}")
    return value


def _keys(data: Mapping[str, Any], path: str, allowed: set[str]) -> None:
    for key in data:
        if key not in allowed:
            name = brief(key, 60) if not isinstance(key, str) else key[:60]
            where = f"{path}.{name}" if path else name
            raise _fail(where, f"unknown field (known: {', '.join(sorted(allowed))})")


def _show(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {brief(value)}"


def _string(value: Any, path: str, pattern: re.Pattern[str] | None = None) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(path, f"must be a non-empty string, got {_show(value)}")
    if pattern is not None and not pattern.fullmatch(value):
        raise _fail(path, f"{brief(value)} must match {pattern.pattern}")
    return value


def _number(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(path, f"must be a number, got {_show(value)}")
    return float(value)


def _seconds(value: Any, path: str) -> int:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise _fail(path, str(exc)) from None


def _labels(value: Any, path: str) -> dict[str, str]:
    if value is None:
        return {}
    out = {}
    for key, v in _mapping(value, path).items():
        _string(key, path, _LABEL)
        if isinstance(v, bool) or not isinstance(v, str | int | float):
            raise _fail(f"{path}.{key}", f"must be a string, got {_show(v)}")
        if len(str(v)) > _MAX_LABEL_VALUE:
            raise _fail(f"{path}.{key}", f"longer than {_MAX_LABEL_VALUE} characters")
        out[str(key)] = str(v)
    return out


def _annotations(value: Any, path: str) -> dict[str, str]:
    out = _labels(value, path)
    for key, v in out.items():
        if "{{" in v:
            raise _fail(
                f"{path}.{key}",
                "templates are not supported: annotations are static text "
                "(fleetwatch fills in the numbers, and the generated promtool tests compare them)",
            )
    return out


def parse_spec(data: Any) -> SLOSpec:
    """Validate a parsed YAML document into an ``SLOSpec``."""
    if data is None or (isinstance(data, Mapping) and not data):
        raise _fail("(root)", "spec is empty: expected 'service' and 'slos'")
    root = _mapping(data, "(root)")
    _keys(root, "", {"version", "service", "labels", "evaluation_interval", "runbook_base", "slos"})
    version = root.get("version", VERSION)
    if version != VERSION:
        raise _fail("version", f"must be {VERSION!r}, got {brief(version)}")
    service = _string(root.get("service"), "service", _NAME)
    labels = _labels(root.get("labels"), "labels")
    interval = _seconds(root.get("evaluation_interval", "30s"), "evaluation_interval")
    base = root.get("runbook_base")
    runbook_base = _string(base, "runbook_base") if base is not None else None
    raw_slos = root.get("slos")
    if raw_slos is None or raw_slos == []:
        raise _fail("slos", "spec has no SLOs: add at least one entry under 'slos'")
    if not isinstance(raw_slos, list):
        raise _fail("slos", f"must be a list, got {_show(raw_slos)}")
    slos = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(raw_slos):
        slo = _parse_slo(raw, f"slos[{i}]", interval)
        if slo.name in seen:
            raise _fail(
                f"slos[{i}].name",
                f"duplicate SLO name {slo.name!r} (first at slos[{seen[slo.name]}])",
            )
        seen[slo.name] = i
        slos.append(slo)
    return SLOSpec(service, tuple(slos), labels, interval, runbook_base)


def _parse_slo(raw: Any, path: str, interval: int) -> ServiceLevelObjective:
    data = _mapping(raw, path)
    _keys(
        data,
        path,
        {"name", "objective", "description", "period", "selector", "sli", "alerting",
         "windows", "min_events"},
    )  # fmt: skip
    name = _string(data.get("name"), f"{path}.name", _NAME)
    objective = _number(data.get("objective"), f"{path}.objective")
    if not 0 < objective < 100:
        raise _fail(
            f"{path}.objective", f"must be between 0 and 100 (exclusive), got {objective:g}"
        )
    period = _seconds(data.get("period", "30d"), f"{path}.period")
    if period < 2 * interval:
        raise _fail(f"{path}.period", "must be at least two evaluation intervals long")
    sli = _parse_sli(data.get("sli"), f"{path}.sli")
    selector = _parse_selector(data.get("selector"), f"{path}.selector")
    windows = _parse_windows(data.get("windows"), f"{path}.windows", period, interval)
    alerting = _parse_alerting(data.get("alerting"), f"{path}.alerting")
    min_events = data.get("min_events", 0)
    if isinstance(min_events, bool) or not isinstance(min_events, int) or min_events < 0:
        raise _fail(f"{path}.min_events", f"must be a whole number >= 0, got {_show(min_events)}")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise _fail(f"{path}.description", f"must be a string, got {_show(description)}")
    return ServiceLevelObjective(
        name=name,
        objective=objective,
        sli=sli,
        period_s=period,
        windows=windows,
        selector=selector,
        alerting=alerting,
        min_events=min_events,
        description=description,
        path=path,
    )


def _parse_sli(raw: Any, path: str) -> SLI:
    if raw is None:
        raise _fail(path, "is missing: give kind availability, latency or goodput")
    data = _mapping(raw, path)
    kind = data.get("kind")
    known = ", ".join(k.value for k in SLIKind)
    if kind not in {k.value for k in SLIKind}:
        raise _fail(f"{path}.kind", f"unknown SLI kind {brief(kind)} (known: {known})")
    if kind == SLIKind.AVAILABILITY:
        _keys(data, path, {"kind", "bad"})
        bad = data.get("bad", ["error"])
        bad_list = [bad] if isinstance(bad, str) else bad
        if not isinstance(bad_list, list) or not bad_list:
            raise _fail(f"{path}.bad", f"must list outcomes among {', '.join(OUTCOMES)}")
        for j, outcome in enumerate(bad_list):
            if outcome not in OUTCOMES:
                raise _fail(
                    f"{path}.bad[{j}]",
                    f"unknown outcome {brief(outcome)} (known: {', '.join(OUTCOMES)})",
                )
        return AvailabilitySLI(tuple(o for o in OUTCOMES if o in bad_list))
    if kind == SLIKind.LATENCY:
        _keys(data, path, {"kind", "signal", "threshold"})
        signal = data.get("signal")
        if signal not in LATENCY_SIGNALS:
            raise _fail(
                f"{path}.signal",
                f"unknown latency signal {brief(signal)} (known: {', '.join(LATENCY_SIGNALS)})",
            )
        return LatencySLI(str(signal), _positive(data.get("threshold"), f"{path}.threshold"))
    if kind == SLIKind.GOODPUT:
        _keys(data, path, {"kind", "ttft", "tpot"})
        return GoodputSLI(
            _positive(data.get("ttft"), f"{path}.ttft"),
            _positive(data.get("tpot"), f"{path}.tpot"),
        )
    _keys(data, path, {"kind", "total", "bad", "good"})
    total = _string(data.get("total"), f"{path}.total", _SELECTOR)
    bad_q, good_q = data.get("bad"), data.get("good")
    if (bad_q is None) == (good_q is None):
        raise _fail(path, "give exactly one of 'bad' and 'good'")
    return RatioSLI(
        total,
        _string(bad_q, f"{path}.bad", _SELECTOR) if bad_q is not None else None,
        _string(good_q, f"{path}.good", _SELECTOR) if good_q is not None else None,
    )


def _positive(value: Any, path: str) -> float:
    x = _number(value, path)
    if x <= 0:
        raise _fail(path, f"must be a positive number of seconds, got {x:g}")
    return x


def _parse_selector(raw: Any, path: str) -> Selector:
    if raw is None:
        return Selector()
    data = _mapping(raw, path)
    _keys(data, path, {"traffic_class", "model"})
    tc, model = data.get("traffic_class"), data.get("model")
    return Selector(
        _string(tc, f"{path}.traffic_class") if tc is not None else None,
        _string(model, f"{path}.model") if model is not None else None,
    )


def _parse_windows(raw: Any, path: str, period: int, interval: int) -> tuple[BurnWindow, ...]:
    if raw is None or raw == "workbook":
        return scaled_windows(period, interval)
    if not isinstance(raw, list) or not raw:
        raise _fail(path, "must be a non-empty list of {severity, long, short, burn}")
    out = []
    for j, item in enumerate(raw):
        wpath = f"{path}[{j}]"
        data = _mapping(item, wpath)
        _keys(data, wpath, {"severity", "long", "short", "burn"})
        severity = data.get("severity")
        if severity not in SEVERITIES:
            raise _fail(f"{wpath}.severity", f"must be page or ticket, got {_show(severity)}")
        long_s = _seconds(data.get("long"), f"{wpath}.long")
        short_s = _seconds(data.get("short"), f"{wpath}.short")
        burn = _number(data.get("burn"), f"{wpath}.burn")
        if burn <= 0:
            raise _fail(f"{wpath}.burn", f"must be positive, got {burn:g}")
        if long_s > period:
            raise _fail(
                f"{wpath}.long",
                f"window {data['long']} is longer than the period ({period} s)",
            )
        if short_s >= long_s:
            raise _fail(f"{wpath}.short", "must be shorter than the long window")
        for key, value in (("long", long_s), ("short", short_s)):
            if value % interval:
                raise _fail(
                    f"{wpath}.{key}",
                    f"must be a whole number of evaluation intervals ({interval} s), "
                    f"got {data[key]}",
                )
        out.append(BurnWindow("page" if severity == "page" else "ticket", long_s, short_s, burn))
    return tuple(out)


def _parse_alerting(raw: Any, path: str) -> Alerting:
    if raw is None:
        return Alerting()
    data = _mapping(raw, path)
    _keys(data, path, {"enabled", "page", "ticket", "annotations", "runbook_url", "absent_for"})
    names: dict[str, str | None] = {}
    labels: dict[str, dict[str, str]] = {}
    for sev in SEVERITIES:
        sub = data.get(sev) or {}
        sub = _mapping(sub, f"{path}.{sev}")
        _keys(sub, f"{path}.{sev}", {"name", "labels"})
        name = sub.get("name")
        names[sev] = _string(name, f"{path}.{sev}.name", _ALERT_NAME) if name else None
        labels[sev] = _labels(sub.get("labels"), f"{path}.{sev}.labels")
        if "severity" in labels[sev]:
            raise _fail(f"{path}.{sev}.labels.severity", "is set by fleetwatch (page or ticket)")
    enabled = data.get("enabled", True)
    if not isinstance(enabled, bool):
        raise _fail(f"{path}.enabled", f"must be true or false, got {_show(enabled)}")
    runbook = data.get("runbook_url")
    return Alerting(
        page_name=names["page"],
        ticket_name=names["ticket"],
        page_labels=labels["page"],
        ticket_labels=labels["ticket"],
        annotations=_annotations(data.get("annotations"), f"{path}.annotations"),
        runbook_url=_string(runbook, f"{path}.runbook_url") if runbook is not None else None,
        absent_for_s=_seconds(data.get("absent_for", "10m"), f"{path}.absent_for"),
        enabled=enabled,
    )
