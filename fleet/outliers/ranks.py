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
gives this test half of each signal's share of ``alpha`` and splits it over the replicas
(Bonferroni), so the whole report's false-alarm rate stays at ``alpha`` (see ``score``).

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

__all__ = ["SAMPLE_COLUMNS", "rank_p_values", "rank_z"]

SAMPLE_COLUMNS = ("ttft", "tpot", "e2e")
"""Signals a per-request sample frame may carry (seconds, one row per ok request)."""

Array = np.ndarray[Any, np.dtype[np.float64]]


def _ranks(v: Array) -> tuple[Array, float]:
    """Average ranks (1-based) of ``v`` and the tie term Σ(t³ − t)."""
    order = np.argsort(v, kind="stable")
    s = v[order]
    new = np.empty(s.size, dtype=bool)
    new[:1] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    sizes = np.diff(np.append(starts, s.size)).astype(np.float64)
    avg = starts + (sizes + 1.0) / 2.0
    ranks = np.empty(s.size)
    ranks[order] = np.repeat(avg, sizes.astype(np.int64))
    return ranks, float((sizes**3 - sizes).sum())


def rank_z(values: Array, groups: np.ndarray[Any, Any], k: int) -> tuple[Array, Array]:
    """Mann–Whitney z of each group's values against all other values (one signal).

    ``values``: samples (NaN dropped); ``groups``: group index 0..k−1 of each sample. Returns
    (z, count): z > 0 where the group's values rank higher than the rest's, with a continuity
    correction of ½ toward 0; NaN where a group or its rest has no sample or all values tie.
    """
    values = np.asarray(values, dtype=np.float64)
    keep = ~np.isnan(values)
    v, g = values[keep], np.asarray(groups)[keep]
    count = np.bincount(g, minlength=k).astype(np.float64)
    big = float(v.size)
    if big < 2:
        return np.full(k, np.nan), count
    ranks, ties = _ranks(v)
    r = np.bincount(g, weights=ranks, minlength=k)
    rest = big - count
    u = r - count * (count + 1.0) / 2.0
    mu = count * rest / 2.0
    var = count * rest / 12.0 * ((big + 1.0) - ties / (big * (big - 1.0)))
    with np.errstate(invalid="ignore", divide="ignore"):
        d = u - mu
        z = np.sign(d) * np.maximum(np.abs(d) - 0.5, 0.0) / np.sqrt(var)
    return np.where((count > 0) & (rest > 0) & (var > 0), z, np.nan), count


def rank_p_values(
    samples: pd.DataFrame, replicas: pd.Index, columns: list[str], signs: Array
) -> Array:
    """P-values (replicas × ``columns``) of each replica's requests against the rest's.

    ``samples``: one row per request, a ``replica`` column and signal columns; only rows of
    ``replicas`` count (the replicas judged together). ``signs``: per column +1 (higher is worse,
    one-sided), −1 (lower is worse) or 0 (two-sided). NaN where a column has no samples.
    """
    out = np.full((len(replicas), len(columns)), np.nan)
    if samples is None or samples.empty:
        return out
    names = samples["replica"].astype(str).to_numpy()
    codes = pd.Index([str(r) for r in replicas.tolist()]).get_indexer(names).astype(np.int64)
    mine = codes >= 0
    for j, c in enumerate(columns):
        if c not in samples.columns:
            continue
        z, _ = rank_z(samples[c].to_numpy(dtype=np.float64)[mine], codes[mine], len(replicas))
        s = signs[j]
        with np.errstate(invalid="ignore"):
            out[:, j] = 2.0 * _sp.ndtr(-np.abs(z)) if s == 0 else _sp.ndtr(-s * z)
    return np.minimum(out, 1.0)
