"""`fleet compare` through the query engine: one ordered pass per metric over the two runs'
values, memory a chunk, and the report the in-memory comparison gives on the same records — the
verdicts, p-values, intervals, like-for-like ratios and workload checks — however small the
chunks."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import fleetwatch.fleet.compare.ordered as ordered
from fleetwatch.fleet.by_model import ByModel
from fleetwatch.fleet.compare import compare_runs_by_model, engine
from fleetwatch.fleet.compare.engine import NEEDS, compare_in_engines
from fleetwatch.fleet.compare.ordered import sorted_chunks
from fleetwatch.fleet.compare.statistics import bootstrap_quantiles, inverted_cdf_index
from fleetwatch.records.dataset import read_dataset
from fleetwatch.records.engine.scan import open_scan
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet
from tests.fleet.test_by_model import two_models
from tests.fleet.test_compare_shape import _with_shape
from tests.records.plugin_tree import write_tree
from tests.rounding import rounded

SCENARIOS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "same system": ({}, {}),
    "slower decode": ({}, {"slowdown": {i: 1.2 for i in range(4)}}),
    "longer prompts": ({}, {"prompt_scale": {i: 2.0 for i in range(4)}}),
    "longer prompts and slower": (
        {},
        {"prompt_scale": {i: 2.0 for i in range(4)}, "slowdown": {i: 1.3 for i in range(4)}},
    ),
    "more errors": ({}, {"error_rate": {0: 0.2, 1: 0.2}}),
}


def _runs(tmp: Path, name: str) -> tuple[Path, Path]:
    b_opts, a_opts = SCENARIOS[name]
    before = synthetic_fleet(4, 900, seed=1, **b_opts)
    after = synthetic_fleet(4, 900, seed=2, **a_opts)
    return (write_tree(tmp / "before", before).root, write_tree(tmp / "after", after).root)


def _both(before: Path, after: Path, **options: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    expect = compare_runs_by_model(
        read_dataset([before]).frame, read_dataset([after]).frame, draws=400, **options
    )
    with open_scan([before], columns=NEEDS) as b, open_scan([after], columns=NEEDS) as a:
        got = compare_in_engines(b.engine, a.engine, draws=400, **options)
    return rounded(got.to_dict()), rounded(expect.to_dict())


@pytest.mark.parametrize("name", sorted(SCENARIOS))
@pytest.mark.parametrize("chunk_rows", [7, 10_000_000])
def test_the_engine_gives_the_in_memory_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, chunk_rows: int
) -> None:
    monkeypatch.setattr(ordered, "CHUNK_ROWS", chunk_rows)
    got, expect = _both(*_runs(tmp_path, name))
    assert got == expect


def test_two_models_are_compared_apart(tmp_path: Path) -> None:
    before = write_tree(tmp_path / "b", two_models(seed=3)).root
    after = write_tree(tmp_path / "a", two_models(seed=4, big={0: 1.5, 1: 1.5, 2: 1.5})).root
    got, expect = _both(before, after)
    assert got == expect
    assert isinstance(ByModel, type) and len(got["models"]) == 2


def test_the_tallies_grouping_sets_count_each_tally_and_workload_value(tmp_path: Path) -> None:
    """The tallies' grouping sets count what each tally counted apart counts:
    requests per status, empty ok outputs, finish reasons of ok requests, error types of errored
    ones, the other statuses, and each distinct token count and prefix-cache share."""
    frame = _with_shape(synthetic_fleet(4, 300, seed=5, error_rate={0: 0.2}), 3, 0.3)
    rng = np.random.default_rng(5)
    status = frame["status"].astype(str).to_numpy()
    status[rng.random(len(frame)) < 0.05] = "aborted"
    frame["status"] = pd.Categorical(status)
    ok = status == "ok"
    frame.loc[ok & (rng.random(len(frame)) < 0.1), "output_tokens"] = 0
    frame.loc[ok & (rng.random(len(frame)) < 0.1), "finish_reason"] = None
    frame.loc[(status == "error") & (rng.random(len(frame)) < 0.3), "error_type"] = None
    frame.loc[rng.random(len(frame)) < 0.1, "cached_prompt_tokens"] = 0
    path = write_tree(tmp_path / "run", frame).root
    read = read_dataset([path]).frame
    with open_scan([path], columns=NEEDS) as scan:
        got = engine._tallies(engine.Run(scan.engine))
    st = read["status"].astype(str)

    def tally(values: pd.Series) -> dict[str, int]:
        return {str(k): int(n) for k, n in sorted(values.value_counts(dropna=True).items())}

    ok_rows = (st == "ok").to_numpy()
    assert got.statuses == tally(st) and set(got.statuses) == {"ok", "error", "aborted"}
    assert got.empty == int((ok_rows & (read["output_tokens"] == 0).to_numpy()).sum()) > 0
    assert got.tallies["finish_reason"] == tally(read["finish_reason"][ok_rows])
    assert got.tallies["error_type"] == tally(read["error_type"][(st == "error").to_numpy()])
    assert got.tallies["status"] == {"aborted": int((st == "aborted").sum())}
    share = np.where(
        read["prompt_tokens"] > 0,
        read["cached_prompt_tokens"] / np.maximum(read["prompt_tokens"], 1),
        0.0,
    )
    for name, values in (
        ("prompt_tokens", read["prompt_tokens"].to_numpy(np.float64)),
        ("output_tokens", read["output_tokens"].to_numpy(np.float64)),
        ("prefix_cache_share", share.astype(np.float64)),
    ):
        v, n = np.unique(values, return_counts=True)
        assert np.array_equal(got.values[name][0], v), name
        assert np.array_equal(got.values[name][1], n), name


@pytest.mark.parametrize("rows", [1, 2, 3, 100])
def test_the_chunks_keep_order_and_never_split_equal_values(
    rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unsorted values of two runs (a NaN, a NULL read back, left out) come out in order,
    each run's values all there with their strata, a value never in two chunks, a chunk of
    more than ``CHUNK_ROWS`` rows only where one value holds them."""
    monkeypatch.setattr(ordered, "CHUNK_ROWS", rows)
    rng = np.random.default_rng(5)
    b = rng.integers(0, 6, 40).astype(float)
    a = np.r_[rng.integers(0, 6, 30).astype(float), np.nan]
    sb, sa = rng.integers(-1, 3, len(b)), rng.integers(-1, 3, len(a))
    chunks = list(sorted_chunks((b, sb), (a, sa)))
    v, s, run, n = (np.concatenate([c[i] for c in chunks]) for i in range(4))
    assert np.all(np.diff(v) >= 0) and np.all(n == 1)
    kept = ~np.isnan(a)
    for side, (values, strata) in enumerate(((b, sb), (a[kept], sa[kept]))):
        got = zip(v[run == side].tolist(), s[run == side].tolist(), strict=True)
        assert sorted(got) == sorted(zip(values.tolist(), strata.tolist(), strict=True))
    seen: set[float] = set()
    for c in chunks:
        assert not seen & set(c[0].tolist())
        seen |= set(c[0].tolist())
        assert len(c[0]) <= rows or len(set(c[0].tolist())) == 1  # more: one value's rows


