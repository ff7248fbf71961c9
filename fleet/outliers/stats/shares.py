"""Shares of a replica's requests (the error rate) tested by their counts, not their spread.

A replica's error rate is ``k`` bad requests of its ``n``; the fleet's others had ``K − k`` of
``N − n``. Under "every replica fails with the same probability" the chance of ``k`` or more is
Fisher's exact test (hypergeometric: ``k`` of the fleet's ``K`` bad requests falling among this
replica's ``n`` of ``N``), whatever the probability and whatever the spread of the other
replicas' rates. A fleet of three where one replica fails 10 % of 2,000 requests is then found
even when the other two fail 0.1 % and 0.3 %, which the cutoff across three rates (149 robust
z's) cannot do. Beyond ``EXACT_UP_TO`` replicas the binomial test against the rest's pooled rate
is used (the rest is then so large that both agree, and it is 50x faster).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd
from scipy import special, stats

from fleetwatch.fleet.outliers.signals import most_common

__all__ = ["EXACT_UP_TO", "ShareCounts", "outcome_shares", "share_counts", "share_with_se"]

Array = np.ndarray[Any, np.dtype[np.float64]]

EXACT_UP_TO = 64
"""Fleets up to this many replicas get Fisher's exact test; larger ones the binomial."""


def share_with_se(hits: pd.Series, n: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Each replica's share ``hits / n`` of its requests and its sampling error under the
    fleet's pooled share (the binomial's ``sqrt(p(1 - p) / n)``): how every counted signal of a
    table (the error rate, error types, the output shape) is built, whatever the source."""
    pooled = float(hits.sum() / n.sum())
    return hits / n, np.sqrt(max(pooled * (1 - pooled), 0.0) / n)


def outcome_shares(
    shape: Mapping[str, Mapping[str, float]],
    failed: Mapping[str, Mapping[str, float]],
    volume: pd.Series,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(shares, their sampling errors) per replica of one fleet, from its requests (``volume``)
    and the requests counted by each outcome counter (Prometheus, snapshots): the output shape
    (``shape``: the answers cut at max_tokens) and each failure outcome beside errors
    (``failed``: aborts, rejections, named ``outcome=<name>``), built by ``share_with_se``
    as the records source builds them. As there, a share no replica of the fleet has is left
    out, and at most ``MAX_ERROR_TYPES`` failure outcomes are judged, the most common first."""

    def seen(col: Mapping[str, float]) -> float:
        return sum(v for v in col.values() if math.isfinite(v) and v > 0)

    kept = {n: c for n, c in shape.items() if seen(c) >= 1}
    totals = {n: seen(c) for n, c in failed.items()}
    kept.update({n: failed[n] for n in most_common({n: t for n, t in totals.items() if t >= 1})})
    values, stderr = pd.DataFrame(index=volume.index), pd.DataFrame(index=volume.index)
    for name, col in kept.items():
        hits = pd.Series(col, dtype="float64").reindex(volume.index).fillna(0.0).clip(lower=0.0)
        values[name], stderr[name] = share_with_se(hits, volume)
    return values, stderr


class ShareCounts:
    """Per replica: bad requests ``k``, requests ``n``, the rest's ``rest_k`` of ``rest_n``, and
    the one-sided p-value of ``k`` or more (NaN where the share or the count is unknown);
    ``test`` names the test that gave it."""

    __slots__ = ("k", "n", "p", "rest_k", "rest_n", "test")

    def __init__(
        self, k: Array, n: Array, rest_k: Array, rest_n: Array, p: Array, test: str
    ) -> None:
        self.k, self.n, self.rest_k, self.rest_n, self.p = k, n, rest_k, rest_n, p
        self.test = test


def share_counts(share: Array, volume: Array) -> ShareCounts:
    """Counts and p-values for ``share`` (bad / requests) of ``volume`` requests per replica;
    counts are rounded (a Prometheus ``increase`` is extrapolated to fractions)."""
    share = np.asarray(share, dtype=np.float64)
    n = np.rint(np.asarray(volume, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        k = np.rint(share * n)
        known = np.isfinite(k) & np.isfinite(n) & (n >= 1)
    k = np.where(known, np.clip(k, 0.0, np.where(known, n, 0.0)), np.nan)
    n = np.where(known, n, np.nan)
    big_k, big_n = float(np.nansum(k)), float(np.nansum(n))
    rest_k, rest_n = big_k - k, big_n - n
    p = np.full(share.shape, np.nan)
    exact = int(known.sum()) <= EXACT_UP_TO
    test = known & (rest_n > 0)
    if test.any():
        kk, nn = k[test], n[test]
        if big_k <= 0:
            p[test] = 1.0
        elif exact:
            p[test] = stats.hypergeom.sf(kk - 1, big_n, big_k, nn)
        else:
            with np.errstate(invalid="ignore", divide="ignore"):
                rate = np.clip(rest_k[test] / rest_n[test], 0.0, 1.0)
            some = kk > 0
            out = np.ones(kk.shape)
            out[some] = special.bdtrc(
                kk[some].astype(np.int64) - 1, nn[some].astype(np.int64), rate[some]
            )
            p[test] = out
    name = "Fisher's exact test" if exact else "binomial test against the rest's rate"
    return ShareCounts(k, n, rest_k, rest_n, np.clip(p, 0.0, 1.0), name)
