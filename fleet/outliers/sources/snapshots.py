"""``/metrics`` text snapshot reader: one exposition per replica -> ``FleetTable``.

Histogram quantiles and counter ratios per replica, named through ``fleetwatch.core.profiles``.
Snapshots hold lifetime totals and no per-prompt-length breakdown, so a workload difference is
judged from mean prompt length and cache-hit rate. The TTFT, e2e and (per-request) TPOT
histograms count every request, so their buckets are also the per-request samples of the rank
test (``ranks``), as for the Prometheus source.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from fleetwatch.core.profiles import MetricRef, Profile, Signal
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.outliers.signals import OUTCOME_PREFIX
from fleetwatch.fleet.outliers.sources.coverage import (
    insufficient_data,
    profiles_present,
    without_data,
)
from fleetwatch.fleet.outliers.sources.exposition import (
    DEFAULT_FINGERPRINT_METRIC,
    GPU_GAUGES,
    LATENCY_SOURCES,
    NOT_FINGERPRINT,
    per_request,
    ref_labels,
    signal_ref,
)
from fleetwatch.fleet.outliers.sources.histogram import bucket_samples, histogram_quantile
from fleetwatch.fleet.outliers.sources.prometheus import MAX_SAMPLES
from fleetwatch.fleet.outliers.stats.shares import outcome_shares
from fleetwatch.fleet.outliers.table import FleetTable

__all__ = ["table_from_metrics_dir", "table_from_metrics_text"]

Sample = tuple[str, Mapping[str, str], float]


def _parse_text(text: str, where: str) -> list[Sample]:
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return [
            (s.name, dict(s.labels), float(s.value))
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
        ]
    except Exception as exc:
        raise AnalysisError(f"{where}: not Prometheus text exposition ({exc})") from None


def _select(samples: list[Sample], name: str, matchers: Mapping[str, str]) -> list[Sample]:
    return [
        s for s in samples if s[0] == name and all(s[1].get(k) == v for k, v in matchers.items())
    ]


def _sum(samples: list[Sample], ref: MetricRef) -> float:
    chosen = _select(samples, ref.name, ref_labels(ref))
    return float(sum(s[2] for s in chosen)) if chosen else math.nan


def _mean(samples: list[Sample], ref: MetricRef) -> float:
    chosen = _select(samples, ref.name, ref_labels(ref))
    return float(np.mean([s[2] for s in chosen])) if chosen else math.nan


def _hist(
    samples: list[Sample], ref: MetricRef, q: float
) -> tuple[float, float, dict[float, float]]:
    by_le: dict[float, float] = defaultdict(float)
    for _name, labels, value in _select(samples, ref.name + "_bucket", ref_labels(ref)):
        by_le[float(labels.get("le", "nan"))] += value
    count = _sum(samples, MetricRef(ref.name + "_count", "counter", matchers=ref.matchers))
    return histogram_quantile(q, by_le.items()), count, dict(by_le)


def _error_rate(samples: list[Sample], profile: Profile) -> tuple[float, float]:
    total = _sum(samples, profile.outcomes.total)
    if profile.outcomes.good is not None:
        good = _sum(samples, profile.outcomes.good)
        return (1.0 - good / total if total > 0 else math.nan), total
    bad = profile.outcomes.bad.get("error")
    if bad is None or not total > 0:
        return math.nan, total
    errors = _sum(samples, bad)
    return (0.0 if math.isnan(errors) else errors / total), total


Row = tuple[
    dict[str, float],
    float,
    dict[str, float],
    dict[str, str],
    dict[str, dict[float, float]],
    dict[str, float],
]
"""One replica: signals, request count, workload, fingerprint, each latency histogram's
cumulative ``{le: count}``, and the requests each counted share holds (``truncated_share``,
``outcome=<name>``)."""


def _outcome_counts(samples: list[Sample], profile: Profile) -> dict[str, float]:
    """Requests cut at max_tokens, and each failure outcome's beside errors, as counted."""
    refs = {f"{OUTCOME_PREFIX}{o}": r for o, r in profile.outcomes.bad.items() if o != "error"}
    if profile.outcomes.truncated is not None:
        refs["truncated_share"] = profile.outcomes.truncated
    return {name: _sum(samples, ref) for name, ref in sorted(refs.items())}


def _row_from_samples(
    samples: list[Sample], profile: Profile, q: float, fingerprint_metric: str
) -> Row:
    values: dict[str, float] = {}
    hists: dict[str, dict[float, float]] = {}
    volume = math.nan
    for name, sigs in LATENCY_SOURCES:
        ref = signal_ref(profile, *sigs)
        if ref is not None:
            values[name], count, hists[name] = _hist(samples, ref, q)
            if name == "e2e" or math.isnan(volume):
                volume = count if not math.isnan(count) else volume
    values["error_rate"], total = _error_rate(samples, profile)
    if not math.isnan(total):
        volume = total
    for name, (num, den) in GPU_GAUGES.items():
        if not profile.has(num):
            continue
        if name == "clock_event_active":
            chosen = _select(samples, profile.metric(num).name, {})
            v = max((s[2] for s in chosen), default=math.nan)
        else:
            v = _mean(samples, profile.metric(num))
        if den is not None and profile.has(den):
            v = v / _mean(samples, profile.metric(den))
        if not math.isnan(v):
            values[name] = v
    workload: dict[str, float] = {}
    prompt = signal_ref(profile, Signal.PROMPT_TOKENS)
    if prompt is not None and volume > 0:
        p = _sum(samples, prompt)
        workload["mean_prompt_tokens"] = p / volume
        cached = signal_ref(profile, Signal.CACHED_TOKENS)
        if cached is not None and p > 0:
            workload["cache_hit_rate"] = _sum(samples, cached) / p
    fp: dict[str, str] = {}
    for name, labels, _ in samples:
        if name == fingerprint_metric:
            fp.update({k: v for k, v in labels.items() if k not in NOT_FINGERPRINT})
    return values, volume, workload, fp, hists, _outcome_counts(samples, profile)


