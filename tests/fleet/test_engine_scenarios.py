"""Scenarios from real reference-engine runs (tiny model, CPU, virtual clock, injected faults).

Healthy replicas are run once into a pool (module fixture); a scenario fleet is four of them plus
the replica under test, so every fleet here is made of real engine records.
"""

from __future__ import annotations

import dataclasses
import random

import pandas as pd
import pytest

from fleetwatch.fleet.outliers import Cause, DetectorConfig, Side, detect, table_from_records
from fleetwatch.fleet.tail import attribute_tail
from fleetwatch.records import RequestRecord, to_frame
from fleetwatch.scenarios.engine_runs import ReplicaPlan, run_replica

pytest.importorskip("torch")

REQUESTS = 40
CONFIG = DetectorConfig(min_requests=30)
POOL = 24
FLEETS = 60


def _as(records: list[RequestRecord], name: str) -> list[RequestRecord]:
    return [dataclasses.replace(r, replica=name) for r in records]


@pytest.fixture(scope="module")
def pool() -> list[pd.DataFrame]:
    """Healthy replica runs, each with its own arrival and prompt seed."""
    return [
        to_frame(run_replica(ReplicaPlan(f"h{i}", requests=REQUESTS, seed=1000 + i)))
        for i in range(POOL)
    ]


def _fleet(pool, under_test: list[RequestRecord] | None = None, n: int = 5, seed: int = 0):
    picks = random.Random(seed).sample(range(len(pool)), n - (under_test is not None))
    frames = [pool[i].assign(replica=f"replica-{k}") for k, i in enumerate(picks)]
    if under_test is not None:
        frames.append(to_frame(_as(under_test, "suspect")))
    return pd.concat(frames, ignore_index=True)


def test_engine_slowed_replica_is_found_and_blamed(pool):
    slow = run_replica(ReplicaPlan("s", requests=REQUESTS, slowdown=2.0, seed=7))
    report = detect(table_from_records(_fleet(pool, slow)), CONFIG)
    assert report.verdict == "outliers", report.render()
    assert {f.replica for f in report.findings} == {"suspect"}
    top = report.findings[0]
    assert top.side is Side.REPLICA
    assert top.cause is Cause.HARDWARE_OR_HOST
    assert top.ratio == pytest.approx(2.0, rel=0.1)
    assert {"ttft", "tpot"} <= {f.signal for f in report.findings}


def test_engine_long_prompt_replica_is_workload_side_not_blamed(pool):
    long = run_replica(ReplicaPlan("l", requests=REQUESTS, prompt_scale=4.0, seed=8))
    report = detect(table_from_records(_fleet(pool, long, seed=1)), CONFIG)
    assert all(f.replica == "suspect" for f in report.findings)
    assert report.findings, report.render()
    assert all(f.side is Side.WORKLOAD for f in report.findings), report.render()
    assert report.findings[0].cause is Cause.PROMPT_LENGTH_MIX


def test_engine_healthy_fleet_has_no_outlier(pool):
    report = detect(table_from_records(_fleet(pool, n=8, seed=2)), CONFIG)
    assert report.verdict == "no outlier", report.render()


@pytest.mark.parametrize("size", [3, 5, 10])
def test_engine_false_positive_rate_on_healthy_fleets(pool, size):
    """Fleets drawn from the pool of independent healthy runs; any finding is a false positive.

    Any finding in a healthy fleet counts. The benchmark measures the rate over more fleets.
    """
    frames = [_fleet(pool, n=size, seed=100 + k) for k in range(FLEETS)]
    flagged = sum(detect(table_from_records(f), CONFIG).verdict != "no outlier" for f in frames)
    assert flagged / len(frames) <= 0.05


def test_engine_overload_tail_is_queueing():
    df = to_frame(run_replica(ReplicaPlan("o", requests=100, rate_per_s=300.0, seed=1)))
    report = attribute_tail(df, percentile=90)
    assert report.top is not None and report.top.name == "queueing"
    assert report.top.share > 0.7


def test_engine_huge_prompts_tail_is_prompt_length_variance():
    plan = ReplicaPlan("p", requests=150, rate_per_s=8.0, huge_share=0.03, seed=2)
    report = attribute_tail(to_frame(run_replica(plan)), percentile=97)
    assert report.top is not None and report.top.name == "prompt-length variance"
    assert report.top.share > 0.7
