"""Runbooks: every alert the generators emit has a page, every link resolves, every page has the
sections on-call needs, and the PromQL on the pages parses and names real metrics."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetwatch.core.profiles import get_profile
from fleetwatch.core.rules import to_document
from fleetwatch.dashboards.alerts import ALERT_PAGES, rules_document
from fleetwatch.dashboards.names import unknown_names
from fleetwatch.dashboards.promql import metric_names

RUNBOOKS = Path(__file__).resolve().parents[2] / "runbooks"
SECTIONS = (
    "## What it means",
    "## First query",
    "## Rule out, in order",
    "## Mitigate",
    "## Confirm recovery",
    "## fleetwatch commands",
)
LATENCY_CAUSES = (
    "Queueing",
    "Prompt-length variance",
    "Preemption",
    "Prefill interference",
    "One replica",
)
SLI_KINDS = ("availability", "ttft", "tpot", "itl", "e2e", "goodput")

# An SLO spec with one SLO of every kind, for the SLO rule generator.
SLO_SPEC = """
version: fleetwatch/slo/v1
service: chat-api
slos:
  - {name: availability, objective: 99.9, sli: {kind: availability}}
  - {name: ttft, objective: 99, sli: {kind: latency, signal: ttft, threshold: 0.5}}
  - {name: tpot, objective: 99, sli: {kind: latency, signal: tpot, threshold: 0.1}}
  - {name: itl, objective: 99, sli: {kind: latency, signal: itl, threshold: 0.1}}
  - {name: e2e, objective: 99, sli: {kind: latency, signal: e2e, threshold: 10}}
  - {name: goodput, objective: 95, sli: {kind: goodput, ttft: 0.5, tpot: 0.1}}
