"""Budget reports and the `fleetwatch slo` commands end to end on record files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fleetwatch.cli import main
from fleetwatch.core.profiles import get_profile
from fleetwatch.records import RequestRecord, Status, to_frame, write_records
from fleetwatch.scenarios.slo_records import Incident, synthetic_records
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.load import load_spec
from fleetwatch.slo.report import report_spec
from fleetwatch.slo.rules import generate_rules
from fleetwatch.slo.spec import SLOSpec

EXAMPLES = Path(__file__).resolve().parents[2] / "slo" / "examples"
H = 3600.0


def test_budget_remaining_as_fraction_and_minutes() -> None:
    # 10,000 requests in one day, 5 errors, 99.9% over 1 day: half the budget is spent.
    records = [
        RequestRecord(request_id=f"r{i}", replica="a", model="m", arrival_s=i * 8.0,
                      finished_s=i * 8.0 + 1, status=Status.ERROR if i % 2000 == 7 else Status.OK)
        for i in range(10_000)
    ]  # fmt: skip
    spec = load_spec(
        "service: s\nslos: [{name: a, objective: 99.9, period: 1d, sli: {kind: availability}}]"
    )
    (r,) = report_spec(spec, to_frame(records))
    assert (r.events, r.bad) == (10_000, 5)
    assert r.sli == pytest.approx(0.9995)
    assert r.budget_minutes == pytest.approx(1.44)
    assert r.budget_remaining == pytest.approx(0.5)
    assert r.budget_remaining_minutes == pytest.approx(0.72)
    assert r.coverage == pytest.approx(80_000 / 86_400, abs=1e-3)
    # Windows of the Workbook table scaled to one day: 1h -> 2m, 5m -> 30s (one interval), ...
    assert list(r.burn) == ["30s", "1m", "2m", "4m", "12m", "48m", "2h24m"]
    assert all(b is None or b >= 0 for b in r.burn.values())


@pytest.fixture
def records_file(tmp_path: Path) -> Path:
    frame = synthetic_records(
        np.random.default_rng(11), n=30_000, start_s=1_700_000_000.0, duration_s=12 * H,
        incidents=[Incident(1_700_000_000.0 + 6 * H, 1_700_000_000.0 + 6.5 * H, error_ratio=0.5)],
        classes=("chat", "batch"),
    )  # fmt: skip
    path = tmp_path / "records.parquet"
    write_records(path, frame)
    return path


def test_report_and_backtest_commands(
    records_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = str(EXAMPLES / "chat.yaml")
    assert main(["slo", "report", spec, "--records", str(records_file)]) == 0
    out = capsys.readouterr().out
    assert "chat-availability: objective 99.9% over 30d" in out and "remaining" in out
    assert main(["slo", "report", spec, "--records", str(records_file), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    avail = data["slos"][0]
    assert avail["slo"] == "chat-availability" and avail["budget_remaining"] < 0
    assert main(["slo", "backtest", spec, "--records", str(records_file), "--json"]) == 0
    bt = json.loads(capsys.readouterr().out)["slos"][0]
    pages = [i for i in bt["intervals"] if i["alert"] == "SLOAvailabilityFastBurn"]
    assert len(pages) == 1 and pages[0]["detection_delay_s"] <= 120
    assert main(["slo", "backtest", spec, "--records", str(records_file)]) == 0
    assert "SLOAvailabilityFastBurn" in capsys.readouterr().out


def test_rules_command_writes_rules_and_the_promtool_test_beside_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "alerts" / "chat.rules.yaml"
    assert (
        main(
            [
                "slo",
                "rules",
                str(EXAMPLES / "chat.yaml"),
                "--profile",
                "fleetwatch",
                "--goodput",
                "0.5,0.05",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    assert out.exists() and (tmp_path / "alerts" / "chat.rules.test.yaml").exists()
    assert "promtool tests" in capsys.readouterr().out


def test_rules_for_a_profile_that_cannot_express_the_spec_exit_2_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tgi.rules.yaml"
    assert (
        main(["slo", "rules", str(EXAMPLES / "chat.yaml"), "--profile", "tgi", "-o", str(out)]) == 2
    )
    assert "slos[0].selector.traffic_class" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_an_empty_rules_file_is_refused() -> None:
    with pytest.raises(SLOSpecError, match="empty rules file"):
        generate_rules(SLOSpec(service="s", slos=()), get_profile("fleetwatch"))


def test_a_missing_records_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["slo", "report", str(EXAMPLES / "chat.yaml"), "--records", str(tmp_path / "no.jsonl")]
    )
    assert code == 2
    assert capsys.readouterr().err.count("\n") == 1
