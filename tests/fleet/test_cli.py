"""`fleetwatch fleet …` end to end through the front door."""

from __future__ import annotations

import json
import subprocess

import pytest

from fleetwatch.cli import main
from fleetwatch.records import write_records
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("fleet")
    write_records(d / "slow.jsonl", synthetic_fleet(5, 200, seed=1, slowdown={2: 2.0}))
    write_records(d / "before.parquet", synthetic_fleet(4, 500, seed=1))
    write_records(
        d / "after.parquet", synthetic_fleet(4, 500, seed=2, slowdown={i: 1.3 for i in range(4)})
    )
    return d


def test_outliers_json_names_the_slow_replica(files, capsys):
    assert main(["fleet", "outliers", str(files / "slow.jsonl"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "outliers"
    assert {f["replica"] for f in doc["findings"]} == {"replica-2"}
    assert doc["findings"][0]["side"] == "replica"


def test_outliers_text_and_fail_flag(files, capsys):
    assert main(["fleet", "outliers", str(files / "slow.jsonl"), "--fail-on-finding"]) == 1
    assert "replica-2" in capsys.readouterr().out


def test_outliers_with_fingerprints(files, tmp_path, capsys):
    fp = {f"replica-{i}": {"engine_version": "1.0"} for i in range(5)}
    fp["replica-4"] = {"engine_version": "0.9"}
    (tmp_path / "fp.json").write_text(json.dumps(fp))
    args = [
        "fleet",
        "outliers",
        str(files / "slow.jsonl"),
        "--fingerprints",
        str(tmp_path / "fp.json"),
    ]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any(f["replica"] == "replica-4" and f["signal"] == "config" for f in doc["findings"])


def test_outliers_needs_exactly_one_source(files, capsys):
    assert main(["fleet", "outliers"]) == 2
    assert "exactly one input" in capsys.readouterr().err
    assert main(["fleet", "outliers", str(files / "slow.jsonl"), "--metrics-dir", "x"]) == 2


def test_outliers_bad_file_is_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    assert main(["fleet", "outliers", str(tmp_path / "bad.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.jsonl" in err


def test_tail_json(files, capsys):
    assert main(["fleet", "tail", str(files / "slow.jsonl"), "--percentile", "95", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["suspects"][0]["name"] == "one bad replica"


def test_tail_bad_target(files, capsys):
    assert main(["fleet", "tail", str(files / "slow.jsonl"), "--target", "tpot"]) == 2
    assert "--target" in capsys.readouterr().err


def test_compare_reports_the_regression(files, capsys):
    args = ["fleet", "compare", str(files / "before.parquet"), str(files / "after.parquet")]
    assert main([*args, "--draws", "300", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "tpot_s" in doc["regressions"] and not doc["workload_differs"]
    assert main([*args, "--draws", "300"]) == 0
    assert "regressed" in capsys.readouterr().out


@pytest.mark.promtool
def test_rules_command_writes_rules_and_a_passing_promtool_test(tmp_path, promtool, capsys):
    out = tmp_path / "rules" / "fleet.yaml"
    out.parent.mkdir()
    assert main(["fleet", "rules", "--profile", "vllm", "-o", str(out)]) == 0
    test_file = tmp_path / "rules" / "fleet.test.yaml"
    assert test_file.exists()
    run = subprocess.run(
        [str(promtool), "test", "rules", test_file.name],
        cwd=test_file.parent,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_rules_unknown_profile_exit_2(tmp_path, capsys):
    assert main(["fleet", "rules", "--profile", "nope", "-o", str(tmp_path / "r.yaml")]) == 2
    assert "unknown metric profile" in capsys.readouterr().err
