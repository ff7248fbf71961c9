"""`fleet compare` judges the output shape: finish-reason, empty-output and error-type shares.

Measured on seeded draws: between runs of one system a share is called moved in at most 1 % of
pairs (the family-wise error, Holm across the shares); a truncation rise from 20 % to 30 % of
answers at 1,000 requests a side is caught in at least 95 %. End to end, a run whose latency is
untouched but whose answers are cut at ``max_tokens`` twice as often is a regression, in memory
and through the query engine alike.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fleetwatch.fleet.compare import compare_runs
from fleetwatch.fleet.compare.engine import NEEDS, compare_in_engines
from fleetwatch.fleet.compare.shape import (
    MAX_NAMES,
    ShapeCounts,
    judge_shape,
    shape_counts,
    shape_from_tallies,
)
from fleetwatch.records.engine.scan import open_scan
from fleetwatch.scenarios.compare_runs import shape_counts_draw
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet
from tests.records.plugin_tree import write_tree
from tests.rounding import rounded

_draw = shape_counts_draw


def _moved(before: ShapeCounts, after: ShapeCounts) -> set[str]:
    signals = judge_shape(before, after, alpha=0.01, min_effect=0.05, confidence=0.95)
    return {s.name for s in signals if s.verdict == "rose"}


def test_between_runs_of_one_system_a_share_is_called_moved_at_most_1_percent() -> None:
    rng = np.random.default_rng(7)
    pairs = 1000
    false = sum(
        bool(_moved(_draw(rng, 1000, (0.75, 0.2, 0.05)), _draw(rng, 1000, (0.75, 0.2, 0.05))))
        for _ in range(pairs)
    )
    assert false / pairs <= 0.01


def test_a_truncation_rise_is_caught_and_named() -> None:
    rng = np.random.default_rng(8)
    pairs = 300
    caught = [
        _moved(_draw(rng, 1000, (0.75, 0.2, 0.05)), _draw(rng, 1000, (0.65, 0.3, 0.05)))
        for _ in range(pairs)
    ]
    assert sum("finish_reason=length" in c for c in caught) / pairs >= 0.95
    # the share that fell is not what is named: stop fell because length rose
    assert not any("finish_reason=stop" in c for c in caught)


def test_a_new_error_type_and_empty_outputs_are_shares_of_their_own_whole() -> None:
    before = shape_from_tallies({"stop": 950}, 0, 950, {"timeout": 50}, 1000)
    after = shape_from_tallies({"stop": 900}, 60, 900, {"timeout": 50, "oom": 50}, 1000)
    signals = {
        s.name: s for s in judge_shape(before, after, alpha=0.01, min_effect=0.05, confidence=0.95)
    }
    assert signals["error_type=oom"].before == (0, 1000) and signals["error_type=oom"].after == (
        50,
        1000,
    )
    assert signals["error_type=oom"].verdict == "rose"
    assert signals["empty output"].after == (60, 900) and signals["empty output"].verdict == "rose"
    assert signals["error_type=timeout"].verdict in ("unchanged", "inconclusive")
    # a share nil in both runs is left out; a reason that is every answer in both is unchanged
    assert "finish_reason=length" not in signals
    assert signals["finish_reason=stop"].p_value == 1.0


def test_rare_values_are_folded_into_other_alike_in_both_runs() -> None:
    reasons = {f"r{i}": 100 - i for i in range(MAX_NAMES + 5)}  # r11: 89; r12: 88, ...
    n = sum(reasons.values())
    # r12 is the 12th most common in the after run alone (90 > 89) but the 13th over both runs
    # (88 + 90 < 89 + 89): in "other" in both, never 90 against 0
    before = shape_from_tallies(reasons, None, n, {}, n)
    after = shape_from_tallies({**reasons, "r12": 90}, None, n, {}, n)
    got = {
        s.name: s for s in judge_shape(before, after, alpha=0.01, min_effect=0.05, confidence=0.95)
    }
    names = [k for k in got if k.startswith("finish_reason=")]
    assert len(names) == MAX_NAMES + 1 and "finish_reason=other" in names
    assert "finish_reason=r12" not in got and "finish_reason=r0" in got
    assert got["finish_reason=other"].before[0] == sum(
        100 - i for i in range(MAX_NAMES, MAX_NAMES + 5)
    )


def _with_shape(frame: pd.DataFrame, seed: int, length_share: float) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    out = frame.copy()
    ok = (out["status"].astype(str) == "ok").to_numpy()
    reasons = np.where(rng.random(len(out)) < length_share, "length", "stop")
    out["finish_reason"] = pd.array(np.where(ok, reasons, None), dtype="string")
    types = np.where(rng.random(len(out)) < 0.5, "timeout", "oom")
    out["error_type"] = pd.array(np.where(ok, None, types), dtype="string")
    return out


def test_answers_cut_twice_as_often_make_a_regression_with_latency_untouched(
    tmp_path: Path,
) -> None:
    before = _with_shape(synthetic_fleet(4, 900, seed=1, error_rate={0: 0.05}), 11, 0.1)
    after = _with_shape(synthetic_fleet(4, 900, seed=2, error_rate={0: 0.05}), 12, 0.2)
    report = compare_runs(before, after, draws=400)
    assert report.regressions == () and report.error_verdict != "regressed"
    assert [s.name for s in report.shape_moved] == ["finish_reason=length"]
    assert report.verdict == "regression"
    assert "output shape moved: finish_reason=length" in report.summary()
    assert "finish_reason=length" in report.render()
    assert {s["signal"] for s in report.to_dict()["output_shape"]} >= {
        "finish_reason=length",
        "finish_reason=stop",
        "error_type=oom",
        "error_type=timeout",
    }
    same = compare_runs(before, _with_shape(synthetic_fleet(4, 900, seed=2), 12, 0.1), draws=400)
    assert same.shape_moved == ()
    # through the query engine: the same signals, counts and verdicts
    b = write_tree(tmp_path / "before", before).root
    a = write_tree(tmp_path / "after", after).root
    with open_scan([b], columns=NEEDS) as sb, open_scan([a], columns=NEEDS) as sa:
        got = compare_in_engines(sb.engine, sa.engine, draws=400)
    assert rounded(got.to_dict()["output_shape"]) == rounded(report.to_dict()["output_shape"])
    assert got.verdict == "regression"


@pytest.mark.parametrize("column", ["finish_reason", "error_type", "output_tokens"])
def test_a_frame_without_a_column_gives_no_signal_from_it(column: str) -> None:
    frame = _with_shape(synthetic_fleet(2, 50, seed=3, error_rate={0: 0.2}), 1, 0.3)
    counts = shape_counts(frame.drop(columns=[column]))
    prefix = "empty output" if column == "output_tokens" else f"{column}="
    assert not any(k.startswith(prefix) for k in counts.signals)


def test_aborted_and_rejected_are_shares_of_all_requests() -> None:
    before = shape_from_tallies({"stop": 980}, 0, 980, {}, 1000, {"aborted": 20})
    after = shape_from_tallies({"stop": 900}, 0, 900, {}, 1000, {"aborted": 60, "rejected": 40})
    got = {
        s.name: s for s in judge_shape(before, after, alpha=0.01, min_effect=0.05, confidence=0.95)
    }
    assert got["status=aborted"].before == (20, 1000) and got["status=aborted"].verdict == "rose"
    assert got["status=rejected"].after == (40, 1000) and got["status=rejected"].verdict == "rose"
    frame = _with_shape(synthetic_fleet(2, 200, seed=5), 1, 0.2)
    frame.loc[frame.index[:30], "status"] = "aborted"
    counts = shape_counts(frame)
    assert counts.signals["status=aborted"] == 30 and counts.of["status"] == len(frame)
