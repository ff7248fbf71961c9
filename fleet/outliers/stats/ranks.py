"""Each replica's own requests against the rest of the fleet's: a rank test per (replica, signal).

The test across replica summaries (``stats``) sees one number per replica, so a small fleet has
little to go on: the MAD of three healthy values is too noisy to tell a replica 5× slower from
luck at a 1 % family-wise level. Where the source has every request (records), each replica has
tens to thousands of samples, and the question "are this replica's requests slower than the rest
of the fleet's?" has a distribution-free answer: the Mann–Whitney U test of the replica's
requests against the pooled requests of the other replicas judged with it.

Under the null (the replica's requests drawn from the same distribution as the rest's, whatever
its shape) the rank sum of its ``n`` requests among all ``N`` has mean ``n(N + 1)/2`` and variance
``n·m/12 · ((N + 1) − Σ(t³ − t)/(N(N − 1)))`` (``m = N − n``, ``t`` the sizes of tied groups);
the p-value is the normal approximation with a continuity correction, as in
``scipy.stats.mannwhitneyu(method="asymptotic")``. For a replica of few requests among many the
exact distribution has lighter tails than the normal, so the approximation errs on the
conservative side at the small levels used here.

Family-wise: every replica is tested on every signal with samples, in every pass; the detector
splits each signal's share of ``alpha`` over the replicas (Bonferroni), so the whole report's
false-alarm rate stays at ``alpha`` (see ``score``).

What it does not cover: requests of one replica are not independent when they share batches,
and healthy replicas of a real fleet differ a little. The rank test calls such a difference
significant once there are enough requests; the spread floor and the effect size (second
conditions) decide whether it is worth a finding. Replicas sharing one busy host are slowed
together: their requests shift alike, so the test, comparing replicas with each other, does not
blame any of them (see ``causes`` for host contention).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy import special as _sp

__all__ = [
    "SAMPLE_COLUMNS",
    "p_values",
    "rank_p_values",
    "rank_z",
    "rank_z_columns",
    "rank_z_weighted",
]

SAMPLE_COLUMNS = ("ttft", "tpot", "e2e")
"""Signals a per-request sample frame may carry (seconds, one row per ok request)."""

Array = np.ndarray[Any, np.dtype[np.float64]]


def rank_z_columns(values: Array, groups: np.ndarray[Any, Any], k: int) -> Array:
    """Mann–Whitney z of each group's values against all other values, per column.

    ``values``: (samples, columns) without NaN, every column an independent set sharing the
    groups (signals, or many simulated fleets at once); ``groups``: group index 0..k−1 of each
    row. Returns z (k, columns): > 0 where the group ranks higher than the rest, with a
    continuity correction of ½ toward 0; NaN where a group or its rest is empty or all tie.
    """
    v = np.asarray(values, dtype=np.float64)
    big, cols = v.shape
    g = np.asarray(groups, dtype=np.int64)
    count = np.bincount(g, minlength=k).astype(np.float64)
    if big < 2:
        return np.full((k, cols), np.nan)
    vt = np.ascontiguousarray(v.T)  # one row per column: sorting along contiguous memory
    order = np.argsort(vt, axis=1)
    srt = np.take_along_axis(vt, order, axis=1)
    new = np.ones_like(srt, dtype=bool)
    new[:, 1:] = srt[:, 1:] != srt[:, :-1]
    pos = np.arange(big, dtype=np.float64)[None, :]
    if new.all():  # no ties (continuous latencies): ranks are positions
        avg = np.broadcast_to(pos + 1.0, srt.shape)
        ties = np.zeros(cols)
    else:
        # Tied runs: each value's run start and size, row by row, without a Python loop.
        start = np.maximum.accumulate(np.where(new, pos, 0.0), axis=1)
        last = np.hstack([new[:, 1:], np.ones((cols, 1), bool)])
        end = np.minimum.accumulate(np.where(last, pos + 1.0, np.inf)[:, ::-1], axis=1)[:, ::-1]
        size = end - start
        avg = start + (size + 1.0) / 2.0
        ties = np.where(new, size**3 - size, 0.0).sum(axis=1)
    # Rank sum per group: each sorted position's rank added to its group, one bincount.
    flat = g[order] + (np.arange(cols, dtype=np.int64) * k)[:, None]
    r = np.bincount(flat.ravel(), weights=avg.ravel(), minlength=cols * k).reshape(cols, k).T
    rest = big - count
    c, m = count[:, None], rest[:, None]
    u = r - c * (c + 1.0) / 2.0
    mu = c * m / 2.0
    var = c * m / 12.0 * ((big + 1.0) - ties[None, :] / (big * (big - 1.0)))
    with np.errstate(invalid="ignore", divide="ignore"):
        d = u - mu
        z = np.sign(d) * np.maximum(np.abs(d) - 0.5, 0.0) / np.sqrt(var)
    return np.asarray(np.where((c > 0) & (m > 0) & (var > 0), z, np.nan))


def rank_z(values: Array, groups: np.ndarray[Any, Any], k: int) -> tuple[Array, Array]:
    """Mann–Whitney z of each group's values against all other values (one signal; NaN values
    dropped), and each group's count (see ``rank_z_columns``)."""
    values = np.asarray(values, dtype=np.float64)
    keep = ~np.isnan(values)
    v, g = values[keep], np.asarray(groups)[keep]
    count = np.bincount(g, minlength=k).astype(np.float64)
    return rank_z_columns(v[:, None], g, k)[:, 0], count


