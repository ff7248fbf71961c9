"""Later passes cut the table by position and findings write their evidence on first read: the
report is the same as judging each part by name, and findings copy and pickle whole."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import numpy as np
import pandas as pd

from fleetwatch.fleet.outliers import DetectorConfig, FleetTable, detect
from fleetwatch.fleet.outliers.judging.judge import judge


def _fleet(n: int = 60, seed: int = 0) -> FleetTable:
    rng = np.random.default_rng(seed)
    idx = pd.Index([f"r{i}" for i in range(n)])
    values = pd.DataFrame(
        {
            "ttft": 0.2 * rng.lognormal(0, 0.03, n),
            "tpot": 0.02 * rng.lognormal(0, 0.03, n),
            "sm_clock_ratio": 0.97 * rng.lognormal(0, 0.01, n),
        },
        index=idx,
    )
    values.iloc[[3, 7], 0] *= 2.0
    values.iloc[[3, 7], 1] *= 2.0
    values.iloc[11, 2] = 0.6
    workload = pd.DataFrame(
        {
            "mean_prompt_tokens": 500 * rng.lognormal(0, 0.05, n),
            "cache_hit_rate": np.clip(0.3 + rng.normal(0, 0.02, n), 0, 1),
            "request_rate": 5 * rng.lognormal(0, 0.05, n),
            "mean_output_tokens": 200 * rng.lognormal(0, 0.05, n),
        },
        index=idx,
    )
    workload.iloc[20, 0] *= 3.0  # sent long prompts: the peers pass runs
    return FleetTable(
        values=values,
        volume=pd.Series(1000.0, index=idx),
        stderr=values.abs() * 0.005,
        workload=workload,
        host=pd.Series([f"h{i // 4}" for i in range(n)], index=idx),
    )


def test_cut_by_position_equals_cut_by_name():
    table = _fleet()
    rows = np.ones(len(table.replicas), dtype=bool)
    rows[[3, 7, 20]] = False
    names = [r for i, r in enumerate(table.replicas) if rows[i]]
    by_pos = table.keep(rows)
    by_name = dataclasses.replace(
        table,
        **{
            p: getattr(table, p).loc[names]
            for p in ("values", "volume", "stderr", "workload", "host")
        },
    )
    for part in ("values", "volume", "stderr", "workload", "host"):
        got, want = getattr(by_pos, part), getattr(by_name, part)
        assert got.equals(want) and got.index.equals(want.index)
        assert got.index is by_pos.replicas  # aligned without a lookup
    assert table.only(names).values.equals(by_name.values)
    cfg = DetectorConfig()
    a = judge(by_pos, cfg, "unmasked", "how", 2, table)
    b = judge(by_name, cfg, "unmasked", "how", 2, table)
    assert [f.to_dict() for f in a.findings] == [f.to_dict() for f in b.findings]
    assert a.rows == b.rows
    # The rows point at the findings' replicas in the part judged.
    assert all(by_pos.replicas[i] == r for r, i in a.rows.items())


def test_every_pass_runs_and_the_planted_replicas_are_found():
    report = detect(_fleet())
    found = {(f.replica, f.signal, f.found_in) for f in report.findings}
    assert {("r3", "ttft"), ("r7", "ttft"), ("r11", "sm_clock_ratio")} <= {
        (r, s) for r, s, _ in found
    }
    assert any("traffic differs" in n for n in report.notes)
    assert any("blamed replica-side" in n for n in report.notes)


def test_evidence_is_written_once_on_first_read_and_survives_copy_and_pickle():
    report = detect(_fleet())
    f = report.findings[0]
    assert callable(f.lines)
    first = f.evidence
    assert f.lines == first and f.evidence is first
    assert first[-1].startswith("judged against")
    g = report.findings[1]
    assert callable(g.lines)
    for other in (copy.copy(g), copy.deepcopy(g), pickle.loads(pickle.dumps(g))):
        assert other == g and other.to_dict() == g.to_dict()
        assert other.evidence == g.evidence