"""


def _index() -> dict[str, Any]:
    return yaml.safe_load((RUNBOOKS / "index.yaml").read_text())


def _pages() -> list[Path]:
    return sorted(p for p in RUNBOOKS.glob("*.md") if p.name != "README.md")


def _indexed_pages() -> set[str]:
    index = _index()
    pages = set(index["alerts"].values())
    pages |= {page for speeds in index["slo_burn"].values() for page in speeds.values()}
    pages |= {index["slo_absent"], index["replica_outlier"]}
    return pages


def _page_of(url: str) -> Path:
    """The file a runbook_url points at: the part after the last ``runbooks/``."""
    name = url.rsplit("runbooks/", 1)[-1].split("#", 1)[0]
    return RUNBOOKS / name


def _operational_rules() -> Iterator[dict[str, Any]]:
    for profile in ("fleetwatch", "vllm", "sglang"):
        yield to_document(
            rules_document(get_profile(profile), runbook_base="https://example.org/runbooks")
        )


def _slo_rules() -> Iterator[dict[str, Any]]:
    from fleetwatch.slo.load import load_spec
    from fleetwatch.slo.rules import generate_rules, render_rules

    spec = load_spec(SLO_SPEC)
    yield yaml.safe_load(render_rules(generate_rules(spec, get_profile("fleetwatch"))))


def _outlier_rules() -> Iterator[dict[str, Any]]:
    from fleetwatch.fleet.outliers.rules.generate import outlier_rules

    yield to_document(outlier_rules(get_profile("fleetwatch")))


GENERATORS: dict[str, Callable[[], Iterator[dict[str, Any]]]] = {
    "operational": _operational_rules,
    "slo": _slo_rules,
    "outliers": _outlier_rules,
}


def _alerts(documents: Iterator[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        rule
        for doc in documents
        for group in doc["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]


@pytest.mark.parametrize("generator", sorted(GENERATORS))
def test_every_generated_alert_has_a_runbook_url_that_resolves(generator: str) -> None:
    alerts = _alerts(GENERATORS[generator]())
    assert alerts, f"{generator} generated no alerts"
    missing = sorted(
        {
            f"{rule['alert']} -> {rule.get('annotations', {}).get('runbook_url')}"
            for rule in alerts
            if not _page_of(rule.get("annotations", {}).get("runbook_url", "")).is_file()
            or "runbook_url" not in rule.get("annotations", {})
        }
    )
    assert not missing, missing


def test_every_operational_alert_is_in_the_index_with_the_same_page() -> None:
    assert _index()["alerts"] == dict(ALERT_PAGES)
    names = {rule["alert"] for rule in _alerts(_operational_rules())}
    assert names == set(ALERT_PAGES)


def test_every_slo_kind_has_a_fast_and_a_slow_burn_page() -> None:
    burn = _index()["slo_burn"]
    for kind in SLI_KINDS:
        assert burn[kind] == {
            "fast": f"slo-{kind}-fast-burn.md",
            "slow": f"slo-{kind}-slow-burn.md",
        }


def test_index_and_folder_agree_and_readme_links_every_page() -> None:
    pages = {p.name for p in _pages()}
    assert _indexed_pages() == pages
    readme = (RUNBOOKS / "README.md").read_text()
    linked = set(re.findall(r"\]\(([^)#]+\.md)\)", readme))
    assert pages <= linked, pages - linked


@pytest.mark.parametrize("page", [p.name for p in _pages()])
def test_page_has_every_section_in_order_and_mentions_rollback(page: str) -> None:
    text = (RUNBOOKS / page).read_text()
    assert text.startswith("# ")
    positions = [text.find(section + "\n") for section in SECTIONS]
    assert all(p >= 0 for p in positions), [
        s for s, p in zip(SECTIONS, positions, strict=True) if p < 0
    ]
    assert positions == sorted(positions)
    mitigate = text[positions[3] : positions[4]]
    assert "roll" in mitigate.lower() and "back" in mitigate.lower()
    commands = text[positions[5] :]
    assert "`fleetwatch " in commands
    for target in re.findall(r"\]\(([^)#:]+\.md)\)", text):
        assert (RUNBOOKS / target).is_file(), f"{page} links to missing {target}"


def test_latency_pages_rule_causes_out_in_the_agreed_order() -> None:
    for kind in ("ttft", "tpot", "itl", "e2e"):
        for speed in ("fast", "slow"):
            text = (RUNBOOKS / f"slo-{kind}-{speed}-burn.md").read_text()
            section = text[text.index("## Rule out, in order") : text.index("## Mitigate")]
            found = [section.find(f"**{cause}.**") for cause in LATENCY_CAUSES]
            assert all(p >= 0 for p in found) and found == sorted(found), (kind, speed)


def _promql_blocks() -> list[tuple[str, str]]:
    """(page, expression) for every expression in a ```promql block; indented lines continue
    the previous expression."""
    found = []
    for page in _pages():
        for match in FENCE.finditer(page.read_text()):
            found.extend((page.name, e) for e in expressions(match))
    return found


FENCE = re.compile(r"^( *)```promql\n(.*?)^\1```", re.S | re.M)


def expressions(block: re.Match[str]) -> list[str]:
    """The expressions of one ```promql block (a ``FENCE`` match); indented lines continue
    the previous expression."""
    indent = len(block.group(1))
    out: list[str] = []
    for line in block.group(2).splitlines():
        line = line[indent:]
        if not line.strip():
            continue
        if line[0].isspace() and out:
            out[-1] += " " + line.strip()
        else:
            out.append(line.strip())
    return out


def test_runbook_queries_name_only_fleetwatch_metrics_and_rules() -> None:
    blocks = _promql_blocks()
    assert len(blocks) > 60
    profile = get_profile("fleetwatch")
    for page, expr in blocks:
        stray = unknown_names(profile, metric_names(expr))
        assert not stray, (page, expr, stray)


def test_runbook_queries_pass_promtool(check_exprs: Callable[..., Any]) -> None:
    result = check_exprs("runbook", [expr for _, expr in _promql_blocks()])
    assert result.returncode == 0, result.stdout + result.stderr
