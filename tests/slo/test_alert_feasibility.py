"""Alerts that cannot work as written are refused (never fire) or named (distorted budget share)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.load import load_spec
from fleetwatch.slo.rules.feasibility import check_reachable, scaling_warnings

EXAMPLES = Path(__file__).resolve().parents[2] / "slo" / "examples"
DEMO_SPEC = Path(__file__).resolve().parents[2] / "fleetwatch" / "demo" / "slo.yaml"

NINETY = "service: s\nslos:\n- {name: a, objective: 90, sli: {kind: availability}}\n"
ONE_HOUR = (
    "service: s\nevaluation_interval: 60s\n"
    "slos:\n- {name: a, objective: 99, period: 1h, sli: {kind: availability}}\n"
)


@pytest.mark.parametrize("command", ["validate", "rules"])
def test_a_page_threshold_above_every_request_failing_is_refused_naming_the_alert(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(NINETY)
    args = ["slo", command, str(spec)]
    if command == "rules":
        args += ["-o", str(tmp_path / "out.rules.yaml")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "slos[0].objective" in err
    assert "SLOAvailabilityFastBurn" in err and "can never fire" in err
    assert "error ratio of 144%" in err
    # The share it claims, and what every request failing really spends in the hour.
    assert "after 2% of the budget" in err and "1.39% of it is spent in 1h" in err
    assert "above 93.06%" in err
    assert not (tmp_path / "out.rules.yaml").exists()


def test_explicit_windows_that_cannot_fire_name_their_burn_factor() -> None:
    spec = load_spec(
        "service: s\nslos:\n- {name: a, objective: 95, sli: {kind: latency, signal: e2e, "
        "threshold: 1}, windows: [{severity: ticket, long: 1d, short: 2h, burn: 3},"
        " {severity: page, long: 1h, short: 5m, burn: 25}]}"
    )
    with pytest.raises(SLOSpecError) as info:
        check_reachable(spec)
    assert info.value.path == "slos[0].windows[1].burn"
    assert "SLOLatencyFastBurn" in info.value.message


def test_a_threshold_of_exactly_one_cannot_fire_either() -> None:
    # 10x a 10% budget is an error ratio of 1.0; the rule's `>` never holds.
    spec = load_spec(
        "service: s\nslos:\n- {name: a, objective: 90, sli: {kind: availability},"
        " windows: [{severity: page, long: 1h, short: 5m, burn: 10}]}"
    )
    with pytest.raises(SLOSpecError, match="can never fire"):
        check_reachable(spec)


def test_disabled_alerts_are_not_checked() -> None:
    spec = load_spec(NINETY.replace("}}\n", "}, alerting: {enabled: false}}\n"))
    check_reachable(spec)
    assert scaling_warnings(spec) == []


def test_a_one_hour_period_at_a_minute_interval_warns_with_the_real_shares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(ONE_HOUR)
    assert main(["slo", "validate", str(spec)]) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 3, captured.err
    fast, slower, collapsed = warnings
    assert "SLOAvailabilityFastBurn (page, 14.4x over 2m and 1m)" in fast
    assert "after 48% of the error budget, not the Workbook's 2%" in fast
    assert "(page, 6x over 2m and 1m)" in slower and "after 20%" in slower
    assert "collapsed onto the same windows (2m and 1m)" in collapsed
    assert "Evaluate at most every 2s, or lengthen the period to at least 1d" in fast
    # The printed table says the same thing as the warnings.
    assert "14.4x over 2m and 1m: fires after 48% of the budget" in captured.out


def test_rules_warn_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(ONE_HOUR)
    assert main(["slo", "rules", str(spec), "-o", str(tmp_path / "r.rules.yaml")]) == 0
    assert "after 48% of the error budget" in capsys.readouterr().err


@pytest.mark.parametrize(
    "path", [EXAMPLES / "chat.yaml", EXAMPLES / "vllm.yaml", EXAMPLES / "tgi.yaml", DEMO_SPEC]
)
def test_shipped_specs_and_the_demo_spec_keep_the_workbook_shares(path: Path) -> None:
    from fleetwatch.slo.load import read_spec

    spec = read_spec(path)
    check_reachable(spec)
    assert scaling_warnings(spec) == []


def test_windows_given_explicitly_are_taken_as_meant() -> None:
    spec = load_spec(
        ONE_HOUR.replace(
            "sli: {kind: availability}}",
            "sli: {kind: availability}, windows: [{severity: page, long: 2m, short: 1m, burn: 14.4}]}",
        )
    )
    assert scaling_warnings(spec) == []
