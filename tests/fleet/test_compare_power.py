"""Verdicts with power: "no regression" only where the data rule a material regression out,
"inconclusive" (with the smallest shift the samples would catch) where they cannot, measured on
seeded null and planted pairs (the full rates, 1,000 pairs a cell, are in ``make bench``)."""

from __future__ import annotations

from fleetwatch.fleet.compare import compare_runs
from fleetwatch.scenarios.compare_runs import compare_pair


def test_a_small_null_pair_is_inconclusive_and_says_what_it_could_have_caught() -> None:
    before, after = compare_pair("null", 0, sizes=(200, 200))
    report = compare_runs(before, after, draws=500)
    assert report.regressions == () and report.verdict == "inconclusive"
    assert report.inconclusive
    for m in report.metrics:
        if m.verdict == "inconclusive":
            assert m.detectable > report.min_effect
            assert any(s.ci_high >= report.min_effect * s.before for s in m.shifts)
    assert "cannot rule out a 5% one" in report.summary()
    doc = report.to_dict()
    assert doc["verdict"] == "inconclusive" and doc["inconclusive"] == list(report.inconclusive)
    assert all(m["detectable_shift"] is not None for m in doc["metrics"])
    assert "-> inconclusive" in report.render()


def test_a_large_null_pair_on_its_medians_is_no_regression() -> None:
    before, after = compare_pair("null", 0, sizes=(10_000, 10_000))
    report = compare_runs(before, after, percentiles=(50.0,), draws=500)
    assert report.verdict == "no regression"
    assert {m.verdict for m in report.metrics} == {"unchanged"}
    for m in report.metrics:
        (s,) = m.shifts
        assert s.ci_high < report.min_effect * s.before
    assert report.summary() == "no latency regression found"


def test_null_pairs_rarely_regress_and_a_planted_shift_is_never_called_no_regression() -> None:
    """Seeded and loose (the bench measures 1,000 pairs a cell): 100 null pairs of 200 requests
    list a regression at most 3 times (family-wise 1 %), and a decode 10 % slower (twice the
    5 % threshold) at 10,000 requests is never called "no regression" and is found in most."""
    null = [
        compare_runs(*compare_pair("null", seed, sizes=(200, 200)), draws=200).verdict
        for seed in range(100)
    ]
    assert null.count("regression") <= 3
    slow = [
        compare_runs(*compare_pair("decode_10", seed, sizes=(10_000, 10_000)), draws=200).verdict
        for seed in range(30)
    ]
    assert slow.count("no regression") == 0
    assert slow.count("regression") >= 25


def test_exit_code_gates_on_the_verdict(tmp_path) -> None:
    """``--exit-code``: 0 no regression, 3 regression, 4 inconclusive; without it, 0."""
    from fleetwatch.cli import main
    from fleetwatch.records import write_records

    paths = {}
    for name, case, size in (
        ("small", "null", 200),
        ("slow", "decode_slowdown", 2000),
        ("big", "null", 10_000),
    ):
        before, after = compare_pair(case, 1, sizes=(size, size))
        paths[name] = (tmp_path / f"{name}-b.parquet", tmp_path / f"{name}-a.parquet")
        write_records(paths[name][0], before)
        write_records(paths[name][1], after)

    def run(name: str, *extra: str) -> int:
        b, a = paths[name]
        return main(["fleet", "compare", str(b), str(a), "--draws", "200", *extra])

    assert run("small") == 0
    assert run("small", "--exit-code") == 4
    assert run("slow", "--exit-code") == 3
    assert run("big", "--exit-code") == 4  # p99s of 10,000 cannot rule 5 % out


def test_a_report_per_model_takes_the_worst_verdict() -> None:
    from fleetwatch.fleet.by_model import ByModel
    from fleetwatch.fleet.compare.report import VERDICT_EXIT, run_verdict

    small = compare_runs(*compare_pair("null", 0, sizes=(200, 200)), draws=200)
    medians = compare_runs(
        *compare_pair("null", 0, sizes=(10_000, 10_000)), percentiles=(50.0,), draws=200
    )
    slow = compare_runs(*compare_pair("decode_slowdown", 0, sizes=(2000, 2000)), draws=200)
    assert [run_verdict(r) for r in (small, medians, slow)] == [
        "inconclusive",
        "no regression",
        "regression",
    ]
    assert run_verdict(ByModel((("a", medians), ("b", small)))) == "inconclusive"
    assert run_verdict(ByModel((("a", medians), ("b", slow), ("c", small)))) == "regression"
    assert run_verdict(ByModel((("a", medians),))) == "no regression"
    assert VERDICT_EXIT == {"no regression": 0, "regression": 3, "inconclusive": 4}


def test_the_error_rate_gets_a_verdict_by_its_counts() -> None:
    """Fisher's exact test and the rise's interval (Newcombe, from Wilson intervals): a material
    rise (5 % of the before rate, at least 0.1 point) that is significant is a regression, a fall
    an improvement; an interval below the threshold rules one out; otherwise inconclusive."""
    from scipy.stats import fisher_exact

    from fleetwatch.fleet.compare.decision import error_verdict

    def judged(before: tuple[int, int], after: tuple[int, int]) -> str:
        p = fisher_exact([[before[0], before[1] - before[0]], [after[0], after[1] - after[0]]])
        verdict, low, high = error_verdict(
            before, after, float(p.pvalue), alpha=0.01, min_effect=0.05, confidence=0.95
        )
        assert low <= after[0] / after[1] - before[0] / before[1] <= high
        return verdict

    assert judged((0, 1000), (50, 1000)) == "regressed"
    assert judged((26, 176), (0, 176)) == "improved"  # the demo's halves: 14.77 % -> 0 %
    assert judged((10, 100_000), (11, 100_000)) == "unchanged"
    assert judged((1, 100), (1, 100)) == "inconclusive"
    assert (
        error_verdict((0, 0), (1, 10), 1.0, alpha=0.01, min_effect=0.05, confidence=0.95)[0]
        == "insufficient"
    )


def test_a_rise_of_errors_alone_makes_the_run_a_regression() -> None:
    before, after = compare_pair("null", 3, sizes=(10_000, 10_000))
    after = after.copy()
    after.loc[after.index[:300], "status"] = "error"  # 3 % errors where there were none
    report = compare_runs(before, after, percentiles=(50.0,), draws=200)
    assert report.regressions == () and report.error_verdict == "regressed"
    assert report.verdict == "regression"
    assert report.summary().startswith("error rate regressed: 0.00% -> 3.00%")
    assert report.to_dict()["error_rate"]["verdict"] == "regressed"
