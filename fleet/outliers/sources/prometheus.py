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
from collections.abc import Callable, Mapping

import pandas as pd

from fleetwatch.core.identity import Identity, IdentityError
from fleetwatch.core.profiles import PROFILES, MetricRef, Profile, ProfileError, Signal
from fleetwatch.core.profiles.types import by
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.outliers.signals import OUTCOME_PREFIX
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
from fleetwatch.fleet.outliers.stats.shares import outcome_shares
from fleetwatch.fleet.outliers.table import FleetTable

__all__ = [
    "Fetch",
    "fleet_name",
    "http_get",
    "query_vector",
    "table_from_prometheus",
    "tables_from_prometheus",
]

Fetch = Callable[[str], bytes]


def http_get(url: str, timeout_s: float = 10.0) -> bytes:
    """GET ``url``; ``AnalysisError`` naming it for an HTTP error or no connection."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            body: bytes = resp.read()
            return body
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:200]
        raise AnalysisError(f"{url}: HTTP {exc.code} {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise AnalysisError(f"{url}: cannot reach Prometheus ({exc})") from None


def query_vector(base: str, expr: str, at: float | None, fetch: Fetch) -> dict[str, float]:
    """An instant query's vector as {labels as sorted JSON: value}; ``AnalysisError`` for a failed
    query or another result type."""
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


def _other_profiles(
    url: str, profile: Profile, selector: str, at: float | None, fetch: Fetch
) -> list[str]:
    """Profiles other than ``profile`` whose request counter has series in Prometheus."""
    found = []
    for other in PROFILES.values():
        if other.name != profile.name:
            expr = f"count({other.outcomes.total.selector(selector)})"
            if query_vector(url, expr, at, fetch):
                found.append(other.name)
    return found


Row = tuple[str, str]
"""(fleet, replica): a replica's row, within the fleet it is compared with."""


def fleet_name(profile: Profile, labels: Mapping[str, str]) -> str:
    """The fleet a series belongs to: its model, or ``model=…,namespace=…`` where the label
    scheme routes by more labels than the model."""
    names = profile.fleet_labels
    if names == (profile.model_label,):
        return labels.get(profile.model_label, "")
    return ",".join(f"{n}={labels.get(n, '')}" for n in names)


