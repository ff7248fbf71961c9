"""One model's ``FleetTable`` from the counts an engine reduced its records to
(``sources.engine``): per replica its counts and sums, and per replica, signal, prompt bucket and
2 % latency bucket the count of ok requests. The quantiles and their sampling errors (within 1 %
of the sample's), the like-with-like ratios, and each replica's requests for the rank test, given
as weighted samples (one row per latency bucket; requests in one bucket tie), as
``table_from_records`` computes them from every request.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from fleetwatch.fleet.outliers.signals import ERROR_TYPE_PREFIX, most_common
from fleetwatch.fleet.outliers.stats.shares import share_with_se
from fleetwatch.fleet.outliers.table import FleetTable
from fleetwatch.records.engine.counting import run_starts
from fleetwatch.records.engine.reductions import lerp

__all__ = ["LATENCY", "rows_of", "table_from_counts"]

LATENCY = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}
"""The latency signals compared, and the derived duration of each (``reductions.DERIVED``)."""


def _group_quantiles(
    v: np.ndarray[Any, Any],
    c: np.ndarray[Any, Any],
    starts: np.ndarray[Any, Any],
    qs: np.ndarray[Any, Any],
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """``weighted_quantile(v, c, qs[g])`` of each group ``g`` at once: the rows sorted by group
    and by value within one, a group's first row at ``starts[g]``, every count at least 1.
    The same numbers to the bit: the counts' running sum over all rows less the sum before a
    group is the group's own running sum (whole numbers, exact in doubles)."""
    if not len(starts):  # no group: a model with no value of this signal
        return np.zeros((0, qs.shape[1]))
    upto = np.cumsum(c, dtype=np.float64)
    ends = np.append(starts[1:], len(v))
    base = np.concatenate([[0.0], upto])[starts][:, None]
    n = upto[ends - 1][:, None] - base
    h = (n - 1.0) * qs
    lo = np.floor(h)
    i_lo = np.searchsorted(upto, base + lo, side="right")
    i_hi = np.searchsorted(upto, base + np.minimum(lo + 1.0, n - 1.0), side="right")
    out: np.ndarray[Any, np.dtype[np.float64]] = lerp(v[i_lo], v[i_hi], h - lo)
    return out


