"""Tail attribution on constructed record sets where the true cause is known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.tail import attribute_tail
from fleetwatch.records import add_derived
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet


def _frame(arrival, queue, prompt, out, *, stall=None, replica=None, per_token=2e-4, tpot=0.02):
    n = len(arrival)
    prefill = prompt * per_token
    decode = tpot * (out - 1)
    stall = np.zeros(n) if stall is None else stall
    scheduled = arrival + queue
    first = scheduled + prefill
    finished = first + decode + stall
    return add_derived(
        pd.DataFrame(
            {
                "replica": replica if replica is not None else ["r0"] * n,
                "status": ["ok"] * n,
                "arrival_s": arrival,
                "scheduled_s": scheduled,
                "first_token_s": first,
                "finished_s": finished,
                "prompt_tokens": prompt.astype(np.int64),
                "output_tokens": out.astype(np.int64),
                "cached_prompt_tokens": np.zeros(n, dtype=np.int64),
                "preemptions": (stall > 0).astype(np.int64),
                "preemption_stall_s": stall,
            }
        )
    )


def test_queueing_wins_when_arrivals_exceed_capacity():
    rng = np.random.default_rng(1)
    n = 4000
    prompt = rng.integers(200, 800, n).astype(float)
    out = rng.integers(50, 150, n).astype(float)
    service = prompt * 2e-4 + 0.02 * (out - 1)  # ~2.1 s
    # Four servers; arrivals at 1.2x capacity for the last third of the run.
    rate = np.where(np.arange(n) < 2 * n // 3, 0.7, 1.2) * 4 / service.mean()
    arrival = np.cumsum(rng.exponential(1 / rate))
    free = np.zeros(4)
    queue = np.empty(n)
    for i in range(n):  # FIFO, four servers
        k = int(np.argmin(free))
        start = max(arrival[i], free[k])
        queue[i] = start - arrival[i]
        free[k] = start + service[i]
    report = attribute_tail(_frame(arrival, queue, prompt, out))
    assert report.top is not None and report.top.name == "queueing"
    assert report.top.share > 0.8
    assert "arrivals exceed capacity" in report.top.evidence[1]
    assert sum(c.delta_s for c in report.components) == pytest.approx(report.excess_s)


def test_prompt_length_variance_wins_when_a_few_huge_prompts_are_mixed_in():
    rng = np.random.default_rng(2)
    n = 5000
    prompt = rng.integers(200, 800, n).astype(float)
    huge = rng.choice(n, 40, replace=False)
    prompt[huge] = rng.integers(60_000, 80_000, 40)  # 12-16 s of prefill each
    out = rng.integers(50, 100, n).astype(float)
    arrival = np.cumsum(rng.exponential(0.5, n))
    queue = rng.exponential(0.02, n)
    report = attribute_tail(_frame(arrival, queue, prompt, out))
    assert report.top is not None and report.top.name == "prompt-length variance"
    assert report.top.share > 0.8
    prefill = next(c for c in report.components if c.name == "prefill")
    assert prefill.delta_s > 0.8 * report.excess_s


def test_preemption_wins_when_the_tail_was_preempted():
    rng = np.random.default_rng(3)
    n = 3000
    prompt = rng.integers(200, 400, n).astype(float)
    out = rng.integers(50, 60, n).astype(float)
    stall = np.where(rng.uniform(size=n) < 0.02, rng.uniform(3, 5, n), 0.0)
    arrival = np.cumsum(rng.exponential(0.5, n))
    report = attribute_tail(_frame(arrival, rng.exponential(0.01, n), prompt, out, stall=stall))
    assert report.top is not None and report.top.name == "preemption"


def test_one_bad_replica_is_named():
    df = synthetic_fleet(5, 800, seed=4, slowdown={2: 3.0})
    report = attribute_tail(df)
    assert report.top is not None and report.top.name == "one bad replica"
    assert "replica-2" in report.top.evidence[0]


def test_ttft_target_has_no_decode_component():
    report = attribute_tail(synthetic_fleet(3, 300, seed=1), target="ttft", percentile=95)
    assert [c.name for c in report.components] == ["queue", "prefill", "preemption_stall"]
    assert report.n_tail + report.n_body == 900


def test_bad_percentile_is_an_analysis_error():
    with pytest.raises(AnalysisError, match="percentile"):
        attribute_tail(synthetic_fleet(3, 100), percentile=100)


def test_report_serialises():
    doc = attribute_tail(synthetic_fleet(3, 300, seed=1)).to_dict()
    assert doc["suspects"] and doc["excess_s"] > 0
