"""Build a ``FleetTable`` from request records, per-replica ``/metrics`` snapshots, or a
Prometheus server's HTTP API.

Records give the most: per-replica medians with their sampling error, and like-with-like latency
ratios per prompt-length bucket (fleet-wide buckets of *uncached* prompt tokens, which is what
prefill time depends on, so prefix-cache hits are accounted for). Prometheus and ``/metrics`` give
histogram quantiles and counter ratios per replica, named through ``telemetry.profiles``; they carry
no per-prompt-length breakdown, so a workload difference is judged from mean prompt length and
cache-hit rate instead.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fleet.errors import AnalysisError
from fleet.outliers.table import FleetTable
from telemetry.profiles import MetricRef, Profile, ProfileError, Signal

__all__ = [
    "DEFAULT_FINGERPRINT_METRIC",
    "histogram_quantile",
    "label_matchers",
    "matched_ratios",
    "table_from_metrics_dir",
    "table_from_metrics_text",
    "table_from_prometheus",
    "table_from_records",
]

DEFAULT_FINGERPRINT_METRIC = "fleetwatch_build_info"
"""Info-style gauge (value 1) whose labels (version, model_revision, flags…) fingerprint a replica."""

_LATENCY = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}
_NEEDED = ("replica", "status", "arrival_s", "finished_s", "prompt_tokens", "output_tokens")


def _check_records(df: pd.DataFrame, where: str) -> pd.DataFrame:
    missing = [c for c in _NEEDED if c not in df.columns]
    if missing:
        raise AnalysisError(f"{where}: records lack column(s) {', '.join(missing)}")
    if df.empty:
        raise AnalysisError(f"{where}: no records")
    if "ttft_s" not in df.columns:
        from telemetry.records import add_derived

        df = add_derived(df)
    return df


def _uncached(df: pd.DataFrame) -> np.ndarray[Any, np.dtype[np.float64]]:
    prompt = df["prompt_tokens"].to_numpy(dtype=np.float64)
    if "cached_prompt_tokens" in df.columns:
        prompt = prompt - df["cached_prompt_tokens"].to_numpy(dtype=np.float64, na_value=0.0)
    return prompt


def matched_ratios(
    df: pd.DataFrame,
    column: str,
    *,
    buckets: int = 8,
    min_bucket: int = 3,
    min_coverage: float = 0.5,
) -> pd.Series:
    """Each replica's like-with-like ratio for latency ``column``.

    Requests are put in fleet-wide buckets of uncached prompt tokens (quantile edges); in every
    bucket the replica's median is divided by the fleet's; the ratios are averaged weighted by the
    replica's requests in the bucket. Only buckets where the replica and its peers each have at
    least ``min_bucket`` requests count; a replica whose comparable buckets hold less than
    ``min_coverage`` of its requests gets NaN (nothing to compare it with).
    """
    v = df[column].to_numpy(dtype=np.float64, na_value=np.nan)
    keep = ~np.isnan(v)
    if not keep.any():
        return pd.Series(dtype="float64")
    u = _uncached(df)[keep]
    edges = np.unique(np.quantile(u, np.linspace(0.0, 1.0, buckets + 1))[1:-1])
    b = np.searchsorted(edges, u, side="right")
    frame = pd.DataFrame({"replica": df["replica"].to_numpy()[keep], "b": b, "v": v[keep]})
    cell = frame.groupby(["replica", "b"], observed=True)["v"].agg(["median", "size"])
    fleet = frame.groupby("b")["v"].agg(["median", "size"])
    fm = fleet["median"].reindex(cell.index.get_level_values("b")).to_numpy()
    fn = fleet["size"].reindex(cell.index.get_level_values("b")).to_numpy()
    own = cell["size"].to_numpy(dtype=np.float64)
    ok = (own >= min_bucket) & (fn - own >= min_bucket) & (fm > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(ok, cell["median"].to_numpy() / fm, 0.0)
    reps = cell.index.get_level_values("replica")
    part = pd.DataFrame({"w": np.where(ok, own, 0.0), "wr": ratio * np.where(ok, own, 0.0)})
    part["all"] = own
    sums = part.groupby(reps.to_numpy()).sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        out = sums["wr"] / sums["w"]
    out[sums["w"] < min_coverage * sums["all"]] = np.nan
    return out.astype("float64")


def _quantile_with_se(values: np.ndarray[Any, Any], q: float) -> tuple[float, float]:
    """A sample quantile and its standard error, distribution-free.

    The error comes from the binomial confidence interval of the quantile's rank (the order
    statistics at q ± 1.96·sqrt(q(1 − q)/n)), halved and scaled to one σ. Unlike σ from the IQR
    it holds for skewed and bimodal latencies, which throttled replicas produce.
    """
    v = values[~np.isnan(values)]
    n = v.size
    if n == 0:
        return math.nan, math.nan
    if n == 1:
        return float(v[0]), math.nan
    z = 1.959964
    half = z * math.sqrt(q * (1.0 - q) / n)
    est, lo, hi = np.quantile(v, [q, max(0.0, q - half), min(1.0, q + half)])
    return float(est), float(hi - lo) / (2.0 * z)


def table_from_records(
    df: pd.DataFrame,
    *,
    quantile: float = 0.5,
    buckets: int = 8,
    min_bucket: int = 3,
    fingerprint: pd.DataFrame | None = None,
    where: str = "records",
) -> FleetTable:
    """Per-replica signals from request records (``telemetry.records`` frame).

    Latency signals are the ``quantile`` of ok requests; error rate is the share of requests with
    status ``error``; throughput is output tokens per second over the replica's active span.
    ``fingerprint``: optional frame indexed by replica with configuration columns.
    """
    if not 0.0 < quantile < 1.0:
        raise AnalysisError(f"quantile must be in (0, 1), got {quantile}")
    df = _check_records(df, where)
    replica = df["replica"].astype(str)
    ok = (df["status"].astype(str) == "ok").to_numpy()
    volume = replica.value_counts().sort_index().astype("float64")
    lat = df.loc[ok, list(_LATENCY.values())].copy()
    lat["replica"] = replica[ok].to_numpy()
    g = lat.groupby("replica")
    values = pd.DataFrame(index=volume.index)
    stderr = pd.DataFrame(index=volume.index)
    for name, col in _LATENCY.items():
        est = {str(rep): _quantile_with_se(v.to_numpy(), quantile) for rep, v in g[col]}
        values[name] = pd.Series({k: e[0] for k, e in est.items()}, dtype="float64")
        stderr[name] = pd.Series({k: e[1] for k, e in est.items()}, dtype="float64")
    err = (df["status"].astype(str) == "error").to_numpy(dtype=np.float64)
    err_rate = pd.Series(err).groupby(replica.to_numpy()).mean().reindex(volume.index)
    values["error_rate"] = err_rate
    pooled = float(err.mean())
    stderr["error_rate"] = np.sqrt(max(pooled * (1 - pooled), 0.0) / volume)
    first = df.groupby(replica.to_numpy())["arrival_s"].min().reindex(volume.index)
    last = df.groupby(replica.to_numpy())["finished_s"].max().reindex(volume.index)
    span = (last - first).where(lambda s: s > 0)
    out_tokens = (
        pd.Series(df["output_tokens"].to_numpy(dtype=np.float64) * ok)
        .groupby(replica.to_numpy())
        .sum()
        .reindex(volume.index)
    )
    values["throughput"] = out_tokens / span
    # Output tokens from n requests are a compound Poisson count: relative sampling error
    # sqrt((1 + cv²) / n), cv the coefficient of variation of output tokens per request.
    outs = pd.Series(df["output_tokens"].to_numpy(dtype=np.float64)).groupby(replica.to_numpy())
    cv2 = (outs.var(ddof=0) / outs.mean().pow(2)).reindex(volume.index).fillna(0.0)
    stderr["throughput"] = values["throughput"] * np.sqrt((1.0 + cv2) / volume)
    prompt = pd.Series(df["prompt_tokens"].to_numpy(dtype=np.float64)).groupby(replica.to_numpy())
    cached = (
        df["cached_prompt_tokens"].to_numpy(dtype=np.float64)
        if "cached_prompt_tokens" in df.columns
        else np.zeros(len(df))
    )
    workload = pd.DataFrame(
        {
            "mean_prompt_tokens": prompt.mean(),
            "cache_hit_rate": pd.Series(cached).groupby(replica.to_numpy()).sum()
            / prompt.sum().where(lambda s: s > 0),
            "mean_output_tokens": pd.Series(df["output_tokens"].to_numpy(dtype=np.float64))
            .groupby(replica.to_numpy())
            .mean(),
        }
    ).reindex(volume.index)
    workload["request_rate"] = volume / span
    with_reps = df.assign(replica=replica.to_numpy())
    matched = pd.DataFrame(
        {
            name: matched_ratios(
                with_reps.loc[ok], col, buckets=buckets, min_bucket=min_bucket
            ).reindex(volume.index)
            for name, col in _LATENCY.items()
        }
    )
    return FleetTable(
        values=values,
        volume=volume,
        stderr=stderr,
        matched=matched,
        workload=workload,
        fingerprint=fingerprint,
        source=where,
    )


# --- Prometheus exposition (snapshots and HTTP API) -------------------------------------------

_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*')


def label_matchers(text: str) -> dict[str, str]:
    """Parse `name="value",…` label matchers (equality only) into a dict."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = _MATCHER.fullmatch(part)
        if m is None:
            raise AnalysisError(f'unsupported label matcher {part!r} (only name="value")')
        out[m.group(1)] = m.group(2)
    return out


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float:
    """Prometheus' ``histogram_quantile`` over cumulative ``(le, count)`` pairs.

    Linear interpolation inside the bucket; the lower edge of the first bucket is 0; a quantile in
    the +Inf bucket returns the highest finite bound. NaN when there are no observations.
    """
    pairs = sorted((float(le), float(c)) for le, c in buckets)
    if not pairs or pairs[-1][1] <= 0:
        return math.nan
    total = pairs[-1][1]
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    for le, c in pairs:
        if c >= rank:
            if math.isinf(le):
                return prev_le
            if c == prev_c:
                return le
            return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
        prev_le, prev_c = le, c
    return pairs[-1][0]


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
    chosen = _select(samples, ref.name, label_matchers(ref.matchers))
    return float(sum(s[2] for s in chosen)) if chosen else math.nan