def tables_from_prometheus(
    url: str,
    profile: Profile,
    *,
    window: str = "10m",
    quantile: float = 0.5,
    at: float | None = None,
    selector: str = "",
    fingerprint_metric: str = DEFAULT_FINGERPRINT_METRIC,
    fetch: Fetch | None = None,
) -> list[tuple[str, FleetTable]]:
    """Per-replica signals from instant queries against a Prometheus server, one ``FleetTable``
    per fleet (its model, and its routing labels under a label scheme), fleets sorted by name:
    a replica is compared only with replicas serving the same model.

    Replicas are named by the profile's replica labels (``Identity``: ``namespace/pod`` under a
    ``namespace,pod`` scheme); every selector carries the scheme's matchers. ``selector``: extra
    label matchers for every query (e.g. ``model="llama"``). ``at``: evaluation time (Unix
    seconds; None = now). ``fetch`` is the HTTP GET (injected in tests; urllib by default).
    """
    get = fetch or http_get
    ident = Identity(profile.replica_labels)
    rs = by(profile.replica_set)
    device = by(tuple(dict.fromkeys((*profile.replica_labels, *profile.routing))))
    q = f"{quantile:g}"

    def sel(ref: MetricRef, suffix: str = "") -> str:
        return ref.selector(selector, suffix)

    def row(labels: Mapping[str, str]) -> Row | None:
        try:
            return fleet_name(profile, labels), ident.key(labels)
        except IdentityError:
            return None

    def rows(expr: str) -> dict[Row, float]:
        out = {}
        for key, v in query_vector(url, expr, at, get).items():
            r = row(json.loads(key))
            if r is not None:
                out[r] = v
        return out

    values: dict[str, dict[Row, float]] = {}
    buckets: dict[str, dict[str, float]] = {}
    for name, sigs in LATENCY_SOURCES:
        ref = signal_ref(profile, *sigs)
        if ref is None:
            continue
        expr = f"histogram_quantile({q}, sum by ({rs}, le) (rate({sel(ref, '_bucket')}[{window}])))"
        values[name] = rows(expr)
        counted = f"sum by ({rs}, le) (increase({sel(ref, '_bucket')}[{window}]))"
        buckets[name] = query_vector(url, counted, at, get)
    total = f"sum by ({rs}) (increase({sel(profile.outcomes.total)}[{window}]))"
    volume = rows(total)
    rate_total = f"sum by ({rs}) (rate({sel(profile.outcomes.total)}[{window}]))"
    if profile.outcomes.good is not None:
        good = f"sum by ({rs}) (rate({sel(profile.outcomes.good)}[{window}]))"
        values["error_rate"] = rows(f"1 - ({good}) / ({rate_total})")
    elif "error" in profile.outcomes.bad:
        bad = f"sum by ({rs}) (rate({sel(profile.outcomes.bad['error'])}[{window}]))"
        values["error_rate"] = rows(f"(({bad}) or ({rate_total}) * 0) / ({rate_total})")
    shape: dict[str, dict[Row, float]] = {}
    if profile.outcomes.truncated is not None:
        cut = sel(profile.outcomes.truncated)
        shape["truncated_share"] = rows(f"sum by ({rs}) (increase({cut}[{window}]))")
    failed = {
        f"{OUTCOME_PREFIX}{outcome}": rows(f"sum by ({rs}) (increase({sel(ref)}[{window}]))")
        for outcome, ref in sorted(profile.outcomes.bad.items())
        if outcome != "error"  # the error rate
    }
    gen = signal_ref(profile, Signal.GENERATION_TOKENS)
    if gen is not None:
        values["throughput"] = rows(f"sum by ({rs}) (rate({sel(gen)}[{window}]))")
    # Device gauges name the replica, not necessarily the model: keyed by replica alone.
    gauges: dict[str, dict[str, float]] = {}
    for name, (num, den) in GPU_GAUGES.items():
        try:
            ref = profile.metric(num)
        except ProfileError:
            continue
        if name == "clock_event_active":
            expr = f"max by ({device}) (max_over_time({sel(ref)}[{window}]))"
        else:
            expr = f"avg by ({device}) (avg_over_time({sel(ref)}[{window}]))"
        if den is not None and profile.has(den):
            d = profile.metric(den)
            expr = f"({expr}) / (avg by ({device}) (avg_over_time({sel(d)}[{window}])))"
        got = {r[1]: v for r, v in rows(expr).items()}
        if got:
            gauges[name] = got
    workload: dict[str, dict[Row, float]] = {"request_rate": rows(rate_total)}
    prompt = signal_ref(profile, Signal.PROMPT_TOKENS)
    if prompt is not None:
        p = f"sum by ({rs}) (rate({sel(prompt)}[{window}]))"
        workload["mean_prompt_tokens"] = rows(f"({p}) / ({rate_total})")
        cached = signal_ref(profile, Signal.CACHED_TOKENS)
        if cached is not None:
            c = f"sum by ({rs}) (rate({sel(cached)}[{window}]))"
            workload["cache_hit_rate"] = rows(f"({c}) / ({p})")
    fp_rows: dict[str, dict[str, str]] = {}
    info = f"{fingerprint_metric}{{{selector}}}" if selector else fingerprint_metric
    for key in query_vector(url, info, at, get):
        labels = json.loads(key)
        r = row(labels)
        if r is not None:
            fp_rows[r[1]] = {
                k: v
                for k, v in labels.items()
                if k not in NOT_FINGERPRINT and k != "__name__" and k not in ident.labels
            }
    fleets = sorted({f for f, _ in volume} | {f for col in values.values() for f, _ in col})
    shown = "/".join(ident.labels)
    if not fleets:
        others = _other_profiles(url, profile, selector, at, get)
        raise insufficient_data([f"{url} (label '{shown}', last {window})"], profile, others)
    out = []
    for fleet in fleets:
        vol = _of(volume, fleet)
        vals = {name: _of(col, fleet) for name, col in values.items()}
        replicas = sorted(set(vol) | {k for v in vals.values() for k in v})
        vals.update(
            {name: {r: col[r] for r in replicas if r in col} for name, col in gauges.items()}
        )
        empty = without_data(replicas, vol, vals)
        if empty:
            err = insufficient_data([f"{shown}={x}" for x in empty], profile, ())
            where = (
                f"{url} (last {window})" if len(fleets) == 1 else f"{url} ({fleet}, last {window})"
            )
            raise AnalysisError(f"{where}: {err}")
        index = pd.Index(replicas, dtype="object")
        shares, share_se = outcome_shares(
            {n: _of(c, fleet) for n, c in shape.items()},
            {n: _of(c, fleet) for n, c in failed.items()},
            pd.Series(vol, dtype="float64").reindex(index),
        )
        mine = {
            name: {k: v for k, v in series.items() if _in(row, k, fleet)}
            for name, series in buckets.items()
        }
        fps = pd.DataFrame(fp_rows).T.reindex(index) if fp_rows else None
        table = FleetTable(
            samples=_samples({k: v for k, v in mine.items() if k in per_request(profile)}, row),
            bins={name: _bounds(series) for name, series in mine.items() if series},
            values=pd.concat([pd.DataFrame(vals).reindex(index).astype("float64"), shares], axis=1),
            volume=pd.Series(vol, dtype="float64").reindex(index),
            stderr=share_se if len(share_se.columns) else None,
            workload=pd.DataFrame({n: _of(c, fleet) for n, c in workload.items()})
            .reindex(index)
            .astype("float64"),
            fingerprint=fps,
            counted=frozenset({"error_rate", *shares.columns}),
            source=f"prometheus {url}",
            notes=(
                f"quantile {q} over {window} from histograms (a quantile inside the fleet "
                "median's bucket is not told apart from it); no per-prompt-length breakdown: "
                "workload judged from mean prompt length and cache-hit rate",
            ),
        )
        out.append((fleet, table))
    return out


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
    """The one fleet's table of ``tables_from_prometheus``; ``AnalysisError`` naming the fleets
    when the series hold several (narrow with ``selector``)."""
    tables = tables_from_prometheus(
        url,
        profile,
        window=window,
        quantile=quantile,
        at=at,
        selector=selector,
        fingerprint_metric=fingerprint_metric,
        fetch=fetch,
    )
    if len(tables) > 1:
        names = ", ".join(name or "(none)" for name, _ in tables)
        raise AnalysisError(
            f"{url}: {len(tables)} fleets ({names}): a replica is judged within its model; "
            "narrow with a selector"
        )
    return tables[0][1]


def _of(col: Mapping[Row, float], fleet: str) -> dict[str, float]:
    return {rep: v for (f, rep), v in col.items() if f == fleet}


def _in(row: Callable[[Mapping[str, str]], Row | None], key: str, fleet: str) -> bool:
    r = row(json.loads(key))
    return r is not None and r[0] == fleet


MAX_SAMPLES = 2_000_000
"""Requests in the window beyond which the rank test is left out (the table stays summaries)."""


def _samples(
    buckets: dict[str, dict[str, float]], row: Callable[[Mapping[str, str]], Row | None]
) -> pd.DataFrame | None:
    """Per-request samples (``replica`` + one column per signal, NaN elsewhere) from each
    replica's bucket increases over the window; None when there are none or too many."""
    frames = []
    for name, series in buckets.items():
        per_replica: dict[str, dict[float, float]] = {}
        for key, v in series.items():
            labels = json.loads(key)
            r, le = row(labels), labels.get("le")
            rep = None if r is None else r[1]
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
