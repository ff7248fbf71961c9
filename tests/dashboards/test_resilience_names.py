"""The resilience names dashboards and alerts use are the ones the resilience package exports,
and the breaker state timeline turns the one-hot state gauge into one numbered row per breaker."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from fleetwatch.dashboards.names import (
    BATCHER_LABEL,
    BREAKER_LABEL,
    BREAKER_OPEN_STATES,
    BREAKER_STATE_LABEL,
    BREAKER_STATES,
    RESILIENCE,
    RETRY_BUDGET_LABEL,
    RETRY_POLICY_LABEL,
    Resilience,
)
from fleetwatch.dashboards.views.resilience import breaker_state_code
from fleetwatch.resilience.batcher.metrics import BatcherMetrics
from fleetwatch.resilience.breaker.metrics import BreakerMetrics
from fleetwatch.resilience.breaker.state import State
from fleetwatch.resilience.retry.metrics import RetryMetrics


def _exported() -> dict[str, set[str]]:
    """Sample name -> label names, from a real registry the resilience families are bound in."""
    registry = CollectorRegistry()
    BreakerMetrics(registry).bind("b").set_state(State.CLOSED)
    retry = RetryMetrics(registry)
    retry.bind_policy("p")
    retry.bind_budget("q").balance.set(3.0)
    bound = BatcherMetrics(registry).bind("m", lambda: 0.0)
    bound.batch_size.observe(4)
    bound.fill_ratio.observe(0.5)
    bound.queue_wait.observe(0.01)
    found: dict[str, set[str]] = {}
    for family in registry.collect():
        for sample in family.samples:
            found.setdefault(sample.name, set()).update(sample.labels)
    return found


def test_every_resilience_name_is_exported_by_the_resilience_package() -> None:
    exported = _exported()
    for signal, ref in RESILIENCE.items():
        suffixes = ("_bucket", "_sum", "_count") if ref.kind == "histogram" else ("",)
        for suffix in suffixes:
            assert ref.name + suffix in exported, (signal, ref.name + suffix)


def test_labels_the_views_group_by_are_the_exported_ones() -> None:
    exported = _exported()
    state = RESILIENCE[Resilience.BREAKER_STATE].name
    assert {BREAKER_LABEL, BREAKER_STATE_LABEL} <= exported[state]
    assert RETRY_POLICY_LABEL in exported[RESILIENCE[Resilience.RETRY_ATTEMPTS].name]
    assert RETRY_BUDGET_LABEL in exported[RESILIENCE[Resilience.RETRY_BUDGET_REFUSALS].name]
    assert BATCHER_LABEL in exported[RESILIENCE[Resilience.BATCH_QUEUE_DEPTH].name]


def test_breaker_state_names_are_the_breaker_states() -> None:
    assert set(BREAKER_STATES.values()) == {s.value for s in State}
    assert set(BREAKER_OPEN_STATES) <= set(BREAKER_STATES.values())


def test_state_code_gives_the_number_of_the_current_state(promtool: Path, tmp_path: Path) -> None:
    rules = tmp_path / "code.rules.yaml"
    rules.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "code",
                        "rules": [{"record": "breaker:state:code", "expr": breaker_state_code()}],
                    }
                ]
            }
        )
    )
    name = RESILIENCE[Resilience.BREAKER_STATE].name
    current = {"a": "half_open", "b": "closed", "c": "metrics_only"}
    series = [
        {
            "series": f'{name}{{{BREAKER_LABEL}="{b}",{BREAKER_STATE_LABEL}="{s}"}}',
            "values": "1x5" if s == now else "0x5",
        }
        for b, now in current.items()
        for s in BREAKER_STATES.values()
    ]
    code = {name: number for number, name in BREAKER_STATES.items()}
    expected = [
        {"labels": f'breaker:state:code{{{BREAKER_LABEL}="{b}"}}', "value": code[now]}
        for b, now in current.items()
    ]
    tests = tmp_path / "code.test.yaml"
    tests.write_text(
        yaml.safe_dump(
            {
                "rule_files": [rules.name],
                "evaluation_interval": "1m",
                "tests": [
                    {
                        "interval": "1m",
                        "input_series": series,
                        "promql_expr_test": [
                            {
                                "expr": "breaker:state:code",
                                "eval_time": "3m",
                                "exp_samples": expected,
                            }
                        ],
                    }
                ],
            }
        )
    )
    result = subprocess.run(
        [str(promtool), "test", "rules", str(tests)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
