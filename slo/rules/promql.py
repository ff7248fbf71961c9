"""PromQL fragments for SLIs: selectors from a metric profile and error ratios.

An SLI is a pair of PromQL templates with a ``{window}`` placeholder: the bad-event count and the
total-event count over a window, both as ``sum(increase(...))``. The error ratio is their
quotient, so every window is traffic-weighted (a ratio of increases, never a mean of short
ratios). Bad-outcome counters that may not exist yet are guarded with ``or vector(0)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fleetwatch.core.profiles import MetricRef, Profile, Signal
from fleetwatch.core.profiles.labels import parse_matcher_list
from fleetwatch.core.promql import equality_labels, format_le, le_matcher, quote, regex_escape
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.spec import (
    LATENCY_SIGNALS,
    AvailabilitySLI,
    GoodputSLI,
    LatencySLI,
    RatioSLI,
    ServiceLevelObjective,
)

__all__ = [
    "SLIQuery",
    "nearest_buckets",
    "selector_labels",
    "sli_query",
]


def nearest_buckets(value: float, buckets: Sequence[float], n: int = 2) -> list[float]:
    """Up to ``n`` bucket bounds on each side of ``value``."""
    below = [b for b in buckets if b < value][-n:]
    above = [b for b in buckets if b > value][:n]
    return below + above


@dataclass(frozen=True, slots=True)
class SLIQuery:
    """PromQL templates (``{window}`` placeholder) for one SLI on one profile.

    ``bad`` and ``total`` count events over the window; ``absent`` is the selector whose absence
    means the SLI has no data, with ``absent_labels`` the labels ``absent()`` will carry.
    """

    bad: str
    total: str
    absent: str
    absent_labels: Mapping[str, str]

    def error_ratio(self, window: str) -> str:
        bad = self.bad.replace("{window}", window)
        total = self.total.replace("{window}", window)
        return f"({bad})\n/\n({total})"

    def events(self, window: str) -> str:
        return self.total.replace("{window}", window)

    def bad_events(self, window: str) -> str:
        return self.bad.replace("{window}", window)


def _increase(selector: str, keep: Sequence[str] = ()) -> str:
    """Events over the window, summed; per value of the routing labels ``keep`` when given."""
    by = f" by ({', '.join(keep)}) " if keep else ""
    return f"sum{by}(increase({selector}[{{window}}]))"


def _or_zero(term: str, total: str, keep: Sequence[str]) -> str:
    """``term``, or 0 where it has no series: ``vector(0)`` when nothing is kept, else 0 times
    the total (a labelless 0 would match no kept label set)."""
    zero = f"0 * {total}" if keep else "vector(0)"
    return f"({term} or {zero})"


def selector_labels(slo: ServiceLevelObjective, profile: Profile) -> dict[str, str]:
    labels: dict[str, str] = {}
    sel = slo.selector
    if sel.traffic_class is not None:
        if profile.class_label is None:
            raise SLOSpecError(
                f"profile '{profile.name}' has no traffic-class label, so a per-class SLO "
                "cannot be written for it (use the fleetwatch profile or drop the selector)",
                path=f"{slo.path}.selector.traffic_class",
            )
        labels[profile.class_label] = sel.traffic_class
    if sel.model is not None:
        labels[profile.model_label] = sel.model
    return labels


def _matchers(labels: Mapping[str, str], extra: str = "") -> str:
    parts = [f"{k}={quote(v)}" for k, v in labels.items()]
    if extra:
        parts.append(extra)
    return ",".join(parts)


def _bad_outcomes(
    refs: Sequence[MetricRef], labels: Mapping[str, str], total: str, keep: Sequence[str]
) -> str:
    """Sum of bad-outcome counters; same-metric equality matchers merged into one regex."""
    by_name: dict[str, list[MetricRef]] = {}
    for ref in refs:
        by_name.setdefault(ref.name, []).append(ref)
    terms = []
    for group in by_name.values():
        parsed = [equality_labels(r.matchers) for r in group]
        keys = {next(iter(p)) for p in parsed if p is not None and len(p) == 1}
        if len(group) > 1 and len(keys) == 1 and all(p is not None and len(p) == 1 for p in parsed):
            key = keys.pop()
            values = "|".join(regex_escape(p[key]) for p in parsed if p is not None)
            regex = f"{key}=~{quote(values)}"
            # the group's own matchers become the regex; the scheme's scope stays
            sel = dataclasses.replace(group[0], matchers="").selector(_matchers(labels, regex))
            terms.append(_or_zero(_increase(sel, keep), total, keep))
        else:
            for ref in group:
                term = _increase(ref.selector(_matchers(labels)), keep)
                terms.append(_or_zero(term, total, keep))
    return "\n+ ".join(terms)


def sli_query(slo: ServiceLevelObjective, profile: Profile) -> SLIQuery:
    """The SLI of ``slo`` on ``profile``; ``SLOSpecError`` naming the YAML path when the profile
    cannot express it (missing signal, outcome, class label, or a threshold off the buckets)."""
    sli = slo.sli
    labels = selector_labels(slo, profile)
    keep = profile.routing
    if isinstance(sli, AvailabilitySLI):
        outcomes = profile.outcomes
        total_sel = outcomes.total.selector(_matchers(labels))
        total = _increase(total_sel, keep)
        if outcomes.good is not None:
            good_sel = outcomes.good.selector(_matchers(labels))
            bad = f"{total}\n- {_or_zero(_increase(good_sel, keep), total, keep)}"
        else:
            refs = []
            for outcome in sli.bad:
                if outcome not in outcomes.bad:
                    counted = ", ".join(outcomes.bad) or "none"
                    raise SLOSpecError(
                        f"profile '{profile.name}' does not count outcome '{outcome}' "
                        f"(it counts: {counted})",
                        path=f"{slo.path}.sli.bad",
                    )
                refs.append(outcomes.bad[outcome])
            bad = _bad_outcomes(refs, labels, total, keep)
        return SLIQuery(bad, total, total_sel, _absent_labels(outcomes.total, labels))
    if isinstance(sli, LatencySLI):
        signal = Signal(sli.signal)
        if not profile.has(signal):
            raise SLOSpecError(
                f"profile '{profile.name}' does not export signal '{sli.signal}' "
                f"(it exports latency for: "
                f"{', '.join(s for s in LATENCY_SIGNALS if profile.has(Signal(s)))})",
                path=f"{slo.path}.sli.signal",
            )
        ref = profile.metric(signal)
        _check_bucket(sli.threshold_s, ref, profile, f"{slo.path}.sli.threshold")
        m = _matchers(labels)
        count = ref.selector(m, "_count")
        bucket = ref.selector(",".join(p for p in (m, le_matcher(sli.threshold_s)) if p), "_bucket")
        bad = f"{_increase(count, keep)}\n- {_increase(bucket, keep)}"
        return SLIQuery(bad, _increase(count, keep), count, _absent_labels(ref, labels))
    if isinstance(sli, GoodputSLI):
        if not profile.has(Signal.GOODPUT):
            raise SLOSpecError(
                f"profile '{profile.name}' exports no per-request goodput counter; "
                "goodput SLOs need one (use the fleetwatch profile)",
                path=f"{slo.path}.sli.kind",
            )
        good_ref = profile.metric(Signal.GOODPUT)
        total_ref = profile.outcomes.total
        total_sel = total_ref.selector(_matchers(labels))
        good_sel = good_ref.selector(_matchers(labels))
        # No ``or vector(0)``: the goodput counter exists only where a target is configured
        # (it starts at 0 with the request counter). Without it the ratio has no value and
        # SLOMetricsAbsent, which watches the goodput counter, says so, instead of every
        # request counting as bad.
        bad = f"{_increase(total_sel, keep)}\n- {_increase(good_sel, keep)}"
        return SLIQuery(bad, _increase(total_sel, keep), good_sel, _absent_labels(good_ref, labels))
    assert isinstance(sli, RatioSLI)
    if sli.bad is not None:
        bad = f"({_increase(sli.bad)} or vector(0))"
    else:
        bad = f"{_increase(sli.total)}\n- ({_increase(str(sli.good))} or vector(0))"
    inner = sli.total.partition("{")[2].rstrip("}")
    return SLIQuery(bad, _increase(sli.total), sli.total, equality_labels(inner) or {})


def _absent_labels(ref: MetricRef, labels: Mapping[str, str]) -> dict[str, str]:
    """The labels ``absent(selector)`` carries: those its equality matchers fix."""
    out = dict(equality_labels(ref.matchers) or {})
    out.update({m.name: m.text for m in parse_matcher_list(ref.scope) if m.op == "="})
    out.update(labels)
    return out


def _check_bucket(threshold: float, ref: MetricRef, profile: Profile, path: str) -> None:
    if any(abs(b - threshold) <= 1e-12 * max(1.0, abs(b)) for b in ref.buckets):
        return
    near = ", ".join(format_le(b) for b in nearest_buckets(threshold, ref.buckets))
    raise SLOSpecError(
        f"threshold {format_le(threshold)} s is not a bucket boundary of {ref.name} in profile "
        f"'{profile.name}', so the SLI cannot be read from the histogram; nearest boundaries: "
        f"{near} (or set the engine's buckets to include it)",
        path=path,
    )
