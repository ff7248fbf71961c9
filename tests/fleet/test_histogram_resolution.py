"""Quantiles read from histograms: what a histogram cannot tell apart is not a finding, and the
requests a snapshot's histograms counted give small fleets the rank test's power.

``histogram_quantile`` interpolates inside a bucket, so a replica with 36 % of its requests just
above an edge and a fleet with none there read as 7.8 ms against 5 ms although both lie in
(0, 10 ms]: a healthy vLLM replica slowed a little by a busy host was once blamed on that.
"""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from fleetwatch.core.profiles import Signal, get_profile
from fleetwatch.fleet.outliers import DetectorConfig, Side, detect
from fleetwatch.fleet.outliers.signals import signal_spec
from fleetwatch.fleet.outliers.sources.histogram import (
    histogram_quantile,
    median_bucket,
    resolvable,
)
from fleetwatch.fleet.outliers.sources.snapshots import table_from_metrics_text
from fleetwatch.scenarios.healthy_tables import REQUEST_SHAPES, histogram_fleet

VLLM = get_profile("vllm")


def _snapshot(tpot: list[float], ttft: list[float]) -> str:
    """One vLLM replica's /metrics text through a real registry: per-request TPOT and TTFT."""
    reg = CollectorRegistry()

    def hist(sig: Signal) -> Histogram:
        ref = VLLM.metric(sig)
        return Histogram(ref.name, "x", buckets=ref.buckets, registry=reg)

    h_tpot, h_ttft, h_e2e = hist(Signal.TPOT), hist(Signal.TTFT), hist(Signal.E2E)
    for d, t in zip(tpot, ttft, strict=True):
        h_tpot.observe(d)
        h_ttft.observe(t)
        h_e2e.observe(t + 48 * d)
    total = VLLM.outcomes.total
    c = Counter(total.name.removesuffix("_total"), "x", ["finished_reason"], registry=reg)
    c.labels("length").inc(len(tpot))
    c.labels("error").inc(0)
    return generate_latest(reg).decode()


def test_resolvable_is_another_bucket_in_the_bad_direction():
    edges = (0.01, 0.025, 0.05)
    x = np.array([0.004, 0.0099, 0.01, 0.0101, 0.03, 0.2])
    assert resolvable(x, 0.005, edges, "higher").tolist() == [0, 0, 0, 1, 1, 1]
    assert resolvable(x, 0.03, edges, "lower").tolist() == [1, 1, 1, 1, 0, 0]
    assert resolvable(x, 0.03, edges, "both").tolist() == [1, 1, 1, 1, 0, 1]
    assert median_bucket(0.005, (*edges, float("inf"))) == (0.0, 0.01)
    assert median_bucket(0.03, edges) == (0.025, 0.05)
    # without finite edges nothing is hidden
    assert resolvable(x, 0.005, (float("inf"),), "higher").all()


@pytest.mark.parametrize(("above", "flagged"), [(0.36, False), (0.6, True)])
def test_a_p50_inside_the_fleet_medians_bucket_is_not_a_finding(above, flagged):
    # Two replicas decode every request in 4 ms; the third has ``above`` of its requests at 15 ms.
    # At 36 % its interpolated p50 is 7.8 ms (1.55x the fleet's 5 ms) but both are in (0, 10 ms];
    # at 60 % its p50 is 12.5 ms, in the next bucket: a difference the histogram does show.
    n = 200
    k = round(above * n)
    ttft = [0.03] * n
    texts = {
        "a": _snapshot([0.004] * n, ttft),
        "b": _snapshot([0.004] * n, ttft),
        "c": _snapshot([0.004] * (n - k) + [0.015] * k, ttft),
    }
    table = table_from_metrics_text(texts, VLLM)
    assert table.bins["tpot"][:2] == (0.01, 0.025)
    tpot_c = float(table.values.loc["c", "tpot"])
    ref = VLLM.metric(Signal.TPOT)
    cumulative = [(le, (n - k) + (k if le >= 0.015 else 0)) for le in ref.buckets]
    assert tpot_c == pytest.approx(histogram_quantile(0.5, [*cumulative, (float("inf"), n)]))
    report = detect(table)
    found = {(f.replica, f.signal) for f in report.findings if f.side is Side.REPLICA}
    # e2e (ttft + 48 decodes) moves with TPOT; at 36 % its p50 too stays in the median's bucket
    assert found == ({("c", "tpot"), ("c", "e2e")} if flagged else set())
    stats = report.to_dict()["fleet"]["tpot"]
    assert (stats["median_bucket_low"], stats["median_bucket_high"]) == (0.0, 0.01)
    if flagged:
        finding = next(f for f in report.findings if f.signal == "tpot")
        assert any("outside the bucket (0 ms, 10 ms]" in line for line in finding.evidence)
    else:
        assert tpot_c / 0.005 > 1.25  # the minimum effect alone would have let it through


def test_snapshots_of_three_give_the_rank_test_each_replicas_requests():
    rng = np.random.default_rng(11)

    def replica(slow: float) -> str:
        t = rng.lognormal(np.log(0.2), 0.3, 300) * slow
        return _snapshot(list(rng.lognormal(np.log(0.03), 0.1, 300)), list(t))

    table = table_from_metrics_text({"a": replica(1.0), "b": replica(1.0), "c": replica(2.0)}, VLLM)
    assert table.samples is not None
    assert (table.samples["replica"] == "c").sum() == 3 * 300  # ttft, tpot and e2e rows
    report = detect(table)
    found = {(f.replica, f.signal) for f in report.findings if f.side is Side.REPLICA}
    assert ("c", "ttft") in found and {r for r, _ in found} == {"c"}
    ttft = next(f for f in report.findings if f.signal == "ttft")
    assert any("its 300 requests against the rest" in line for line in ttft.evidence)


@pytest.mark.parametrize("seed", range(12))
def test_healthy_snapshots_of_three_are_not_flagged(seed):
    rng = np.random.default_rng(seed)

    def replica() -> str:
        t = rng.lognormal(np.log(0.2), 0.3, 300)
        return _snapshot(list(rng.lognormal(np.log(0.03), 0.1, 300)), list(t))

    table = table_from_metrics_text({r: replica() for r in "abc"}, VLLM)
    assert detect(table).findings == ()


BOUNDS = {
    name: tuple(VLLM.metric(sig).buckets)
    for name, sig in (("ttft", Signal.TTFT), ("tpot", Signal.TPOT), ("e2e", Signal.E2E))
}
ALONE = DetectorConfig(
    min_requests=10, signals={s: signal_spec(s).ungated() for s in ("ttft", "tpot", "e2e")}
)


@pytest.mark.parametrize("shape", REQUEST_SHAPES)
@pytest.mark.parametrize("n", [3, 10])
def test_healthy_fleets_read_from_histograms_hold_the_family_wise_level(n, shape):
    # The statistical test alone (floors and minimum effects off): the rank test on the TTFT,
    # TPOT and e2e buckets (vLLM's TPOT histogram is per request), beside the bucket gate. Judged
    # instead by the cutoff across interpolated p50s, TPOT flags 8 % of healthy fleets of three
    # with bimodal requests without the gate, and 18 % of thirty with it (BENCHMARKS.md).
    rng = np.random.default_rng(500 + n)
    fleets = 200
    flagged = sum(
        bool(detect(histogram_fleet(n, 100, shape, BOUNDS, rng=rng), ALONE).findings)
        for _ in range(fleets)
    )
    assert flagged <= 0.015 * fleets, flagged
