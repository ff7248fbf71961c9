"""The rule-cost model: its arithmetic on known selectors, and the claim BENCHMARKS.md records —
fleetwatch's SLO rules read no more samples a round than Sloth's shape of the same SLOs at 200
replicas, where reading the period raw read several times more."""

from __future__ import annotations

from benchmarks.bench_rules import REPLICAS, SCRAPE_S, _fleetwatch, _sloth, samples


def test_the_model_counts_series_times_window_over_interval() -> None:
    raw = 'sum(increase(vllm:request_success_total{finished_reason="error"}[1h]))'
    assert samples([raw]) == REPLICAS * (3600 // SCRAPE_S + 1)
    assert samples(["sum(increase(vllm:request_success_total[1h]))"]) == 4 * REPLICAS * 241
    assert samples(['sum_over_time(slo:sli_bad:increase5m{slo="a"}[30d:5m])']) == 8640
    assert samples(["sum_over_time(slo:sli_error:ratio_rate5m[30d])"]) == 86401


def test_fleetwatch_reads_less_than_sloth_and_the_raw_windows_read_far_more() -> None:
    """Summing the day-long burn windows from the recorded 5-minute counts reads several times
    less than Sloth's raw windows; reading them raw read about what Sloth's do, and the period
    raw too several times more."""
    ours, sloth = samples(_fleetwatch()), samples(_sloth())
    assert 5 * ours < sloth
    assert samples(_fleetwatch({"burn"})) <= sloth
    assert samples(_fleetwatch({"burn", "period"})) > 5 * sloth


def test_the_model_predicts_what_a_live_prometheus_reads() -> None:
    """Prometheus's own query statistics (totalQueryableSamples) over a TSDB block of a small
    fleet equal the model's count, for fleetwatch's raw-window rules and for Sloth's; both rule
    sets, loaded side by side in that server, evaluate without a failure, and every group's
    evaluation time is read at each of its evaluations."""
    from benchmarks.rules_live import measure

    live = measure(replicas=5, hours=25, evaluations=2, interval_s=1)
    for name, cost in live.items():
        assert cost.measured == cost.predicted > 0, name
        assert cost.times is not None and cost.times.failures == 0, name
        assert len(cost.times.rounds) == 2 and min(cost.times.rounds) > 0, name
    assert {n: c.times.groups for n, c in live.items() if c.times} == {"fleetwatch": 2, "sloth": 6}
