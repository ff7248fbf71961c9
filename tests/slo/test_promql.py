"""PromQL fragments: `le` matchers that survive Prometheus 3 float normalisation, and thresholds
that must be bucket boundaries."""

from __future__ import annotations

import re

import pytest

from fleetwatch.core.profiles import get_profile
from fleetwatch.core.promql import format_le, le_matcher
from fleetwatch.slo.errors import SLOSpecError
from fleetwatch.slo.load import load_spec
from fleetwatch.slo.rules import generate_rules


@pytest.mark.parametrize(
    ("bound", "spellings", "not_matched"),
    [
        (0.5, ["0.5", "0.50", "0.500"], ["0.55", "10.5", "0.05"]),
        (1.0, ["1", "1.0", "1.00"], ["10", "1.5", "0.1"]),
        (2560.0, ["2560", "2560.0"], ["256", "25600"]),
        (0.001, ["0.001", "0.0010"], ["0.0011", "0.01"]),
    ],
)
def test_le_matcher_matches_every_spelling_of_the_bound_and_nothing_else(
    bound: float, spellings: list[str], not_matched: list[str]
) -> None:
    m = re.fullmatch(r'le=~"(.*)"', le_matcher(bound))
    assert m is not None
    pattern = re.compile(m.group(1))
    for text in spellings:
        assert pattern.fullmatch(text), text
    for text in not_matched:
        assert not pattern.fullmatch(text), text


def test_format_le_is_the_shortest_plain_decimal() -> None:
    assert [format_le(x) for x in (1.0, 0.5, 2560.0, 0.001, 7.5)] == [
        "1",
        "0.5",
        "2560",
        "0.001",
        "7.5",
    ]


def test_a_threshold_off_the_buckets_lists_the_nearest_boundaries() -> None:
    spec = load_spec(
        "service: s\nslos:\n- {name: a, objective: 99, sli: {kind: latency, signal: ttft, threshold: 0.3}}"
    )
    with pytest.raises(SLOSpecError) as info:
        generate_rules(spec, get_profile("vllm"))
    assert info.value.path == "slos[0].sli.threshold"
    assert "nearest boundaries: 0.1, 0.25, 0.5, 0.75" in str(info.value)


def test_custom_buckets_make_a_threshold_valid() -> None:
    spec = load_spec(
        "service: s\nslos:\n- {name: a, objective: 99, sli: {kind: latency, signal: ttft, threshold: 0.3}}"
    )
    from fleetwatch.core.profiles import Signal

    profile = get_profile("vllm").with_buckets(Signal.TTFT, [0.1, 0.3, 1.0])
    rules = generate_rules(spec, profile)
    assert any('le=~"0[.]30*"' in r.expr for g in rules.groups for r in g.rules)