def _samples(rows: Mapping[str, Row], profile: Profile) -> pd.DataFrame | None:
    """Per-request samples of the histograms observed once per request (``replica`` + one column
    per signal): each replica's lifetime bucket counts; None when there are none or too many."""
    once = per_request(profile)
    frames = [
        pd.DataFrame({"replica": r, name: bucket_samples(cumulative)})
        for r, row in rows.items()
        for name, cumulative in row[4].items()
        if name in once and cumulative
    ]
    if not frames or sum(len(f) for f in frames) > MAX_SAMPLES:
        return None
    return pd.concat(frames, ignore_index=True)


def _bins(rows: Mapping[str, Row]) -> dict[str, tuple[float, ...]]:
    out: dict[str, set[float]] = defaultdict(set)
    for row in rows.values():
        for name, cumulative in row[4].items():
            out[name] |= {le for le in cumulative if math.isfinite(le)}
    return {name: tuple(sorted(les)) for name, les in out.items() if les}


def _assemble(
    rows: Mapping[str, Row], profile: Profile, source: str, notes: tuple[str, ...]
) -> FleetTable:
    index = pd.Index(sorted(rows), dtype="object")
    values = pd.DataFrame({r: rows[r][0] for r in index}).T.reindex(index).astype("float64")
    volume = pd.Series({r: rows[r][1] for r in index}, dtype="float64").reindex(index)
    workload = pd.DataFrame({r: rows[r][2] for r in index}).T.reindex(index)
    fps = pd.DataFrame({r: rows[r][3] for r in index}).T.reindex(index)
    counted: dict[str, dict[str, float]] = defaultdict(dict)
    for r in index:
        for name, n in rows[r][5].items():
            counted[name][r] = n
    shares, share_se = outcome_shares(
        {n: c for n, c in counted.items() if not n.startswith(OUTCOME_PREFIX)},
        {n: c for n, c in counted.items() if n.startswith(OUTCOME_PREFIX)},
        volume,
    )
    return FleetTable(
        values=pd.concat([values, shares], axis=1),
        volume=volume,
        stderr=share_se if len(share_se.columns) else None,
        workload=workload.astype("float64") if len(workload.columns) else None,
        fingerprint=fps if len(fps.columns) else None,
        samples=_samples(rows, profile),
        bins=_bins(rows),
        counted=frozenset({"error_rate", *shares.columns}),
        source=source,
        notes=notes,
    )


_SNAPSHOT_NOTE = (
    "snapshots hold lifetime totals: quantiles and rates are since each process started "
    "(a quantile inside the fleet median's histogram bucket is not told apart from it); "
    "no per-prompt-length breakdown, workload judged from mean prompt length and cache hits"
)


def table_from_metrics_text(
    texts: Mapping[str, str],
    profile: Profile,
    *,
    quantile: float = 0.5,
    fingerprint_metric: str = DEFAULT_FINGERPRINT_METRIC,
) -> FleetTable:
    """Per-replica signals from ``/metrics`` text, one exposition per replica name.

    ``AnalysisError`` when a replica has no request count or no signal of ``profile``: an empty
    snapshot, or one from another engine, is insufficient data, never "no outlier".
    """
    return _table(texts, profile, quantile, fingerprint_metric, {r: r for r in texts})


def _table(
    texts: Mapping[str, str],
    profile: Profile,
    quantile: float,
    fingerprint_metric: str,
    where: Mapping[str, str],
) -> FleetTable:
    samples = {r: _parse_text(t, where[r]) for r, t in texts.items()}
    rows = {
        r: _row_from_samples(s, profile, quantile, fingerprint_metric) for r, s in samples.items()
    }
    columns: dict[str, dict[str, float]] = defaultdict(dict)
    for r, row in rows.items():
        for name, v in row[0].items():
            columns[name][r] = v
    empty = without_data(rows, {r: row[1] for r, row in rows.items()}, columns)
    if empty:
        names = {s[0] for r in empty for s in samples[r]}
        raise insufficient_data(
            [where[r] for r in empty], profile, profiles_present(names, profile), not names
        )
    return _assemble(rows, profile, "metrics snapshots", (_SNAPSHOT_NOTE,))


def table_from_metrics_dir(
    directory: str | Path,
    profile: Profile,
    *,
    quantile: float = 0.5,
    fingerprint_metric: str = DEFAULT_FINGERPRINT_METRIC,
) -> FleetTable:
    """Read ``DIR/<replica>.prom`` (or ``.txt``/``.metrics``) snapshots: one file per replica."""
    d = Path(directory)
    if not d.is_dir():
        raise AnalysisError(f"{d}: not a directory of /metrics snapshots")
    files = sorted(p for p in d.iterdir() if p.suffix in (".prom", ".txt", ".metrics"))
    if not files:
        raise AnalysisError(f"{d}: no .prom, .txt or .metrics files")
    texts: dict[str, str] = {}
    where: dict[str, str] = {}
    for p in files:
        if p.stem in texts:
            raise AnalysisError(f"{where[p.stem]} and {p.name}: replica '{p.stem}' appears twice")
        try:
            texts[p.stem] = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise AnalysisError(f"{p}: unreadable ({exc})") from None
        where[p.stem] = p.name
    return _table(texts, profile, quantile, fingerprint_metric, where)
