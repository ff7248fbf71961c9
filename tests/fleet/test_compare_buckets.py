"""`fleet compare` from fine fixed buckets (the path of runs too large to sort), forced on runs
that fit: the verdicts of the exact engine pass and of the in-memory comparison, every
percentile and interval within the stated bucket error, every row counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fleetwatch.fleet.compare import compare_runs_by_model, engine
from fleetwatch.fleet.compare.engine import BUCKET_ERROR, NEEDS, compare_in_engines
from fleetwatch.fleet.compare.run import METRICS
from fleetwatch.records.dataset import read_dataset
from fleetwatch.records.engine.reductions import DERIVED
from fleetwatch.records.engine.scan import open_scan
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet
from tests.fleet.test_by_model import two_models
from tests.fleet.test_compare_engine import SCENARIOS, _runs
from tests.records.plugin_tree import write_tree


def _three(before: Path, after: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The bucketed engine report, the exact engine report and the in-memory report."""
    memory = compare_runs_by_model(
        read_dataset([before]).frame, read_dataset([after]).frame, draws=400
    )
    with open_scan([before], columns=NEEDS) as b, open_scan([after], columns=NEEDS) as a:
        bucketed = compare_in_engines(b.engine, a.engine, draws=400, exact_rows=0)
        exact = compare_in_engines(b.engine, a.engine, draws=400)
    return bucketed.to_dict(), exact.to_dict(), memory.to_dict()


def _within(got: float | None, expect: float | None, tolerance: float) -> bool:
    if got is None or expect is None:
        return got is expect
    return abs(got - expect) <= tolerance + 1e-12


def _assert_close(got: dict[str, Any], expect: dict[str, Any], largest: dict[str, float]) -> None:
    """Same verdicts; percentiles within the bucket error of their value, interval ends within
    twice the bucket error of the largest value (a replicate's difference of two bucket middles),
    like-for-like ratios within twice the bucket error; counted figures equal."""
    for key in ("verdict", "regressions", "inconclusive", "confounded", "workload_differs"):
        assert got[key] == expect[key], key
    for key in ("workload", "error_rate", "output_shape"):
        assert got[key] == expect[key], key
    assert got["decision"]["like_for_like"] == expect["decision"]["like_for_like"]
    for m_got, m_exp in zip(got["metrics"], expect["metrics"], strict=True):
        name = m_got["metric"]
        assert (m_got["metric"], m_got["verdict"]) == (name, m_exp["verdict"])
        assert (m_got["n_before"], m_got["n_after"]) == (m_exp["n_before"], m_exp["n_after"])
        for p_got, p_exp in zip(m_got["percentiles"], m_exp["percentiles"], strict=True):
            assert p_got["verdict"] == p_exp["verdict"], (name, p_got["percentile"])
            assert p_got["significant"] == p_exp["significant"], (name, p_got["percentile"])
            for side in ("before", "after"):
                assert _within(p_got[side], p_exp[side], BUCKET_ERROR * abs(p_exp[side]))
            for g, e in zip(p_got["ci"], p_exp["ci"], strict=True):
                assert _within(g, e, 2 * BUCKET_ERROR * largest[name])
            r_got, r_exp = p_got["like_for_like_ratio"], p_exp["like_for_like_ratio"]
            assert _within(r_got, r_exp, 2.5 * BUCKET_ERROR * abs(r_exp or 0.0))
    cohorts = [(c["component"], c["cohort"]) for c in got["components"]]
    assert cohorts == [(c["component"], c["cohort"]) for c in expect["components"]]
    for g, e in zip(got["components"], expect["components"], strict=True):
        if g["cohort"] == "all":
            assert _within(g["before"], e["before"], 1e-9 * abs(e["before"] or 0.0))
            assert _within(g["after"], e["after"], 1e-9 * abs(e["after"] or 0.0))


