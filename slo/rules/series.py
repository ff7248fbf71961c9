"""Synthetic Prometheus series for promtool tests: counters from per-step counts or from request
records, written in promtool's ``input_series`` notation (``0+10x100 1000+20x50``).

The counters are those the SLI rules read (outcome counters, a histogram's ``_count`` and
``_bucket`` at the SLO thresholds, the goodput counter), labelled as the profile labels them.
Every series starts at 0 at time 0, as exporters that initialise their label children do, so
``increase()`` sees every event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from fleetwatch.core.profiles import MetricRef, Profile, Signal
from fleetwatch.core.promql import equality_labels, format_le, quote
from fleetwatch.core.records.schema import ITL_BOUNDS
from fleetwatch.core.rules import InputSeries
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.events import EVENT_TIME, goodput_mask, itl_counts, latency_values
from fleetwatch.slo.rules.promql import selector_labels
from fleetwatch.slo.spec import (
    AvailabilitySLI,
    GoodputSLI,
    LatencySLI,
    RatioSLI,
    ServiceLevelObjective,
    SLOSpec,
)

__all__ = [
    "counter_values",
    "records_series",
    "routing_example",
    "slo_series",
]

Increments = Sequence[int] | np.ndarray[Any, np.dtype[np.int64]]


def counter_values(increments: Increments) -> str:
    """Counter samples 0, c1, c1+c2, ... in promtool notation, runs of equal steps compressed."""
    inc = [int(x) for x in increments]
    values = [0]
    for x in inc:
        values.append(values[-1] + x)
    parts = []
    i = 0
    while i < len(values):
        if i + 1 < len(values):
            d = values[i + 1] - values[i]
            n = 1
            while i + n + 1 < len(values) and values[i + n + 1] - values[i + n] == d:
                n += 1
            parts.append(f"{values[i]}+{d}x{n}")
            i += n + 1
        else:
            parts.append(str(values[i]))
            i += 1
    return " ".join(parts)


def _name(name: str, labels: Mapping[str, str]) -> str:
    if not labels:
        return name
    return name + "{" + ",".join(f"{k}={quote(v)}" for k, v in labels.items()) + "}"


def _scope(profile: Profile) -> dict[str, str]:
    """The labels a series needs for the label scheme's matchers to select it, and a value
    of each routing label (what the SLIs are kept by)."""
    return {k: v for k, v in routing_example(profile).items() if v}


def routing_example(profile: Profile) -> dict[str, str]:
    """The scheme's matcher labels with a value each selects, then each routing label's value
    in test series (the matchers' where they fix it)."""
    out = {k: v for k, v in profile.scope_labels.items() if v}
    for name in profile.routing:
        out.setdefault(name, "route")
    return out


def _ok_value(key: str) -> str:
    return "stop" if key == "finished_reason" else "ok"


def slo_series(
    slo: ServiceLevelObjective,
    profile: Profile,
    good: Increments,
    bad: Increments,
) -> tuple[InputSeries, ...] | None:
    """Series through which ``slo`` sees ``good`` and ``bad`` events per step; None when its
    SLI names raw metrics that cannot be synthesised (regex selectors)."""
    labels = {**_scope(profile), **selector_labels(slo, profile)}
    g = np.asarray(good, dtype=np.int64)
    b = np.asarray(bad, dtype=np.int64)
    out: list[tuple[str, np.ndarray[Any, np.dtype[np.int64]]]] = []
    sli = slo.sli
    if isinstance(sli, AvailabilitySLI):
        oc = profile.outcomes
        if oc.good is not None:
            out += [(_name(oc.total.name, labels), g + b), (_name(oc.good.name, labels), g)]
        else:
            ref = oc.bad[sli.bad[0]]
            bad_labels = equality_labels(ref.matchers) or {}
            if ref.name == oc.total.name and len(bad_labels) == 1:
                key = next(iter(bad_labels))
                out += [
                    (_name(ref.name, {**labels, key: _ok_value(key)}), g),
                    (_name(ref.name, {**labels, **bad_labels}), b),
                ]
            else:
                out += [
                    (_name(oc.total.name, labels), g + b),
                    (_name(ref.name, {**labels, **bad_labels}), b),
                ]
    elif isinstance(sli, LatencySLI):
        ref = profile.metric(Signal(sli.signal))
        out += [
            (_name(ref.name + "_count", labels), g + b),
            (_name(ref.name + "_bucket", {**labels, "le": format_le(sli.threshold_s)}), g),
            (_name(ref.name + "_bucket", {**labels, "le": "+Inf"}), g + b),
        ]
    elif isinstance(sli, GoodputSLI):
        total = _outcome_labels(profile, "ok") or {}
        out += [
            (_name(profile.outcomes.total.name, {**labels, **total}), g + b),
            (_name(profile.metric(Signal.GOODPUT).name, labels), g),
        ]
    else:
        assert isinstance(sli, RatioSLI)
        parsed = [_raw(q) for q in (sli.total, sli.bad or sli.good or "")]
        if any(p is None for p in parsed):
            return None
        (tn, tl), (xn, xl) = parsed  # type: ignore[misc]
        out += [(_name(tn, tl), g + b), (_name(xn, xl), b if sli.bad is not None else g)]
    return tuple(InputSeries(s, counter_values(v)) for s, v in out)


def _raw(selector: str) -> tuple[str, dict[str, str]] | None:
    name, _, rest = selector.partition("{")
    labels = equality_labels(rest.rstrip("}").strip()) if rest else {}
    return None if labels is None else (name, labels)


def _outcome_labels(profile: Profile, status: str) -> dict[str, str] | None:
    """Labels of the outcome-counter series a request with ``status`` lands in; None when the
    profile's counters do not see that outcome at all."""
    oc = profile.outcomes
    keys = {k for ref in oc.bad.values() for k in (equality_labels(ref.matchers) or {})}
    if oc.good is not None or not keys or any(r.name != oc.total.name for r in oc.bad.values()):
        return {}
    key = next(iter(keys))
    if status == "ok":
        return {key: _ok_value(key)}
    ref = oc.bad.get(status)
    return None if ref is None else dict(equality_labels(ref.matchers) or {})


def records_series(
    spec: SLOSpec,
    profile: Profile,
    frame: pd.DataFrame,
    *,
    step_s: int,
    steps: int,
    start_s: float = 0.0,
) -> tuple[InputSeries, ...]:
    """The counters an engine on ``profile`` would export for the requests in ``frame``, sampled
    every ``step_s`` from ``start_s`` for ``steps`` steps. Each is counted when the exporter
    observes it (``fleetwatch.slo.events``): outcomes, TPOT, e2e and goodput at the finish, TTFT at the first
    token, ITL gap by gap (a request's gaps at its finish)."""

    def step_of(times: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.int64]]:
        k = np.ceil((times - start_s) / step_s).astype(np.int64)
        if k.size and (k.min() < 1 or k.max() > steps):
            raise SLOSpecError("records must finish inside (start, start + steps x step]")
        return k

    finish = frame["finished_s"].to_numpy(dtype=np.float64)
    k = step_of(finish)
    status = frame["status"].astype(str).to_numpy()
    scope = _scope(profile)
    group_cols: dict[str, np.ndarray[Any, Any]] = {}
    if profile.class_label is not None:
        group_cols[profile.class_label] = frame["traffic_class"].astype(str).to_numpy()
    group_cols[profile.model_label] = frame["model"].astype(str).to_numpy()
    series: dict[str, np.ndarray[Any, np.dtype[np.int64]]] = {}

    def add(
        name: str,
        labels: Mapping[str, str],
        mask: np.ndarray[Any, Any],
        at: np.ndarray[Any, np.dtype[np.int64]] = k,
        weights: np.ndarray[Any, Any] | None = None,
    ) -> None:
        for combo in _combos(group_cols):
            sel = mask.copy()
            for col, value in combo.items():
                sel &= group_cols[col] == value
            w = None if weights is None else weights[sel]
            counts = np.bincount(at[sel], weights=w, minlength=steps + 1)[1:]
            key = _name(name, {**scope, **combo, **labels})
            series[key] = np.rint(counts).astype(np.int64)

    oc = profile.outcomes
    everything = np.ones(len(k), dtype=bool)
    statuses = ("ok", "error", "aborted", "rejected")
    seen = np.zeros(len(k), dtype=bool)
    if oc.good is not None:
        add(oc.total.name, {}, everything)
        add(oc.good.name, {}, status == "ok")
        seen = everything
    else:
        shared = _outcome_labels(profile, "ok")
        if shared:
            for st in statuses:
                lab = _outcome_labels(profile, st)
                if lab is not None:
                    add(oc.total.name, lab, status == st)
                    seen |= status == st
        else:
            add(oc.total.name, {}, everything)
            seen = everything
            for st, ref in oc.bad.items():
                add(ref.name, equality_labels(ref.matchers) or {}, status == st)
    goodput_targets = set()
    thresholds: dict[str, set[float]] = {}
    for slo in spec.slos:
        if isinstance(slo.sli, LatencySLI):
            thresholds.setdefault(slo.sli.signal, set()).add(slo.sli.threshold_s)
        elif isinstance(slo.sli, GoodputSLI):
            goodput_targets.add((slo.sli.ttft_s, slo.sli.tpot_s))
    for signal, bounds in thresholds.items():
        hist: MetricRef = profile.metric(Signal(signal))
        if signal == "itl":
            present, counts = itl_counts(frame["itl_buckets"])
            if not present.all():
                raise SLOSpecError("ITL series need every record's gap counts (itl_buckets)")
            add(hist.name + "_count", {}, seen, weights=counts.sum(axis=1))
            for bound in sorted(bounds):
                upto = sum(1 for b in ITL_BOUNDS if b <= bound + 1e-12 * max(1.0, bound))
                le = counts[:, :upto].sum(axis=1)
                add(hist.name + "_bucket", {"le": format_le(bound)}, seen, weights=le)
            continue
        value = latency_values(frame, signal)
        when = frame[EVENT_TIME[signal]].to_numpy(dtype=np.float64)
        at = step_of(np.where(np.isnan(when), finish, when))  # undefined: not counted anyway
        defined = ~np.isnan(value) & seen
        add(hist.name + "_count", {}, defined, at)
        for bound in sorted(bounds):
            add(hist.name + "_bucket", {"le": format_le(bound)}, defined & (value <= bound), at)
    if len(goodput_targets) > 1:
        raise SLOSpecError("goodput SLOs must share one target (the exporter counts one)")
    for ttft_max, tpot_max in goodput_targets:
        good = goodput_mask(frame, ttft_max, tpot_max) & seen
        add(profile.metric(Signal.GOODPUT).name, {}, good)
    return tuple(InputSeries(s, counter_values(v)) for s, v in sorted(series.items()))


def _combos(cols: Mapping[str, np.ndarray[Any, Any]]) -> list[dict[str, str]]:
    if not cols:
        return [{}]
    names = list(cols)
    stacked = pd.DataFrame({n: cols[n] for n in names}).drop_duplicates()
    return [dict(zip(names, map(str, row), strict=True)) for row in stacked.itertuples(index=False)]
