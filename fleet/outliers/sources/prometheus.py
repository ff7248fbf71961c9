"""Prometheus HTTP API reader: instant queries per signal, grouped by replica -> ``FleetTable``.

Histogram quantiles and counter rates over a window, named through ``fleetwatch.core.profiles``. The
API gives no per-prompt-length breakdown, so a workload difference is judged from mean prompt
length and cache-hit rate.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

import pandas as pd

from fleetwatch.core.profiles import PROFILES, MetricRef, Profile, ProfileError, Signal
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.outliers.sources.coverage import insufficient_data, without_data
from fleetwatch.fleet.outliers.sources.exposition import (
    DEFAULT_FINGERPRINT_METRIC,
    GPU_GAUGES,
    LATENCY_SOURCES,
    NOT_FINGERPRINT,
    per_request,
    signal_ref,
)
from fleetwatch.fleet.outliers.sources.histogram import bucket_samples
from fleetwatch.fleet.outliers.table import FleetTable

__all__ = ["Fetch", "table_from_prometheus"]

Fetch = Callable[[str], bytes]


def _http_get(url: str, timeout_s: float = 10.0) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            body: bytes = resp.read()
            return body
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:200]
        raise AnalysisError(f"{url}: HTTP {exc.code} {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise AnalysisError(f"{url}: cannot reach Prometheus ({exc})") from None


def _query(base: str, expr: str, at: float | None, fetch: Fetch) -> dict[str, float]:
    params = {"query": expr}
    if at is not None:
        params["time"] = f"{at:.3f}"
    url = f"{base.rstrip('/')}/api/v1/query?{urllib.parse.urlencode(params)}"
    try:
        doc = json.loads(fetch(url))
    except json.JSONDecodeError:
        raise AnalysisError(f"{base}: not a Prometheus API response for {expr!r}") from None
    if doc.get("status") != "success":
        raise AnalysisError(f"{base}: query {expr!r} failed: {doc.get('error', doc)}")
    data = doc.get("data", {})
    if data.get("resultType") != "vector":
        raise AnalysisError(f"{base}: query {expr!r} returned {data.get('resultType')}")
    return {
        json.dumps(item["metric"], sort_keys=True): float(item["value"][1])
        for item in data.get("result", [])
    }


def _by(base: str, expr: str, label: str, at: float | None, fetch: Fetch) -> dict[str, float]:
    out = {}
    for key, v in _query(base, expr, at, fetch).items():
        r = json.loads(key).get(label)
        if r is not None:
            out[r] = v
    return out


def _other_profiles(
    url: str, profile: Profile, selector: str, at: float | None, fetch: Fetch
) -> list[str]:
    """Profiles other than ``profile`` whose request counter has series in Prometheus."""
    found = []
    for other in PROFILES.values():
        if other.name != profile.name:
            expr = f"count({other.outcomes.total.selector(selector)})"
            if _query(url, expr, at, fetch):
                found.append(other.name)
    return found


def table_from_prometheus(
    url: str,
    profile: Profile,
    *,
    window: str = "10m",
    quantile: float = 0.5,
    at: float | None = None,
    selector: str = "",
    fingerprint_metric: str = DEFAULT_FINGERPRINT_METRIC,
    fetch: Fetch | None = None,
) -> FleetTable:
    """Per-replica signals from instant queries against a Prometheus server.

    ``selector``: extra label matchers for every query (e.g. ``model="llama"``) so one fleet is
    judged at a time. ``at``: evaluation time (Unix seconds; None = now). ``fetch`` is the HTTP GET
    (injected in tests; urllib by default).
    """
    get = fetch or _http_get
    r = profile.replica_label
    q = f"{quantile:g}"

    def sel(ref: MetricRef, suffix: str = "") -> str:
        return ref.selector(selector, suffix)

    values: dict[str, dict[str, float]] = {}
    buckets: dict[str, dict[str, float]] = {}
    for name, sigs in LATENCY_SOURCES:
        ref = signal_ref(profile, *sigs)
        if ref is None:
            continue
        expr = f"histogram_quantile({q}, sum by ({r}, le) (rate({sel(ref, '_bucket')}[{window}])))"
        values[name] = _by(url, expr, r, at, get)
        counted = f"sum by ({r}, le) (increase({sel(ref, '_bucket')}[{window}]))"
        buckets[name] = _query(url, counted, at, get)
    total = f"sum by ({r}) (increase({sel(profile.outcomes.total)}[{window}]))"
    volume = _by(url, total, r, at, get)
    rate_total = f"sum by ({r}) (rate({sel(profile.outcomes.total)}[{window}]))"
    if profile.outcomes.good is not None:
        good = f"sum by ({r}) (rate({sel(profile.outcomes.good)}[{window}]))"
        values["error_rate"] = _by(url, f"1 - ({good}) / ({rate_total})", r, at, get)
    elif "error" in profile.outcomes.bad:
        bad = f"sum by ({r}) (rate({sel(profile.outcomes.bad['error'])}[{window}]))"
        values["error_rate"] = _by(
            url, f"(({bad}) or ({rate_total}) * 0) / ({rate_total})", r, at, get
        )
    gen = signal_ref(profile, Signal.GENERATION_TOKENS)
    if gen is not None:
        values["throughput"] = _by(url, f"sum by ({r}) (rate({sel(gen)}[{window}]))", r, at, get)
    for name, (num, den) in GPU_GAUGES.items():
        try:
            ref = profile.metric(num)
        except ProfileError:
            continue
        if name == "clock_event_active":
            expr = f"max by ({r}) (max_over_time({sel(ref)}[{window}]))"
        else:
            expr = f"avg by ({r}) (avg_over_time({sel(ref)}[{window}]))"
        if den is not None and profile.has(den):
            d = profile.metric(den)
            expr = f"({expr}) / (avg by ({r}) (avg_over_time({sel(d)}[{window}])))"
        got = _by(url, expr, r, at, get)
        if got:
            values[name] = got
    workload: dict[str, dict[str, float]] = {"request_rate": _by(url, rate_total, r, at, get)}
    prompt = signal_ref(profile, Signal.PROMPT_TOKENS)
    if prompt is not None:
        p = f"sum by ({r}) (rate({sel(prompt)}[{window}]))"
        workload["mean_prompt_tokens"] = _by(url, f"({p}) / ({rate_total})", r, at, get)
        cached = signal_ref(profile, Signal.CACHED_TOKENS)
        if cached is not None:
            c = f"sum by ({r}) (rate({sel(cached)}[{window}]))"
            workload["cache_hit_rate"] = _by(url, f"({c}) / ({p})", r, at, get)
    fp_rows: dict[str, dict[str, str]] = {}
    info = f"{fingerprint_metric}{{{selector}}}" if selector else fingerprint_metric
    for key in _query(url, info, at, get):
        labels = json.loads(key)
        rep = labels.get(r)
        if rep is not None:
            fp_rows[rep] = {
                k: v
                for k, v in labels.items()
                if k not in NOT_FINGERPRINT and k != "__name__" and k != r
            }
    replicas = sorted(set(volume) | {k for v in values.values() for k in v})
    empty = without_data(replicas, volume, values)
    if not replicas or empty:
        if empty:
            err = insufficient_data([f"{r}={x}" for x in empty], profile, ())
            raise AnalysisError(f"{url} (last {window}): {err}")
        others = _other_profiles(url, profile, selector, at, get)
        raise insufficient_data([f"{url} (label '{r}', last {window})"], profile, others)
    index = pd.Index(replicas, dtype="object")
    fps = pd.DataFrame(fp_rows).T.reindex(index) if fp_rows else None
    return FleetTable(
        samples=_samples({k: v for k, v in buckets.items() if k in per_request(profile)}, r),
        bins={name: _bounds(series) for name, series in buckets.items() if series},
        values=pd.DataFrame(values).reindex(index).astype("float64"),
        volume=pd.Series(volume, dtype="float64").reindex(index),
        workload=pd.DataFrame(workload).reindex(index).astype("float64"),
        fingerprint=fps,
        counted=frozenset({"error_rate"}),
        source=f"prometheus {url}",
        notes=(
            f"quantile {q} over {window} from histograms (a quantile inside the fleet median's "
            "bucket is not told apart from it); no per-prompt-length breakdown: workload judged "
            "from mean prompt length and cache-hit rate",
        ),
    )


MAX_SAMPLES = 2_000_000
"""Requests in the window beyond which the rank test is left out (the table stays summaries)."""


def _samples(buckets: dict[str, dict[str, float]], label: str) -> pd.DataFrame | None:
    """Per-request samples (``replica`` + one column per signal, NaN elsewhere) from each
    replica's bucket increases over the window; None when there are none or too many."""
    frames = []
    for name, series in buckets.items():
        per_replica: dict[str, dict[float, float]] = {}
        for key, v in series.items():
            labels = json.loads(key)
            rep, le = labels.get(label), labels.get("le")
            if rep is not None and le is not None and math.isfinite(v):
                per_replica.setdefault(rep, {})[float(le)] = v
        for rep, cumulative in per_replica.items():
            obs = bucket_samples(cumulative)
            frames.append(pd.DataFrame({"replica": rep, name: obs}))
    if not frames or sum(len(f) for f in frames) > MAX_SAMPLES:
        return None
    return pd.concat(frames, ignore_index=True)


def _bounds(series: dict[str, float]) -> tuple[float, ...]:
    """The finite bucket upper bounds (``le``) among a bucket query's series."""
    les = set()
    for key in series:
        le = json.loads(key).get("le")
        try:
            b = float(le)
        except (TypeError, ValueError):
            continue
        if math.isfinite(b):
            les.add(b)
    return tuple(sorted(les))