def _mean(samples: list[Sample], ref: MetricRef) -> float:
    chosen = _select(samples, ref.name, label_matchers(ref.matchers))
    return float(np.mean([s[2] for s in chosen])) if chosen else math.nan


def _hist(samples: list[Sample], ref: MetricRef, q: float) -> tuple[float, float]:
    by_le: dict[float, float] = defaultdict(float)
    for _name, labels, value in _select(
        samples, ref.name + "_bucket", label_matchers(ref.matchers)
    ):
        by_le[float(labels.get("le", "nan"))] += value
    count = _sum(samples, MetricRef(ref.name + "_count", "counter", matchers=ref.matchers))
    return histogram_quantile(q, by_le.items()), count


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


def _signal(profile: Profile, *signals: Signal) -> MetricRef | None:
    for s in signals:
        if profile.has(s):
            return profile.metric(s)
    return None


def _row_from_samples(
    samples: list[Sample], profile: Profile, q: float, fingerprint_metric: str
) -> tuple[dict[str, float], float, dict[str, float], dict[str, str]]:
    values: dict[str, float] = {}
    volume = math.nan
    for name, sigs in (
        ("ttft", (Signal.TTFT,)),
        ("tpot", (Signal.TPOT, Signal.ITL)),
        ("e2e", (Signal.E2E,)),
    ):
        ref = _signal(profile, *sigs)
        if ref is not None:
            values[name], count = _hist(samples, ref, q)
            if name == "e2e" or math.isnan(volume):
                volume = count if not math.isnan(count) else volume
    values["error_rate"], total = _error_rate(samples, profile)
    if not math.isnan(total):
        volume = total
    gpu = {
        "sm_clock_ratio": (Signal.GPU_SM_CLOCK, Signal.GPU_SM_CLOCK_MAX),
        "dram_bw_ratio": (Signal.GPU_DRAM_ACTIVE, None),
        "power_w": (Signal.GPU_POWER, None),
        "clock_event_active": (Signal.GPU_CLOCK_EVENT, None),
    }
    for name, (num, den) in gpu.items():
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
    prompt = _signal(profile, Signal.PROMPT_TOKENS)
    if prompt is not None and volume > 0:
        p = _sum(samples, prompt)
        workload["mean_prompt_tokens"] = p / volume
        cached = _signal(profile, Signal.CACHED_TOKENS)
        if cached is not None and p > 0:
            workload["cache_hit_rate"] = _sum(samples, cached) / p
    fp: dict[str, str] = {}
    for name, labels, _ in samples:
        if name == fingerprint_metric:
            fp.update({k: v for k, v in labels.items() if k not in _NOT_FINGERPRINT})
    return values, volume, workload, fp