@pytest.mark.parametrize("strata", [1, 64, 20_000, 10**12])
def test_the_pass_orders_values_then_run_then_stratum_as_lexsort_does(strata: int) -> None:
    """Values tied often (rounded), strata from -1 (outside) up, whose key fits 16 bits or
    not: the order is ``numpy.lexsort``'s, ties by run, then stratum, then place."""
    rng = np.random.default_rng(strata % 1000)
    for size in (0, 1, 5000):
        v = np.round(rng.lognormal(0, 1, size), 1)
        s = rng.integers(-1, strata, size)
        run = (rng.random(size) < 0.5).astype(np.int64)
        got = ordered._by_value_run_stratum(v, s, run)
        assert np.array_equal(got, np.lexsort((s, run, v)))


@pytest.mark.parametrize("n", [1, 2, 3, 10, 99, 100, 101, 1000, 12345])
def test_the_rank_of_a_percentile_is_numpys(n: int) -> None:
    x = np.arange(n, dtype=float)
    for p in (0.0, 1.0, 33.3, 50.0, 90.0, 99.0, 99.9, 100.0):
        expect = np.percentile(x, p, method="inverted_cdf")
        assert x[inverted_cdf_index(n, p / 100.0)] == expect


def test_the_bootstrap_reads_only_its_window() -> None:
    rng = np.random.default_rng(2)
    x = np.sort(rng.lognormal(0, 1, 5000))
    whole = bootstrap_quantiles(x, 0.99, 500, np.random.default_rng(7))
    from fleetwatch.fleet.compare.statistics import bootstrap_window

    first, last = bootstrap_window(len(x), 0.99)
    part = bootstrap_quantiles(
        x[first : last + 1], 0.99, 500, np.random.default_rng(7), n=len(x), first=first
    )
    assert np.array_equal(whole, part)