def _largest(before: Path, after: Path) -> dict[str, float]:
    frames = [read_dataset([p]).frame for p in (before, after)]
    return {
        m: float(max(np.nanmax(np.abs(f[m].to_numpy(np.float64, na_value=np.nan))) for f in frames))
        for m in METRICS
    }


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_buckets_give_the_exact_verdicts_and_figures_within_their_error(
    tmp_path: Path, name: str
) -> None:
    before, after = _runs(tmp_path, name)
    bucketed, exact, memory = _three(before, after)
    largest = _largest(before, after)
    _assert_close(bucketed, exact, largest)
    _assert_close(bucketed, memory, largest)
    assert bucketed["decision"]["bucket_resolution"] == pytest.approx(1.0005)
    assert exact["decision"]["bucket_resolution"] is None
    assert "fixed buckets 0.05% wide" in bucketed["decision"]["statement"]
    assert "buckets" not in exact["decision"]["statement"]


def test_null_runs_are_no_regression_and_a_slower_decode_is_one(tmp_path: Path) -> None:
    same, slower = (_three(*_runs(tmp_path / n, n))[0] for n in ("same system", "slower decode"))
    assert same["verdict"] in ("no regression", "inconclusive")
    assert slower["verdict"] == "regression" and "decode_s" in slower["regressions"]


@pytest.mark.parametrize("seed", range(4))
def test_seeded_null_pairs_of_buckets_are_never_a_regression(tmp_path: Path, seed: int) -> None:
    runs = [
        write_tree(tmp_path / side, synthetic_fleet(4, 2_000, seed=2 * seed + i)).root
        for i, side in enumerate(("before", "after"))
    ]
    with open_scan([runs[0]], columns=NEEDS) as b, open_scan([runs[1]], columns=NEEDS) as a:
        report = compare_in_engines(b.engine, a.engine, draws=200, exact_rows=0)
    assert report.to_dict()["verdict"] in ("no regression", "inconclusive")


def test_every_row_is_counted(tmp_path: Path) -> None:
    """Each metric's counts hold every ok request with that value, and the error rate every
    request: rows counted = rows in the dataset, nothing sampled."""
    before, after = _runs(tmp_path, "more errors")
    bucketed = _three(before, after)[0]
    for path, side in ((before, "before"), (after, "after")):
        frame = read_dataset([path]).frame
        ok = frame[(frame["status"].astype(str) == "ok").to_numpy()]
        for m in bucketed["metrics"]:
            assert m[f"n_{side}"] == int(ok[m["metric"]].notna().sum()), m["metric"]
        assert bucketed["metrics"][2]["metric"] == "e2e_s"
        assert bucketed["metrics"][2][f"n_{side}"] == len(ok)
        errors = int((frame["status"].astype(str) == "error").sum())
        assert bucketed["error_rate"][side] == pytest.approx(errors / len(frame))
        with open_scan([path], columns=NEEDS) as scan:
            run = engine.Run(scan.engine)
            tallies = engine._tallies(run)
            hists = engine._histograms(run, [DERIVED[m] for m in METRICS], "CAST(0 AS BIGINT)")
        assert (tallies.rows, tallies.ok, tallies.errors) == (len(frame), len(ok), errors)
        for m, (_, _, n) in zip(METRICS, hists, strict=True):
            assert int(n.sum()) == int(ok[m].notna().sum()), m


def test_two_models_from_buckets_are_compared_apart(tmp_path: Path) -> None:
    before = write_tree(tmp_path / "b", two_models(seed=3)).root
    after = write_tree(tmp_path / "a", two_models(seed=4, big={0: 1.5, 1: 1.5, 2: 1.5})).root
    bucketed, exact, _ = _three(before, after)
    assert [m["model"] for m in bucketed["models"]] == [m["model"] for m in exact["models"]]
    largest = _largest(before, after)
    for got, expect in zip(bucketed["models"], exact["models"], strict=True):
        _assert_close(got, expect, largest)
