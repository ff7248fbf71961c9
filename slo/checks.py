"""Checks the commands run before they compute: selectors that match records, thresholds that
some metric profile can express."""

from __future__ import annotations

from typing import Any

from fleetwatch.core.profiles import PROFILES, Signal
from fleetwatch.core.promql import format_le
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.rules.promql import nearest_buckets
from fleetwatch.slo.spec import LatencySLI, SLOSpec

__all__ = ["check_selectors", "check_thresholds_on_some_profile"]

_SHOWN = 8


def _present(frame: Any, column: str) -> str:
    values = sorted({str(v) for v in frame[column].dropna().unique().tolist()})
    if not values:
        return "none"
    shown = ", ".join(repr(v) for v in values[:_SHOWN])
    return shown + (f" and {len(values) - _SHOWN} more" if len(values) > _SHOWN else "")


def check_selectors(spec: SLOSpec, frame: Any, *, where: str, records: int | None = None) -> None:
    """``SLOSpecError`` for the first SLO whose selector matches none of the records in ``frame``,
    naming the selector and the values the records hold. ``frame`` may hold only the distinct
    selector values of ``records`` records."""
    for slo in spec.slos:
        sel = slo.selector
        wanted = {
            k: v for k, v in (("traffic_class", sel.traffic_class), ("model", sel.model)) if v
        }
        if not wanted:
            continue
        mask = None
        for column, value in wanted.items():
            hit = frame[column].astype(str) == value
            mask = hit if mask is None else mask & hit
        if mask is not None and bool(mask.any()):
            continue
        shown = ", ".join(f"{k}={v}" for k, v in wanted.items())
        present = "; ".join(f"{k} values present: {_present(frame, k)}" for k in wanted)
        raise SLOSpecError(
            f"selector {{{shown}}} of SLO '{slo.name}' matches none of the "
            f"{len(frame) if records is None else records} "
            f"records in {where} ({present})",
            path=f"{slo.path}.selector",
        )


def check_thresholds_on_some_profile(spec: SLOSpec) -> None:
    """Without a chosen profile: every latency threshold must be a histogram bucket boundary of
    at least one known profile, or no Prometheus rule can ever evaluate it."""
    for slo in spec.slos:
        sli = slo.sli
        if not isinstance(sli, LatencySLI):
            continue
        signal = Signal(sli.signal)
        offered = [p for p in PROFILES.values() if p.has(signal)]
        if not offered:
            continue
        threshold = sli.threshold_s
        if any(
            abs(b - threshold) <= 1e-12 * max(1.0, abs(b))
            for p in offered
            for b in p.metric(signal).buckets
        ):
            continue
        near = "; ".join(
            f"{p.name}: "
            + ", ".join(format_le(b) for b in nearest_buckets(threshold, p.metric(signal).buckets))
            for p in offered
        )
        raise SLOSpecError(
            f"threshold {format_le(threshold)} s is not a {sli.signal} bucket boundary of any "
            f"metric profile, so no rule can read the SLI from a histogram; nearest boundaries: "
            f"{near} (--profile checks one profile)",
            path=f"{slo.path}.sli.threshold",
        )