def rank_z_weighted(
    values: Array, groups: np.ndarray[Any, Any], weights: Array, k: int
) -> tuple[Array, Array]:
    """``rank_z`` of a sample given as values with counts (``weights``: how many requests hold
    each value; NaN values dropped): equal to ``rank_z`` on the expanded sample, in time and memory
    of the distinct rows. Equal values tie, so binned latencies are tested as binned."""
    values = np.asarray(values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    keep = ~np.isnan(values) & (w > 0)
    v, g, w = values[keep], np.asarray(groups, dtype=np.int64)[keep], w[keep]
    count = np.bincount(g, weights=w, minlength=k).astype(np.float64)
    big = float(w.sum())
    if big < 2:
        return np.full(k, np.nan), count
    uniq, inverse = np.unique(v, return_inverse=True)
    t = np.bincount(inverse, weights=w, minlength=len(uniq))
    before = np.concatenate(([0.0], np.cumsum(t)[:-1]))
    avg = before + (t + 1.0) / 2.0
    r = np.bincount(g, weights=w * avg[inverse], minlength=k)
    ties = float(np.sum(t**3 - t))
    c, m = count, big - count
    u = r - c * (c + 1.0) / 2.0
    mu = c * m / 2.0
    var = c * m / 12.0 * ((big + 1.0) - ties / (big * (big - 1.0)))
    with np.errstate(invalid="ignore", divide="ignore"):
        d = u - mu
        z = np.sign(d) * np.maximum(np.abs(d) - 0.5, 0.0) / np.sqrt(var)
    return np.asarray(np.where((c > 0) & (m > 0) & (var > 0), z, np.nan)), count


def p_values(z: Array, sign: float) -> Array:
    """P-values of rank z: one-sided in the bad direction (``sign`` +1 higher is worse, −1
    lower is worse) or two-sided (``sign`` 0). Equal to scipy's asymptotic ``mannwhitneyu``
    two-sided, and one-sided wherever p < ½ (the continuity correction is taken toward 0)."""
    with np.errstate(invalid="ignore"):
        p = 2.0 * _sp.ndtr(-np.abs(z)) if sign == 0 else _sp.ndtr(-sign * z)
    return np.asarray(np.minimum(p, 1.0))


def rank_p_values(
    samples: pd.DataFrame, replicas: pd.Index, columns: list[str], signs: Array
) -> Array:
    """P-values (replicas × ``columns``) of each replica's requests against the rest's.

    ``samples``: one row per request, a ``replica`` column and signal columns; only rows of
    ``replicas`` count (the replicas judged together). ``signs``: per column +1 (higher is worse,
    one-sided), −1 (lower is worse) or 0 (two-sided). NaN where a column has no samples. A
    ``weight`` column, where present, says how many requests each row stands for.
    """
    out = np.full((len(replicas), len(columns)), np.nan)
    if samples is None or samples.empty:
        return out
    names = pd.Index(samples["replica"].astype(str).to_numpy())
    codes = pd.Index([str(r) for r in replicas.tolist()]).get_indexer(names).astype(np.int64)
    mine = codes >= 0
    for j, c in enumerate(columns):
        if c not in samples.columns:
            continue
        col = samples[c].to_numpy(dtype=np.float64)[mine]
        if "weight" in samples.columns:
            w = samples["weight"].to_numpy(dtype=np.float64)[mine]
            z, _ = rank_z_weighted(col, codes[mine], w, len(replicas))
        else:
            z, _ = rank_z(col, codes[mine], len(replicas))
        out[:, j] = p_values(z, float(signs[j]))
    return out