_NOT_FINGERPRINT = frozenset({"instance", "job", "replica", "engine", "gpu", "pod", "node"})


def _assemble(
    rows: Mapping[str, tuple[dict[str, float], float, dict[str, float], dict[str, str]]],
    source: str,
    notes: tuple[str, ...],
) -> FleetTable:
    index = pd.Index(sorted(rows), dtype="object")
    values = pd.DataFrame({r: rows[r][0] for r in index}).T.reindex(index).astype("float64")
    volume = pd.Series({r: rows[r][1] for r in index}, dtype="float64").reindex(index)
    workload = pd.DataFrame({r: rows[r][2] for r in index}).T.reindex(index)
    fps = pd.DataFrame({r: rows[r][3] for r in index}).T.reindex(index)
    return FleetTable(
        values=values,
        volume=volume,
        workload=workload.astype("float64") if len(workload.columns) else None,
        fingerprint=fps if len(fps.columns) else None,
        source=source,
        notes=notes,
    )


_SNAPSHOT_NOTE = (
    "snapshots hold lifetime totals: quantiles and rates are since each process started; "
    "no per-prompt-length breakdown, workload judged from mean prompt length and cache hits"
)


def table_from_metrics_text(
    texts: Mapping[str, str],
    profile: Profile,
    *,
    quantile: float = 0.5,
    fingerprint_metric: str = DEFAULT_FINGERPRINT_METRIC,
) -> FleetTable:
    """Per-replica signals from ``/metrics`` text, one exposition per replica name."""
    rows = {
        r: _row_from_samples(_parse_text(t, r), profile, quantile, fingerprint_metric)
        for r, t in texts.items()
    }
    return _assemble(rows, "metrics snapshots", (_SNAPSHOT_NOTE,))


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
    texts = {}
    for p in files:
        try:
            texts[p.stem] = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise AnalysisError(f"{p}: unreadable ({exc})") from None
    return table_from_metrics_text(
        texts, profile, quantile=quantile, fingerprint_metric=fingerprint_metric
    )