@pytest.mark.parametrize(("n", "q"), [(1, 0.5), (7, 0.5), (57, 0.9), (400, 0.99), (5000, 0.05)])
def test_a_replicate_s_quantile_index_is_as_resampling_makes_it(n: int, q: float) -> None:
    """A replicate's inverted-CDF ``q``-quantile is the ``m``-th smallest of ``n`` indices drawn
    with replacement, ``m = ceil(q n)``: at or below ``i`` with the probability that at least
    ``m`` of ``n`` draws are (scipy's binomial). 100,000 replicates' indices against it, within
    the DKW bound at a one-in-a-million false alarm."""
    from scipy import stats

    draws = 100_000
    x = np.arange(n, dtype=float)  # each value its index
    got = bootstrap_quantiles(x, q, draws, np.random.default_rng(11)).astype(int)
    m = max(1, math.ceil(q * n))
    i = np.arange(n)
    exact = stats.binom.sf(m - 1, n, (i + 1) / n)
    seen = np.cumsum(np.bincount(got, minlength=n)) / draws
    assert np.max(np.abs(seen - exact)) <= math.sqrt(math.log(2 / 1e-6) / (2 * draws))


def test_a_metric_tied_everywhere_is_unchanged_not_an_error() -> None:
    """A queue that never waited: every value 0 in both runs. The tie term is exact, so the
    Mann-Whitney variance is 0, not a rounding below it."""
    from fleetwatch.fleet.compare.ordered import Pass, Plan, metric_comparison

    for n in (165_146, 1_234_567):
        sizes = (np.array([n, 0]), np.array([2 * n + 3, 0]))
        plan = Plan((n, 2 * n + 3), sizes, (50.0, 90.0, 99.0), False, False)
        done = Pass(plan)
        chunk = (np.zeros(2), np.zeros(2, np.int64), np.array([0, 1]), np.array([n, 2 * n + 3]))
        done.feed(chunk)
        got = metric_comparison("queue_s", done, plan, 200, 0.95, np.random.default_rng(0))
        assert got.mann_whitney_p == 1.0
        assert all(s.before == s.after == 0.0 for s in got.shifts)


def test_a_window_inside_a_value_held_a_billion_times_holds_only_the_window() -> None:
    from fleetwatch.fleet.compare.ordered import Window

    w = Window(10**9 // 2 - 5, 10**9 // 2 + 5)
    n = np.array([3, 10**9, 4])
    w.feed(np.array([0.5, 1.0, 2.0]), n, np.cumsum(n), 0)
    assert w.values.tolist() == [1.0] * 11


@pytest.mark.parametrize(("n1", "n2"), [(40, 60), (500, 9_000), (500, 20_000), (3_000, 25_000)])
def test_ks_from_counts_is_ks_of_the_values(n1: int, n2: int) -> None:
    from fleetwatch.fleet.compare.workload import ks_check, ks_counts

    rng = np.random.default_rng(n1)
    x, y = np.sort(rng.integers(1, 400, n1)), np.sort(rng.integers(5, 420, n2))
    expect = ks_check("prompt_tokens", x.astype(float), y.astype(float), 0.001, 0.1)
    (vx, cx), (vy, cy) = np.unique(x, return_counts=True), np.unique(y, return_counts=True)
    got = ks_counts("prompt_tokens", (vx.astype(float), cx), (vy.astype(float), cy), 0.001, 0.1)
    assert (got.statistic, got.p_value, got.differs) == (
        expect.statistic,
        expect.p_value,
        expect.differs,
    )
    assert got.before == pytest.approx(expect.before) and got.after == pytest.approx(expect.after)
