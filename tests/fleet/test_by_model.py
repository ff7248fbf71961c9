"""One fleet per model: records analyses compare a replica only with replicas of its model."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from fleetwatch.cli import main
from fleetwatch.fleet.by_model import ByModel, split_models
from fleetwatch.fleet.compare import compare_runs, compare_runs_by_model
from fleetwatch.fleet.outliers import Side, detect, table_from_records
from fleetwatch.fleet.outliers.by_model import OutliersByModel, detect_by_model, findings_of
from fleetwatch.fleet.tail import TailReport, attribute_tail, attribute_tail_by_model
from fleetwatch.records import write_records
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet

SMALL, BIG = "llama-8b", "llama-70b"


def _model(df: pd.DataFrame, model: str, prefix: str) -> pd.DataFrame:
    df = df.copy()
    df["model"] = pd.array([model] * len(df), dtype="string")
    df["replica"] = df["replica"].str.replace("replica-", f"{prefix}-")
    df["request_id"] = prefix + "-" + df["request_id"]
    return df


def two_models(
    *,
    seed: int = 0,
    n: int = 300,
    small: dict[int, float] | None = None,
    big: dict[int, float] | None = None,
) -> pd.DataFrame:
    """Four replicas of an 8B model and three of a 70B model three times slower per token, all
    healthy unless ``small``/``big`` slow some (replica index -> slowdown)."""
    fast = synthetic_fleet(4, n, seed=seed, slowdown=small)
    slow = synthetic_fleet(
        3, n, seed=seed + 100, slowdown=big, prefill_s_per_token=6e-4, tpot_s=0.06
    )
    return pd.concat([_model(fast, SMALL, "small"), _model(slow, BIG, "big")], ignore_index=True)


def _blamed(report: object) -> set[tuple[str, str]]:
    assert isinstance(report, OutliersByModel)
    return {(m, f.replica) for m, r in report for f in r.findings if f.side is Side.REPLICA}


def test_pooled_models_blame_the_healthy_slow_model():
    pooled = detect(table_from_records(two_models()))
    assert {f.replica for f in pooled.findings if f.side is Side.REPLICA} >= {"big-0"}


def test_two_healthy_models_blame_nobody():
    report = detect_by_model(two_models())
    assert isinstance(report, OutliersByModel)
    assert report.models == (BIG, SMALL)
    assert report.verdict == "no outlier"
    assert findings_of(report) == ()
    assert [len(r.judged) for _, r in report] == [3, 4]


def test_a_slow_replica_of_the_small_model_is_found_and_only_it():
    assert _blamed(detect_by_model(two_models(small={2: 1.5}))) == {(SMALL, "small-2")}


def test_a_slow_replica_of_the_big_model_is_found_and_only_it():
    assert _blamed(detect_by_model(two_models(big={1: 1.5}))) == {(BIG, "big-1")}


def test_outliers_group_by_model_and_each_finding_names_its_model():
    report = detect_by_model(two_models(big={1: 1.5}))
    doc = json.loads(json.dumps(report.to_dict(), default=str))
    assert doc["verdict"] == "outliers"
    assert [m["model"] for m in doc["models"]] == [BIG, SMALL]
    assert doc["models"][0]["findings"] and all(
        f["model"] == BIG for f in doc["models"][0]["findings"]
    )
    text = report.render()
    assert text.index(f"model {BIG}:") < text.index("big-1") < text.index(f"model {SMALL}:")


def test_a_model_of_too_few_replicas_says_so():
    df = two_models()
    df = df[df["replica"] != "big-2"]
    report = detect_by_model(df)
    assert isinstance(report, OutliersByModel)
    assert report[BIG].verdict == "insufficient data"
    assert any("need 3 to judge" in n for n in report[BIG].notes)
    assert report[SMALL].verdict == "no outlier"


def test_one_model_gives_the_report_it_always_gave():
    df = synthetic_fleet(5, 200, seed=1, slowdown={2: 2.0})
    one = detect_by_model(df)
    assert one.to_dict() == detect(table_from_records(df)).to_dict()
    assert attribute_tail_by_model(df).to_dict() == attribute_tail(df).to_dict()
    before, after = synthetic_fleet(3, 400, seed=1), synthetic_fleet(3, 400, seed=2)
    assert (
        compare_runs_by_model(before, after, draws=200).to_dict()
        == compare_runs(before, after, draws=200).to_dict()
    )
    assert len(split_models(df.drop(columns="model"))) == 1


def _bad_replica_share(report: TailReport) -> float:
    return next((s.share for s in report.suspects if s.name == "one bad replica"), 0.0)


def test_tail_of_two_healthy_models_names_no_bad_replica():
    df = two_models(n=400)
    assert _bad_replica_share(attribute_tail(df, percentile=95)) > 0.1  # pooled: a 70B replica
    report = attribute_tail_by_model(df, percentile=95)
    assert isinstance(report, ByModel)
    for _, r in report:
        assert r.top is None or r.top.name != "one bad replica"
        assert _bad_replica_share(r) < 0.05


@pytest.mark.parametrize(
    ("model", "slowed", "replica"),
    [(BIG, {"big": {0: 3.0}}, "big-0"), (SMALL, {"small": {3: 3.0}}, "small-3")],
)
def test_tail_names_the_bad_replica_in_its_model_only(model, slowed, replica):
    report = attribute_tail_by_model(two_models(n=400, **slowed), percentile=95)
    assert isinstance(report, ByModel)
    bad = report[model]
    assert bad.top is not None and bad.top.name == "one bad replica"
    assert replica in bad.top.evidence[0]
    (other,) = (r for m, r in report if m != model)
    assert other.top is None or other.top.name != "one bad replica"
    assert f"model {model}:" in report.render()


def test_the_commands_read_a_two_model_dataset(tmp_path, capsys):
    write_records(tmp_path / "a.jsonl", two_models(seed=1, n=300))
    write_records(tmp_path / "b.jsonl", two_models(seed=2, n=300, small={1: 1.5}))
    assert main(["fleet", "outliers", str(tmp_path / "a.jsonl"), "--fail-on-finding"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"model {BIG}:\n  fleet outliers (") and f"model {SMALL}:" in text
    assert main(["fleet", "outliers", str(tmp_path / "b.jsonl"), "--fail-on-finding"]) == 1
    capsys.readouterr()
    assert main(["fleet", "tail", str(tmp_path / "a.jsonl"), "--json"]) == 0
    assert [m["model"] for m in json.loads(capsys.readouterr().out)["models"]] == [BIG, SMALL]
    a, b = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    assert main(["fleet", "compare", a, b, "--draws", "200", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [m["model"] for m in doc["models"]] == [BIG, SMALL]


def test_compare_finds_a_regression_in_its_model_only():
    before = two_models(seed=1, n=500)
    after = two_models(seed=2, n=500, big={i: 1.2 for i in range(3)})
    report = compare_runs_by_model(before, after, draws=200)
    assert isinstance(report, ByModel)
    assert "tpot_s" in report[BIG].regressions
    assert report[SMALL].regressions == ()
    doc = report.to_dict()
    assert [m["model"] for m in doc["models"]] == [BIG, SMALL]


def test_compare_of_two_like_runs_of_two_models_finds_no_change():
    report = compare_runs_by_model(two_models(seed=1, n=500), two_models(seed=2, n=500), draws=200)
    assert isinstance(report, ByModel)
    for _, r in report:
        assert r.regressions == () and r.verdict != "regression"
        assert "no latency regression found" in r.summary()


def test_compare_notes_a_model_in_one_run_only():
    before = two_models(seed=1, n=300)
    after = before[before["model"] == SMALL]
    after = pd.concat([after, _model(synthetic_fleet(3, 300, seed=5), "qwen", "q")])
    report = compare_runs_by_model(before, after, draws=200)
    assert isinstance(report, ByModel)
    assert report.models == (SMALL,)
    assert sorted(report.notes) == [
        f"model {BIG}: only in the before run, not compared",
        "model qwen: only in the after run, not compared",
    ]
    assert report.render().endswith(
        f"\n\nnote: model {BIG}: only in the before run, not compared"
        "\nnote: model qwen: only in the after run, not compared"
    )


def test_a_model_its_analysis_refuses_is_a_note_and_the_others_are_reported():
    df = two_models(n=300)
    few = _model(synthetic_fleet(1, 1, seed=3), "tiny", "t")
    report = attribute_tail_by_model(pd.concat([df, few], ignore_index=True), percentile=95)
    assert isinstance(report, ByModel)
    assert report.models == (BIG, SMALL)
    assert len(report.notes) == 1 and report.notes[0].startswith("model tiny: not analysed (")