# --- Prometheus HTTP API -----------------------------------------------------------------------

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
    for name, sigs in (
        ("ttft", (Signal.TTFT,)),
        ("tpot", (Signal.TPOT, Signal.ITL)),
        ("e2e", (Signal.E2E,)),
    ):
        ref = _signal(profile, *sigs)
        if ref is None:
            continue
        expr = f"histogram_quantile({q}, sum by ({r}, le) (rate({sel(ref, '_bucket')}[{window}])))"
        values[name] = _by(url, expr, r, at, get)
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
    gen = _signal(profile, Signal.GENERATION_TOKENS)
    if gen is not None:
        values["throughput"] = _by(url, f"sum by ({r}) (rate({sel(gen)}[{window}]))", r, at, get)
    gauges = {
        "sm_clock_ratio": (Signal.GPU_SM_CLOCK, Signal.GPU_SM_CLOCK_MAX),
        "dram_bw_ratio": (Signal.GPU_DRAM_ACTIVE, None),
        "power_w": (Signal.GPU_POWER, None),
        "clock_event_active": (Signal.GPU_CLOCK_EVENT, None),
    }
    for name, (num, den) in gauges.items():
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
    prompt = _signal(profile, Signal.PROMPT_TOKENS)
    if prompt is not None:
        p = f"sum by ({r}) (rate({sel(prompt)}[{window}]))"
        workload["mean_prompt_tokens"] = _by(url, f"({p}) / ({rate_total})", r, at, get)
        cached = _signal(profile, Signal.CACHED_TOKENS)
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
                if k not in _NOT_FINGERPRINT and k != "__name__" and k != r
            }
    replicas = sorted(set(volume) | {k for v in values.values() for k in v})
    if not replicas:
        raise AnalysisError(
            f"{url}: no series for profile '{profile.name}' (label '{r}') in the last {window}"
        )
    index = pd.Index(replicas, dtype="object")
    fps = pd.DataFrame(fp_rows).T.reindex(index) if fp_rows else None
    return FleetTable(
        values=pd.DataFrame(values).reindex(index).astype("float64"),
        volume=pd.Series(volume, dtype="float64").reindex(index),
        workload=pd.DataFrame(workload).reindex(index).astype("float64"),
        fingerprint=fps,
        source=f"prometheus {url}",
        notes=(
            f"quantile {q} over {window} from histograms; no per-prompt-length breakdown: "
            "workload judged from mean prompt length and cache-hit rate",
        ),
    )
