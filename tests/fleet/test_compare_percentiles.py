"""Each percentile of `fleet compare` gets its own verdict, consistent with its metric's."""

from __future__ import annotations

import pytest

from fleetwatch.fleet.compare import compare_runs
from fleetwatch.scenarios.compare_runs import compare_pair


@pytest.mark.parametrize(("case", "seed"), [("null", 3), ("decode_slowdown", 4)])
def test_percentile_verdicts_agree_with_their_metric_and_their_interval(
    case: str, seed: int
) -> None:
    before, after = compare_pair(case, seed, sizes=(1000, 1000))
    report = compare_runs(before, after, draws=400)
    for m in report.metrics:
        verdicts = [s.verdict for s in m.shifts]
        assert set(verdicts) <= {"regressed", "improved", "unchanged", "inconclusive"}, m.metric
        for s in m.shifts:
            if s.verdict == "unchanged":
                assert s.ci_high < report.min_effect * s.before
            if s.verdict == "regressed":
                assert s.significant and s.shift >= report.min_effect * s.before
        if m.verdict == "regressed":
            assert "regressed" in verdicts
        if m.verdict == "unchanged":
            assert set(verdicts) == {"unchanged"}
    by = {m.metric: m for m in report.metrics}
    if case == "decode_slowdown":
        assert by["decode_s"].verdict == "regressed"
        assert "regressed" in [s.verdict for s in by["decode_s"].shifts]
    else:
        assert not any(s.verdict == "regressed" for m in report.metrics for s in m.shifts)
    shown = report.to_dict()["metrics"][0]["percentiles"][0]["verdict"]
    assert shown == report.metrics[0].shifts[0].verdict