def _quantiles_with_se(
    v: np.ndarray[Any, Any], c: np.ndarray[Any, Any], starts: np.ndarray[Any, Any], q: float
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """As ``records._quantile_with_se``, on bucket values with counts, per group (rows as
    ``_group_quantiles`` takes them): the estimates and their standard errors."""
    n = np.add.reduceat(c, starts) if len(starts) else np.zeros(0)
    z = 1.959964
    with np.errstate(divide="ignore", invalid="ignore"):
        half = z * np.sqrt(q * (1.0 - q) / n)
    qs = np.stack([np.full(len(n), q), np.maximum(0.0, q - half), np.minimum(1.0, q + half)], 1)
    est, lo, hi = _group_quantiles(v, c, starts, qs).T
    se = np.where(n == 1, math.nan, (hi - lo) / (2.0 * z))
    return est, se


def _matched(
    cells: pd.DataFrame, volume: pd.Index, min_bucket: int, min_coverage: float = 0.5
) -> pd.Series:
    """``matched_ratios`` on the cells of one signal (sorted as ``_cells`` sorts them): per
    (replica, prompt bucket) medians over the fleet's per bucket, weighted by the replica's
    requests."""
    reps, pbs = cells["replica"].to_numpy(), cells["pb"].to_numpy()
    v, c = cells["v"].to_numpy(np.float64), cells["n"].to_numpy(np.float64)
    starts = run_starts(reps, pbs)
    half = np.full((len(starts), 1), 0.5)
    meds = _group_quantiles(v, c, starts, half)[:, 0] if len(starts) else np.zeros(0)
    owns = np.add.reduceat(c, starts) if len(starts) else np.zeros(0)
    order = np.lexsort((v, pbs))
    by_pb = run_starts(pbs[order])
    fleet_meds = _group_quantiles(v[order], c[order], by_pb, np.full((len(by_pb), 1), 0.5))
    fleet = (
        {
            int(pbs[order][i]): (float(m), float(n))
            for i, m, n in zip(
                by_pb, fleet_meds[:, 0], np.add.reduceat(c[order], by_pb), strict=True
            )
        }
        if len(by_pb)
        else {}
    )
    w: dict[str, float] = {}
    wr: dict[str, float] = {}
    total: dict[str, float] = {}
    for i, m, own in zip(starts, meds.tolist(), owns.tolist(), strict=True):
        rep, pb = str(reps[i]), int(pbs[i])
        fm, fn = fleet[pb]
        ok = own >= min_bucket and fn - own >= min_bucket and fm > 0
        total[rep] = total.get(rep, 0.0) + own
        w[rep] = w.get(rep, 0.0) + (own if ok else 0.0)
        wr[rep] = wr.get(rep, 0.0) + (m / fm * own if ok else 0.0)
    out = pd.Series(
        {
            r: (wr[r] / w[r] if w[r] > 0 and w[r] >= min_coverage * total[r] else math.nan)
            for r in total
        },
        dtype="float64",
    )
    return out.reindex(volume)


def rows_of(cells: pd.DataFrame, column: str, value: str) -> pd.DataFrame:
    """The rows of ``cells`` (sorted by ``column``, as ``_cells`` sorts them) whose ``column``
    is ``value``: a slice found by bisection, not a comparison a row."""
    values = cells[column].to_numpy()
    lo = int(np.searchsorted(values, value, side="left"))
    hi = int(np.searchsorted(values, value, side="right"))
    return cells.iloc[lo:hi]


def table_from_counts(
    model: str,
    summary: pd.DataFrame,
    cells: pd.DataFrame,
    *,
    errors: pd.DataFrame | None = None,
    quantile: float,
    min_bucket: int,
    fingerprint: pd.DataFrame | None,
    where: str,
) -> FleetTable:
    s = summary.assign(replica=summary["replica"].astype(str)).set_index("replica").sort_index()
    index = s.index
    volume = s["n"].astype("float64")
    values = pd.DataFrame(index=index)
    stderr = pd.DataFrame(index=index)
    per_replica = cells.groupby(["signal", "replica", "b"], sort=False, as_index=False).agg(
        n=("n", "sum"), v=("v", "first")
    )
    for name in LATENCY:
        own = per_replica[per_replica["signal"] == name]
        own = own.assign(replica=own["replica"].astype(str))
        own = own.sort_values(["replica", "b"], kind="stable")
        reps = own["replica"].to_numpy()
        starts = run_starts(reps)
        est, se = _quantiles_with_se(
            own["v"].to_numpy(np.float64), own["n"].to_numpy(np.float64), starts, quantile
        )
        values[name] = pd.Series(est, index=reps[starts], dtype="float64")
        stderr[name] = pd.Series(se, index=reps[starts], dtype="float64")
    shares = {"error_rate": s["n_error"].astype("float64")}
    if errors is not None and errors["error_type"].nunique() >= 2:  # as records._error_type_shares
        totals = errors.groupby("error_type")["n"].sum()
        for kind in most_common({str(k): float(n) for k, n in totals.items()}):
            mine = errors[errors["error_type"] == kind].set_index("replica")["n"]
            shares[f"{ERROR_TYPE_PREFIX}{kind}"] = mine.reindex(index).fillna(0.0).astype("float64")
    for name in ("truncated_share", "empty_share"):  # as records._output_shares
        if s[f"n_{name}"].sum() > 0:
            shares[name] = s[f"n_{name}"].astype("float64")
    for name, hits in shares.items():
        values[name], stderr[name] = share_with_se(hits, volume)
    span = (s["last_s"] - s["first_s"]).where(lambda x: x > 0)
    values["throughput"] = s["out_ok"] / span
    mean_out = s["out_sum"] / s["n"]
    var_out = (s["out_sq"] / s["n"] - mean_out**2).clip(lower=0.0)
    cv2 = (var_out / mean_out.pow(2)).fillna(0.0)
    stderr["throughput"] = values["throughput"] * np.sqrt((1.0 + cv2) / volume)
    workload = pd.DataFrame(
        {
            "mean_prompt_tokens": s["prompt_sum"] / s["n"],
            "cache_hit_rate": s["cached_sum"] / s["prompt_sum"].where(lambda x: x > 0),
            "mean_output_tokens": mean_out,
            "request_rate": volume / span,
        },
        index=index,
    )
    matched = pd.DataFrame(
        {name: _matched(rows_of(cells, "signal", name), index, min_bucket) for name in LATENCY},
        index=index,
    )
    samples = pd.DataFrame({"replica": per_replica["replica"].astype(str).to_numpy()})
    for name in LATENCY:
        samples[name] = np.where(per_replica["signal"] == name, per_replica["v"], np.nan)
    samples["weight"] = per_replica["n"].to_numpy(np.float64)
    return FleetTable(
        values=values,
        volume=volume,
        stderr=stderr,
        matched=matched,
        workload=workload,
        fingerprint=fingerprint,
        host=None,
        samples=samples,
        counted=frozenset(shares),
        source=where,
        notes=(
            f"model {model}: latency quantiles from 2 % buckets of every ok request "
            "(within 1 % of the exact sample quantile)",
        ),
    )
