"""Runbooks in a profile's names: every query of every page, rewritten for vLLM, SGLang and TGI
under a fleet's label scheme, passes promtool and reads only that profile's series (and the
recording rules), groups by the scheme's replica labels and carries its matchers; a query the
profile cannot answer is kept and marked, never silently dropped; the fleetwatch profile renders
the committed pages byte for byte."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fleetwatch.cli import main
from fleetwatch.core.profiles import get_profile
from fleetwatch.core.profiles.labels import LabelScheme, parse_matcher_list
from fleetwatch.dashboards.names import SLO_RULES, allowed_names
from fleetwatch.dashboards.promql import metric_names
from fleetwatch.dashboards.runbooks import RUNBOOKS, Untranslatable, render_runbooks, translate
from tests.dashboards.test_runbooks import FENCE, expressions

SCHEME = LabelScheme(
    replica=("namespace", "pod"),
    routing=("namespace",),
    matchers=parse_matcher_list(('job="vllm"', 'namespace=~"llm-.*"')),
)


def _blocks(pages: dict[str, str]) -> tuple[list[tuple[str, str]], int]:
    """(page, expression) of every translated block's expressions, and how many blocks were
    marked as not answerable."""
    found, marked = [], 0
    for page, text in pages.items():
        for m in FENCE.finditer(text):
            if m.group(2).lstrip().startswith("# Not exported by the"):
                marked += 1
            else:
                found.extend((page, e) for e in expressions(m))
    return found, marked


def test_the_fleetwatch_profile_renders_the_committed_pages() -> None:
    pages = render_runbooks(get_profile("fleetwatch"))
    assert sorted(pages) == sorted(p.name for p in RUNBOOKS.iterdir() if p.is_file())
    for name, text in pages.items():
        assert text == (RUNBOOKS / name).read_text(), name


@pytest.mark.parametrize("name", ["vllm", "sglang", "tgi"])
def test_every_query_is_in_the_profiles_names_and_passes_promtool(
    name: str, check_exprs: Callable[..., Any]
) -> None:
    profile = SCHEME.apply(get_profile(name))
    pages = render_runbooks(profile)
    blocks, marked = _blocks(pages)
    assert len(blocks) > 20
    for page, expr in blocks:
        assert "fleetwatch_requests_total" not in expr, (page, expr)
        # The profile's series, the recording rules', and the resilience library's (clients').
        allowed = allowed_names(profile, resilience=True)
        stray = [n for n in metric_names(expr) if n not in allowed]
        assert not [n for n in stray if not SLO_RULES.is_error_ratio(n)], (page, expr)
        # The replica is the scheme's, in every grouping.
        assert not re.search(r"\bby \([^)]*\breplica\b", expr), (page, expr)
        for sel in re.finditer(re.escape(profile.outcomes.total.name) + r"(\{[^}]*\})?", expr):
            assert 'job="vllm"' in (sel.group(1) or ""), (page, expr)
    result = check_exprs(f"runbooks_{name}", [e for _, e in blocks])
    assert result.returncode == 0, result.stdout + result.stderr
    # What the profile cannot answer is kept, marked: as many blocks as the source has.
    assert marked > 0
    total = sum(len(FENCE.findall(t)) for t in pages.values())
    assert total == sum(len(FENCE.findall((RUNBOOKS / p).read_text())) for p in pages)


def test_outcomes_become_the_profiles_counters() -> None:
    vllm = get_profile("vllm")
    errors = 'sum by (replica, status) (rate(fleetwatch_requests_total{status!="ok"}[5m]))'
    assert translate(errors, vllm) == (
        "sum by (instance, finished_reason) "
        '(rate(vllm:request_success_total{finished_reason=~"error|abort"}[5m]))'
    )
    assert translate('fleetwatch_requests_total{status="error"}', vllm) == (
        'vllm:request_success_total{finished_reason="error"}'
    )
    # SGLang counts aborts in a counter of their own, and no errors.
    sglang = get_profile("sglang")
    assert translate('fleetwatch_requests_total{status="aborted"}', sglang) == (
        "sglang:num_aborted_requests_total"
    )
    with pytest.raises(Untranslatable):
        translate('fleetwatch_requests_total{status="error"}', sglang)
    with pytest.raises(Untranslatable, match="fleetwatch_gpu_power_watts"):
        translate("max by (replica) (fleetwatch_gpu_power_watts)", vllm)
    # The resilience library's series are every profile's.
    breaker = "max by (breaker) (fleetwatch_circuit_breaker_state)"
    assert translate(breaker, vllm) == breaker


def test_the_command_writes_the_pages_and_refuses_a_bad_profile(tmp_path: Path, capsys) -> None:
    labels = tmp_path / "labels.yaml"
    labels.write_text("replica: [namespace, pod]\nmatchers: ['job=\"vllm\"']\n")
    out = tmp_path / "vllm-runbooks"
    argv = ["dashboards", "runbooks", "--profile", "vllm", "--labels", str(labels), "--out"]
    assert main([*argv, str(out)]) == 0
    assert (out / "index.yaml").is_file() and (out / "replica-down.md").is_file()
    readme = (out / "README.md").read_text()
    assert "Queries in the `vllm` profile's names" in readme
    assert 'vllm:num_requests_waiting{job="vllm"}' in (out / "queue-growing.md").read_text()
    bad = tmp_path / "nothing"
    assert main(["dashboards", "runbooks", "--profile", "nosuch", "--out", str(bad)]) == 2
    assert "nosuch" in capsys.readouterr().err and not bad.exists()
