"""Generated rules for every profile: golden files do not drift, and real promtool checks them
and passes the generated unit tests (healthy, fast burn, slow burn, recovery, absent)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from fleetwatch.core.profiles import get_profile
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.load import load_spec
from fleetwatch.slo.rules import generate_rules, render_rules
from fleetwatch.slo.rules.generate import ABSENT_ALERT

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("regenerate_golden", HERE / "regenerate_golden.py")
assert _spec is not None and _spec.loader is not None
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)

PROFILES = list(golden.CASES)


@pytest.mark.parametrize("profile", PROFILES)
def test_golden_files_match_the_generator(profile: str) -> None:
    rules, tests = golden.render(profile)
    hint = "regenerate with: .venv/bin/python tests/slo/regenerate_golden.py"
    assert (golden.GOLDEN / f"{profile}.rules.yaml").read_text() == rules, hint
    assert (golden.GOLDEN / f"{profile}.rules.test.yaml").read_text() == tests, hint


@pytest.mark.promtool
def test_promtool_checks_and_passes_the_generated_tests_for_every_profile(
    promtool: Path, tmp_path: Path
) -> None:
    procs = {}
    for profile in PROFILES:
        rules, tests = golden.render(profile)
        (tmp_path / f"{profile}.rules.yaml").write_text(rules)
        (tmp_path / f"{profile}.rules.test.yaml").write_text(tests)
        check = subprocess.run(
            [str(promtool), "check", "rules", str(tmp_path / f"{profile}.rules.yaml")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert check.returncode == 0, profile + check.stdout + check.stderr
        assert "SUCCESS" in check.stdout
        procs[profile] = subprocess.Popen(
            [str(promtool), "test", "rules", str(tmp_path / f"{profile}.rules.test.yaml")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    for profile, proc in procs.items():
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"{profile}:\n{out[-4000:]}"


@pytest.mark.parametrize("profile", PROFILES)
def test_every_burn_scenario_is_generated_for_the_examples(profile: str) -> None:
    _, tests = golden.render(profile)
    doc = yaml.safe_load(tests)
    names = [t["name"] for t in doc["tests"]]
    assert "# skipped" not in tests
    assert any("healthy traffic fires nothing" in n for n in names)
    assert any("pages after" in n and "resets after recovery" in n for n in names)
    assert any("opens a ticket" in n for n in names)
    assert any(n.startswith("no metrics at all") for n in names)


@pytest.mark.parametrize("profile", PROFILES)
def test_burn_alerts_state_the_ratio_they_fire_at(profile: str) -> None:
    """Every burn alert's description shows its value (the long window's error ratio), and the
    promtool tests expect it rendered at the first firing minute, above the alert's lowest
    threshold (the promtool test above proves promtool renders the same)."""
    rules, tests = golden.render(profile)
    spec = load_spec((golden.EXAMPLES / golden.CASES[profile]).read_text())
    lowest: dict[str, float] = {}
    for a in generate_rules(spec, get_profile(profile)).alerts:
        for w in a.windows:
            lowest[a.name] = min(lowest.get(a.name, 1.0), a.slo.threshold(w))
    for group in yaml.safe_load(rules.split("\n", 2)[2])["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") in lowest:
                assert "{{ $value | humanizePercentage }}" in rule["annotations"]["description"]
    shown = []
    for test in yaml.safe_load(tests)["tests"]:
        for case in test.get("alert_rule_test", []):
            for alert in case.get("exp_alerts", []):
                if case["alertname"] in lowest:
                    text = alert["exp_annotations"]["description"]
                    found = re.search(r"Error ratio now ([0-9.e+-]+)% over", text)
                    assert found is not None, text
                    shown.append((case["alertname"], float(found.group(1)) / 100))
    assert shown
    for name, value in shown:
        assert value > lowest[name]


def test_short_burn_windows_are_raw_and_day_long_ones_and_the_period_sum_the_5m_counts() -> None:
    """Burn windows under a day are a ratio of raw increases; the 1d and 3d windows and the
    period, which would read every replica's raw samples over days each round, sum the recorded
    5-minute counts (traffic-weighted still: a ratio of sums, never a mean of short ratios)."""
    spec = load_spec("service: s\nslos: [{name: a, objective: 99.9, sli: {kind: availability}}]")
    text = render_rules(generate_rules(spec, get_profile("vllm")))
    doc = yaml.safe_load(text.split("\n", 2)[2])
    rules = {r.get("record"): r["expr"] for r in doc["groups"][0]["rules"] if "record" in r}
    assert "increase(vllm:request_success_total[6h])" in rules["slo:sli_error:ratio_rate6h"]
    for window in ("1d", "3d"):
        assert rules[f"slo:sli_error:ratio_rate{window}"] == (
            f'sum_over_time(slo:sli_bad:increase5m{{service="s",slo="a"}}[{window}])\n/\n'
            f'sum_over_time(slo:sli_events:increase5m{{service="s",slo="a"}}[{window}])'
        )
    order = list(rules)
    assert order.index("slo:sli_events:increase5m") < order.index("slo:sli_error:ratio_rate1d")
    assert rules["slo:sli_error:ratio_rate30d"] == (
        'sum_over_time(slo:sli_bad:increase5m{service="s",slo="a"}[30d])\n/\n'
        'sum_over_time(slo:sli_events:increase5m{service="s",slo="a"}[30d])'
    )
    bad = 'increase(vllm:request_success_total{finished_reason="error"}[5m])'
    assert bad in rules["slo:sli_bad:increase5m"]
    assert "vllm:request_success_total[30d]" not in text and "avg_over_time" not in text
    assert "vllm:request_success_total[3d]" not in text and "[1d]))" not in text


def test_alerts_carry_severity_runbook_and_numbers() -> None:
    spec = load_spec((golden.EXAMPLES / "chat.yaml").read_text())
    ruleset = generate_rules(spec, get_profile("fleetwatch"))
    avail = [a for a in ruleset.alerts if a.slo.name == "chat-availability"]
    page = next(a for a in avail if a.severity == "page")
    assert page.name == "SLOAvailabilityFastBurn"
    assert page.labels["team"] == "inference-oncall" and page.labels["severity"] == "page"
    assert page.annotations["runbook_url"] == "runbooks/slo-availability-fast-burn.md"
    assert "14.4x over 1h and 5m (2% of the budget spent)" in page.annotations["description"]
    assert "43.2 minutes" in page.annotations["description"]
    absent = next(a for a in avail if a.name == ABSENT_ALERT)
    assert absent.labels["traffic_class"] == "chat"
    assert absent.runbook == "runbooks/slo-metrics-absent.md"
    batch = [a for a in ruleset.alerts if a.slo.name == "batch-e2e" and a.name != ABSENT_ALERT]
    assert [a.severity for a in batch] == ["ticket"]


def test_min_events_guard_is_part_of_every_burn_condition() -> None:
    spec = load_spec((golden.EXAMPLES / "chat.yaml").read_text())
    text = render_rules(generate_rules(spec, get_profile("fleetwatch")))
    assert 'slo:sli_events:increase1h{service="chat-api",slo="chat-availability"} >= 20' in text


@pytest.mark.parametrize(
    ("profile", "sli", "path", "words"),
    [
        (
            "tgi",
            "{kind: latency, signal: ttft, threshold: 0.5}",
            "slos[0].sli.signal",
            "does not export signal 'ttft'",
        ),
        (
            "vllm",
            "{kind: goodput, ttft: 0.5, tpot: 0.05}",
            "slos[0].sli.kind",
            "no per-request goodput counter",
        ),
        (
            "vllm",
            "{kind: availability, bad: [rejected]}",
            "slos[0].sli.bad",
            "does not count outcome 'rejected'",
        ),
        ("sglang", "{kind: availability, bad: [error]}", "slos[0].sli.bad", "(it counts: aborted)"),
    ],
)
def test_a_profile_that_cannot_express_an_sli_is_a_clear_error(
    profile: str, sli: str, path: str, words: str
) -> None:
    spec = load_spec(f"service: s\nslos: [{{name: a, objective: 99, sli: {sli}}}]")
    with pytest.raises(SLOSpecError) as info:
        generate_rules(spec, get_profile(profile))
    assert info.value.path == path
    assert words in str(info.value)


def test_a_per_class_slo_needs_a_profile_with_a_class_label() -> None:
    spec = load_spec(
        "service: s\nslos: [{name: a, objective: 99, selector: {traffic_class: chat},"
        " sli: {kind: availability}}]"
    )
    with pytest.raises(SLOSpecError, match="no traffic-class label") as info:
        generate_rules(spec, get_profile("vllm"))
    assert info.value.path == "slos[0].selector.traffic_class"


@pytest.mark.parametrize("history_h", [0.25, 72])
def test_summed_day_windows_delay_tickets_by_at_most_half_a_base_window_and_pages_not_at_all(
    history_h: float,
) -> None:
    """The window arithmetic the promtool tests prove, with the 1d and 3d windows summed from
    the recorded 5-minute counts against read raw: on the vLLM example, after a quarter hour or
    three days of healthy traffic, a burn at 1.05-6.75x the budget opens the ticket at most
    2.5 minutes (half the base window) plus one evaluation later, never earlier; pages never
    move (their windows are raw)."""
    from fleetwatch.slo.rules.generate import summed_windows
    from fleetwatch.slo.rules.promtool_tests import _N, _first_firing

    spec = load_spec((golden.EXAMPLES / "vllm.yaml").read_text())
    step = spec.evaluation_interval_s
    ruleset = generate_rules(spec, get_profile("vllm"))
    delays = []
    for slo in spec.slos[:2]:
        summed = summed_windows(slo, step)
        assert len(summed) == 3 and slo.period_s in summed  # the 1d and 3d windows, scaled
        h_bad = int(min(w.burn for w in slo.windows) / 2 * slo.error_budget * _N)
        baseline = int(history_h * 3600) // step
        for alert in (a for a in ruleset.alerts if a.slo is slo and a.windows):
            for burn in (1.05, 1.5, 3.15, 4.5, 6.75, 20.0):
                n_bad = int(burn * slo.error_budget * _N) + 1
                args = (slo, alert, baseline, h_bad, n_bad, 3 * 86400 // step, step)
                raw, new = _first_firing(*args), _first_firing(*args, summed)
                assert (raw is None) == (new is None)
                if raw is not None and new is not None:
                    delays.append((alert.severity, (new[0] - raw[0]) * step))
    assert {d for sev, d in delays if sev == "page"} == {0}
    ticket = [d for sev, d in delays if sev == "ticket"]
    assert min(ticket) >= 0 and max(ticket) <= 150 + step
    assert max(ticket) > 0
