"""Goodput SLOs and the exporter's goodput target: the rules count the same thing the exporter does.

The goodput counter is incremented by the exporter against its own target (``engine serve
--goodput``, ``instrument(goodput=...)``), so ``slo rules`` and ``slo validate --profile`` need that
target stated (``--goodput TTFT,TPOT``) and refuse a goodput SLO with other thresholds. Without
the counter the rules report the metric missing; they never count every request as bad.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.core.goodput import parse_goodput_target
from fleetwatch.core.profiles import get_profile
from fleetwatch.slo.load import load_spec
from fleetwatch.slo.rules import generate_rules

CHAT = Path(__file__).resolve().parents[2] / "slo" / "examples" / "chat.yaml"


def _rules(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "slo",
        "rules",
        str(CHAT),
        "--profile",
        "fleetwatch",
        "-o",
        str(tmp_path / "r.yaml"),
        *extra,
    ]


def test_rules_for_a_goodput_slo_need_the_exporters_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_rules(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "slos[2].sli" in err and "'chat-goodput'" in err
    assert "--goodput TTFT,TPOT" in err and "--goodput 0.5,0.05" in err
    assert not (tmp_path / "r.yaml").exists()


def test_a_goodput_slo_off_the_exporters_target_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_rules(tmp_path, "--goodput", "1,0.05")) == 2
    err = capsys.readouterr().err
    assert "slos[2].sli" in err
    assert "TTFT <= 0.5 s and TPOT <= 0.05 s" in err and "TTFT <= 1 s and TPOT <= 0.05 s" in err
    assert main(["slo", "validate", str(CHAT), "--goodput", "0.5,0.1"]) == 2
    assert main(["slo", "validate", str(CHAT), "--profile", "fleetwatch"]) == 2


def test_the_matching_target_writes_rules(tmp_path: Path) -> None:
    assert main(_rules(tmp_path, "--goodput", "0.5,5e-2")) == 0
    assert main(["slo", "validate", str(CHAT)]) == 0  # no profile, no target: nothing to compare


@pytest.mark.parametrize("text", ["0.5", "0.5,0.05,1", "a,0.05", "0.5,-1", "0,0.05", "nan,1"])
def test_a_malformed_target_is_one_line_naming_the_flag(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_rules(tmp_path, "--goodput", text)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--goodput" in err
    with pytest.raises(ValueError):
        parse_goodput_target(text)


def test_without_the_goodput_counter_the_slo_reports_missing_metrics_not_a_burn() -> None:
    spec = load_spec(
        "service: s\nslos:\n- {name: g, objective: 95, sli: {kind: goodput, ttft: 0.5, tpot: 0.05}}"
    )
    rules = generate_rules(spec, get_profile("fleetwatch"))
    query = rules.queries["g"]
    # No `or vector(0)` on the good side: a missing counter leaves the ratio without a value.
    assert "or vector(0)" not in query.bad
    assert query.absent == "fleetwatch_goodput_requests_total"
    absent = next(a for a in rules.alerts if a.name == "SLOMetricsAbsent")
    assert "fleetwatch_goodput_requests_total" in absent.annotations["description"]
