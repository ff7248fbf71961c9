"""Request records -> ``FleetTable``, with sampling errors and like-with-like latency ratios.

Per replica: latency quantiles with their sampling error, error rate, throughput, workload, and
like-with-like latency ratios per prompt-length bucket, and every ok request's latencies
(``FleetTable.samples``) for the per-request rank test.

Records give the most of any source: the like-with-like ratios use fleet-wide buckets of
*uncached* prompt tokens (what prefill time depends on), so prefix-cache hits are accounted for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.outliers.signals import ERROR_TYPE_PREFIX, most_common
from fleetwatch.fleet.outliers.stats.shares import share_with_se
from fleetwatch.fleet.outliers.table import FleetTable

__all__ = ["matched_ratios", "table_from_records"]

_LATENCY = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}
_NEEDED = ("replica", "status", "arrival_s", "finished_s", "prompt_tokens", "output_tokens")


def _check_records(df: pd.DataFrame, where: str) -> pd.DataFrame:
    missing = [c for c in _NEEDED if c not in df.columns]
    if missing:
        raise AnalysisError(f"{where}: records lack column(s) {', '.join(missing)}")
    if df.empty:
        raise AnalysisError(f"{where}: no records")
    if "ttft_s" not in df.columns:
        from fleetwatch.records import add_derived

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


def _output_shares(df: pd.DataFrame, ok: np.ndarray[Any, Any]) -> dict[str, np.ndarray[Any, Any]]:
    """Per request, whether it counts towards each output-shape share (``truncated_share``: it
    finished at ``max_tokens``; ``empty_share``: it succeeded with no output token); a share no
    request of the fleet has is left out (nothing to tell replicas apart by)."""
    out = {}
    if "finish_reason" in df.columns:
        out["truncated_share"] = (df["finish_reason"].astype("string") == "length").fillna(False)
    out["empty_share"] = pd.Series(ok & (df["output_tokens"].to_numpy() == 0))
    return {k: np.asarray(v, dtype=np.float64) for k, v in out.items() if bool(np.asarray(v).any())}


def _error_type_shares(df: pd.DataFrame) -> dict[str, np.ndarray[Any, Any]]:
    """Per request, whether it failed with each of the fleet's ``MAX_ERROR_TYPES`` most common
    error types; nothing where the errors are of one type or none (the error rate says it)."""
    if "error_type" not in df.columns:
        return {}
    kinds = df["error_type"].astype("string").where(df["status"].astype(str) == "error")
    counts = kinds.value_counts(dropna=True)
    if len(counts) < 2:
        return {}
    top = most_common({str(k): int(n) for k, n in counts.items()})
    return {
        f"{ERROR_TYPE_PREFIX}{kind}": (kinds == kind).fillna(False).to_numpy(dtype=np.float64)
        for kind in top
    }


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
    host: Mapping[str, str] | pd.Series | None = None,
    where: str = "records",
) -> FleetTable:
    """Per-replica signals from request records (``fleetwatch.records`` frame).

    Latency signals are the ``quantile`` of ok requests; error rate is the share of requests with
    status ``error``; throughput is output tokens per second over the replica's active span.
    ``fingerprint``: optional frame indexed by replica with configuration columns. ``host``: the
    machine of each replica (a mapping, or a ``host`` column in the records, its most common value
    per replica), so replicas slowed together on one host are host contention, not blamed.
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
    shares = {"error_rate": err, **_output_shares(df, ok), **_error_type_shares(df)}
    for name, hit in shares.items():
        hits = pd.Series(hit).groupby(replica.to_numpy()).sum().reindex(volume.index)
        values[name], stderr[name] = share_with_se(hits, volume)
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
    samples = pd.DataFrame(
        {name: lat[col].to_numpy(dtype=np.float64) for name, col in _LATENCY.items()}
    )
    samples.insert(0, "replica", lat["replica"].astype(str).to_numpy())
    if host is None and "host" in df.columns:
        host = df.groupby(replica.to_numpy())["host"].agg(lambda h: h.mode().iloc[0])
    return FleetTable(
        values=values,
        volume=volume,
        stderr=stderr,
        matched=matched,
        workload=workload,
        fingerprint=fingerprint,
        host=None if host is None else pd.Series(host, dtype=object).reindex(volume.index),
        samples=samples,
        counted=frozenset(shares),
        source=where,
    )
