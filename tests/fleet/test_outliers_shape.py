"""`fleet outliers` names the replica whose answers end unlike its peers': more of them cut at
``max_tokens``, or empty; from records in memory and through the query engine alike."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fleetwatch.fleet.outliers import Cause, Side
from fleetwatch.fleet.outliers.by_model import detect_by_model, detect_tables, findings_of
from fleetwatch.fleet.outliers.sources.engine import NEEDS, tables_from_engine
from fleetwatch.records.engine.scan import open_scan
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet
from tests.records.plugin_tree import write_tree

SHAPE = ("truncated_share", "empty_share")


def _fleet(seed: int, cut: dict[str, float], empty: dict[str, float]) -> pd.DataFrame:
    """Six alike replicas of 600 requests; 10 % of answers cut at max_tokens unless ``cut``
    says otherwise per replica, and ``empty`` the share of ok answers with no token."""
    frame = synthetic_fleet(6, 600, seed=seed)
    rng = np.random.default_rng(seed)
    reps = frame["replica"].astype(str).to_numpy()
    share = np.array([cut.get(r, 0.1) for r in reps])
    frame["finish_reason"] = pd.array(
        np.where(rng.random(len(frame)) < share, "length", "stop"), dtype="string"
    )
    void = rng.random(len(frame)) < np.array([empty.get(r, 0.0) for r in reps])
    frame.loc[void, "output_tokens"] = 0
    return frame


def _shape_findings(report: object) -> set[tuple[str, str, Side, Cause]]:
    return {
        (f.replica, f.signal, f.side, f.cause)
        for f in findings_of(report)  # type: ignore[arg-type]
        if f.signal in SHAPE
    }


def test_the_replica_cutting_answers_and_the_one_answering_empty_are_named(
    tmp_path: Path,
) -> None:
    frame = _fleet(1, {"replica-2": 0.3}, {"replica-4": 0.05})
    expect = {
        ("replica-2", "truncated_share", Side.REPLICA, Cause.OUTPUT_SHAPE),
        ("replica-4", "empty_share", Side.REPLICA, Cause.OUTPUT_SHAPE),
    }
    assert _shape_findings(detect_by_model(frame)) == expect
    root = write_tree(tmp_path / "records", frame).root
    with open_scan([root], columns=NEEDS) as scan:
        tables = tables_from_engine(scan.engine)
    assert _shape_findings(detect_tables(tables)) == expect
    text = detect_by_model(frame).render()
    assert "probe fingerprint" in text


@pytest.mark.parametrize("seed", range(5))
def test_alike_replicas_have_no_output_shape_finding(seed: int) -> None:
    assert _shape_findings(detect_by_model(_fleet(10 + seed, {}, {}))) == set()


def test_a_replica_failing_with_a_type_of_its_own_is_named_by_it(tmp_path: Path) -> None:
    """Every replica fails 6 % of its requests; replica-1's failures are mostly ``oom`` where
    the others' are ``timeout``: the error rate alike, the error type not."""
    frame = _fleet(2, {}, {})
    rng = np.random.default_rng(2)
    reps = frame["replica"].astype(str).to_numpy()
    failed = rng.random(len(frame)) < 0.06
    oom = np.where(reps == "replica-1", rng.random(len(frame)) < 0.8, rng.random(len(frame)) < 0.05)
    frame["status"] = frame["status"].astype(str).where(~failed, "error")
    frame["error_type"] = pd.array(
        np.where(failed, np.where(oom, "oom", "timeout"), None), dtype="string"
    )
    expect = {("replica-1", "error_type=oom")}

    def named(report: object) -> set[tuple[str, str]]:
        return {
            (f.replica, f.signal)
            for f in findings_of(report)  # type: ignore[arg-type]
            if f.signal.startswith("error_type=")
        }

    memory = detect_by_model(frame)
    assert named(memory) == expect
    assert not any(f.signal == "error_rate" for f in findings_of(memory))
    (f,) = [f for f in findings_of(memory) if f.signal == "error_type=oom"]
    assert (f.side, f.cause) == (Side.REPLICA, Cause.REPLICA_ERRORS)
    root = write_tree(tmp_path / "records", frame).root
    with open_scan([root], columns=NEEDS) as scan:
        assert named(detect_tables(tables_from_engine(scan.engine))) == expect
