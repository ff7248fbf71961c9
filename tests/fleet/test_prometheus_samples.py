"""A Prometheus source gives the rank test each replica's requests, read from histogram buckets.

Judged from summaries alone, a fleet of three cannot flag one replica at a 1 % family-wise level
unless the other two agree to a hair; each replica's TTFT and e2e histograms count every request,
so their bucket increases over the window are per-request samples (tied within a bucket).
"""

from __future__ import annotations

import json
import urllib.parse

import numpy as np
import pytest

from fleetwatch.core.profiles import get_profile
from fleetwatch.fleet.outliers import Side, detect, table_from_prometheus
from fleetwatch.fleet.outliers.sources import prometheus as source
from fleetwatch.fleet.outliers.sources.histogram import bucket_samples


def test_bucket_samples_are_the_counted_requests_at_their_upper_bounds():
    got = bucket_samples({0.5: 5.0, 0.1: 2.0, float("inf"): 6.0})
    assert got.tolist() == [0.1, 0.1, 0.5, 0.5, 0.5, float("inf")]


def test_bucket_samples_round_increases_and_never_count_backwards():
    # increase() extrapolates to fractions; a lower cumulative count than the bucket below is noise
    got = bucket_samples({0.1: 1.6, 0.5: 1.4, 1.0: 3.2})
    assert got.tolist() == [0.1, 0.1, 1.0]


LES = (0.25, 0.5, 1.0, 2.5, 5.0, float("inf"))


def _fleet(slow_at: float, requests: int = 60):
    """Three replicas; r1 and r2 healthy with their requests spread over 0.25–1 s, r0 with every
    request in the bucket ``slow_at``."""
    rng = np.random.default_rng(7)
    cumulative = {}
    for rep in ("r0", "r1", "r2"):
        if rep == "r0":
            per = {le: (requests if le == slow_at else 0) for le in LES}
        else:
            split = rng.multinomial(requests, [0.3, 0.5, 0.2])
            per = dict(zip(LES, [*split, 0, 0, 0], strict=True))
        acc, out = 0, {}
        for le in LES:
            acc += per[le]
            out[le] = acc
        cumulative[rep] = out
    return cumulative


def _api(cumulative, *, medians):
    """A fake Prometheus answering the source's queries for the fleet in ``cumulative``."""

    def vec(values):
        return [{"metric": m, "value": [0, str(v)]} for m, v in values]

    def fetch(url: str) -> bytes:
        q = urllib.parse.parse_qs(urllib.parse.urlparse(url).query)["query"][0]
        reps = sorted(cumulative)
        if "histogram_quantile" in q:
            result = vec(({"replica": r}, medians[r]) for r in reps)
        elif "sum by (model, replica, le) (increase(" in q and (
            "first_token" in q or "request_duration" in q
        ):
            result = vec(
                ({"replica": r, "le": "+Inf" if le == float("inf") else repr(le)}, n)
                for r in reps
                for le, n in cumulative[r].items()
            )
        elif q.startswith("sum by (model, replica) (increase(fleetwatch_requests_total"):
            result = vec(({"replica": r}, cumulative[r][float("inf")]) for r in reps)
        elif q.startswith("sum by (model, replica) (rate(fleetwatch_requests_total"):
            result = vec(({"replica": r}, 1.0) for r in reps)
        else:
            result = []
        return json.dumps(
            {"status": "success", "data": {"resultType": "vector", "result": result}}
        ).encode()

    return fetch


def test_three_replicas_from_prometheus_flag_the_slow_one_by_its_requests():
    cumulative = _fleet(slow_at=2.5)
    medians = {"r0": 2.0, "r1": 0.45, "r2": 0.52}
    table = table_from_prometheus(
        "http://p", get_profile("fleetwatch"), window="1m", fetch=_api(cumulative, medians=medians)
    )
    assert table.samples is not None
    assert sorted(table.samples.columns) == ["e2e", "replica", "ttft"]
    assert (table.samples["replica"] == "r0").sum() == 2 * 60  # ttft and e2e rows
    report = detect(table)
    flagged = {f.replica for f in report.findings if f.side is Side.REPLICA}
    assert flagged == {"r0"}


def test_without_the_requests_the_same_fleet_of_three_has_no_power(monkeypatch):
    monkeypatch.setattr(source, "MAX_SAMPLES", 0)
    cumulative = _fleet(slow_at=2.5)
    medians = {"r0": 2.0, "r1": 0.45, "r2": 0.52}
    table = table_from_prometheus(
        "http://p", get_profile("fleetwatch"), window="1m", fetch=_api(cumulative, medians=medians)
    )
    assert table.samples is None
    assert detect(table).findings == ()


@pytest.mark.parametrize("seed", range(20))
def test_healthy_fleets_of_three_from_prometheus_are_not_flagged(seed):
    rng = np.random.default_rng(seed)
    cumulative = {}
    for rep in ("r0", "r1", "r2"):
        split = rng.multinomial(60, [0.3, 0.5, 0.2])
        acc, out = 0, {}
        for le, n in zip(LES, [*split, 0, 0, 0], strict=True):
            acc += n
            out[le] = acc
        cumulative[rep] = out
    medians = {r: 0.4 + 0.01 * i for i, r in enumerate(sorted(cumulative))}
    table = table_from_prometheus(
        "http://p", get_profile("fleetwatch"), window="1m", fetch=_api(cumulative, medians=medians)
    )
    assert detect(table).findings == ()
