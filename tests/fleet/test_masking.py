"""Masking: several bad replicas hiding each other from one pass's median and MAD, and the
passes that find them (peers with like traffic, the fleet with the blamed set aside)."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from fleetwatch.fleet.outliers import (
    Cause,
    DetectorConfig,
    FleetTable,
    Side,
    detect,
    different_traffic,
    table_from_records,
)
from fleetwatch.fleet.outliers.by_model import verbose
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet

# Masking: when half a fleet stands out on TTFT (one slowed replica and four that a prompt-aware
# router sends only long prompts), the median and MAD of one pass hide all of them.


def _masked_ten() -> FleetTable:
    """r5 slowed on prefill only, r6-r9 sent prompts 7x the fleet's (no per-request data).

    A single pass over the ten misses them: TTFT has median (0.104 + 0.300) / 2 = 0.202 and MAD
    0.104, so the spread is 1.4826 · b(10) · 0.104 ≈ 0.168 and the robust z is 0.6 for r5 and at
    most 2.7 for r6-r9, far below the cutoff (15.37: n = 10 at 1 % over 2 signals × 2 passes,
    for any noise shape; 7.64 for normal noise). Among the six with like traffic r5 has z ≈ 45
    (cutoff 25.4 for n = 6); with r5 set aside the long-prompt replicas have z ≈ 43-48 (cutoff
    19.3 for n = 9).
    """
    idx = pd.Index([f"r{i}" for i in range(10)])
    workload = pd.DataFrame(
        {
            "mean_prompt_tokens": [620.0, 600, 640, 610, 630, 615, 4400, 4300, 4500, 4350],
            "cache_hit_rate": [0.2] * 10,
            "request_rate": [2.0, 1.9, 2.0, 2.1, 2.0, 2.0, 2.0, 1.9, 2.0, 2.0],
            "mean_output_tokens": [170.0] * 10,
        },
        index=idx,
    )
    values = pd.DataFrame(
        {
            "ttft": [0.100, 0.104, 0.097, 0.102, 0.099, 0.300, 0.620, 0.660, 0.600, 0.640],
            "tpot": [
                0.0200,
                0.0201,
                0.0199,
                0.0200,
                0.0202,
                0.0200,
                0.0199,
                0.0201,
                0.0200,
                0.0198,
            ],
        },
        index=idx,
    )
    return FleetTable(values=values, volume=pd.Series(1000.0, index=idx), workload=workload)


def test_single_pass_statistics_hide_them_all():
    # The first-pass numbers the docstring of _masked_ten works through.
    report = detect(_masked_ten())
    ttft = report.fleet["ttft"]
    assert ttft["median"] == pytest.approx(0.202)
    assert ttft["mad"] == pytest.approx(0.104)
    scale = 1.4826 * 10 / 9.2 * ttft["mad"]
    assert (0.300 - ttft["median"]) / scale < 1
    assert (0.660 - ttft["median"]) / scale < 3
    assert ttft["cutoff"] == pytest.approx(15.37, abs=0.01)
    assert not [f for f in report.findings if f.found_in == "fleet"]


def test_slowed_and_long_prompt_replicas_hidden_by_each_other_are_found_with_their_side():
    report = detect(_masked_ten())
    by = {f.replica: f for f in report.findings}
    assert set(by) == {"r5", "r6", "r7", "r8", "r9"}, report.render()
    assert (by["r5"].signal, by["r5"].side) == ("ttft", Side.REPLICA)
    assert by["r5"].found_in == "peers"
    assert any(e.startswith("judged against peers with like traffic") for e in by["r5"].evidence)
    for r in ("r6", "r7", "r8", "r9"):
        assert (by[r].side, by[r].cause) == (Side.WORKLOAD, Cause.PROMPT_LENGTH_MIX)
        assert by[r].found_in == "unmasked"
        assert "set aside, blamed replica-side: r5" in by[r].evidence[-1]
    assert report.findings[0].replica == "r5"  # replica-side ranks first
    assert report.to_dict()["findings"][1]["found_in"] == "unmasked"
    assert "judged against peers with like traffic" in verbose(report).render()
    assert "judged against peers with like traffic" not in report.render()


def test_masked_replicas_from_records_are_found_where_one_pass_misses_them():
    long = {i: 8.0 for i in (6, 7, 8, 9)}
    df = synthetic_fleet(10, 200, seed=0, slowdown={1: 3.0}, prompt_scale=long, rate_per_s=2.0)
    # The test across replica summaries alone (no per-request samples): masking needs passes.
    table = dataclasses.replace(table_from_records(df), samples=None)
    # Normal noise between replicas: from summaries alone the long-prompt replicas' z (unmasked)
    # clears its cutoff, not the one for any noise shape (below).
    report = detect(table, DetectorConfig(min_requests=30, noise_shape="normal"))
    # The first pass alone: replica-1's TTFT and the long-prompt replicas are all below the cutoff.
    first = report.fleet["ttft"]
    scale = 1.4826 * 10 / 9.2 * first["mad"]
    ttft = table.values["ttft"]
    assert ((ttft.iloc[[1, 6, 7, 8, 9]] - first["median"]) / scale < first["cutoff"]).all()
    sides = {(f.replica, f.side) for f in report.findings}
    assert sides == {("replica-1", Side.REPLICA)} | {
        (f"replica-{i}", Side.WORKLOAD) for i in long
    }, report.render()
    r1_ttft = next(f for f in report.findings if (f.replica, f.signal) == ("replica-1", "ttft"))
    assert r1_ttft.found_in == "peers"
    lp = [f for f in report.findings if f.side is Side.WORKLOAD]
    assert all(f.found_in == "unmasked" and f.cause is Cause.PROMPT_LENGTH_MIX for f in lp)
    # Each replica's requests against the rest's are not masked: the same verdicts, first pass.
    # By the default's cutoffs (any noise shape): the same verdicts from records; from summaries
    # alone replica-1 is still found and blamed, the long-prompt replicas no longer stand out.
    ranked = detect(table_from_records(df), DetectorConfig(min_requests=30))
    assert {(f.replica, f.side) for f in ranked.findings} == sides, ranked.render()
    assert any(f.found_in == "fleet" for f in ranked.findings if f.replica == "replica-1")
    strict = detect(table, DetectorConfig(min_requests=30))
    assert {(f.replica, f.side) for f in strict.findings} == {("replica-1", Side.REPLICA)}


def test_table_only_filters_every_per_replica_frame():
    t = _masked_ten()
    sub = t.only(["r0", "r2", "r7"])
    assert list(sub.replicas) == ["r0", "r2", "r7"]
    assert list(sub.workload.index) == ["r0", "r2", "r7"]
    assert list(sub.volume.index) == ["r0", "r2", "r7"]
    assert different_traffic(t, DetectorConfig()) == ("r6", "r7", "r8", "r9")
