"""``promtool test rules`` files as values: input series, and the alerts and PromQL results
expected at given times.

Field names are the file's own (``input_series``, ``alert_rule_test``, ``exp_alerts``,
``promql_expr_test``, ``exp_samples``, …), so a value reads as the YAML
``fleetwatch.core.rules.render`` writes for it. Times and intervals are Prometheus duration
strings; series are written as promtool reads them, ``name{label="value",…}``, with values in
its expanding notation (``0+10x30``: 31 samples from 0, rising by 10).

>>> healthy = RuleTest("1m", (InputSeries('up{job="api"}', "1x10"),), (AlertCase("5m", "ApiDown"),))
>>> RuleTestFile(("api.rules.yaml",), "1m", (healthy,)).tests[0].alert_rule_test[0].exp_alerts
()
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "AlertCase",
    "ExpectedAlert",
    "ExpectedSample",
    "ExprCase",
    "InputSeries",
    "RuleTest",
    "RuleTestFile",
    "humanize_percentage",
    "rendered",
]

_TEMPLATE = re.compile(
    r"\{\{ \$labels\.(\w+)( \| urlquery)? \}\}|\{\{ \$externalURL \}\}"
    r"|(\{\{ \$value \| humanizePercentage \}\})"
)


def humanize_percentage(value: float) -> str:
    """``value`` (a ratio, 0.25) as Prometheus's ``humanizePercentage`` writes it ("25%"): Go's
    ``%.4g`` of ``value * 100``, which Python's ``%g`` matches."""
    return f"{value * 100:.4g}%"


def rendered(template: str, labels: Mapping[str, str], value: float | None = None) -> str:
    """An annotation ``template`` as promtool renders it for an alert with ``labels`` and
    ``value``: each ``{{ $labels.x }}`` its value ("" when absent), ``| urlquery`` as Go's
    ``url.QueryEscape``, ``{{ $value | humanizePercentage }}`` as ``humanize_percentage``, and
    ``{{ $externalURL }}`` empty (a unit test has no external URL). A template naming
    ``$value`` needs ``value``: ``ValueError`` without it."""

    def value_of(m: re.Match[str]) -> str:
        if m.group(3) is not None:
            if value is None:
                raise ValueError(f"{template!r} shows the alert's value: pass the value")
            return humanize_percentage(value)
        if m.group(1) is None:
            return ""
        text = labels.get(m.group(1), "")
        return urllib.parse.quote_plus(text) if m.group(2) else text

    return _TEMPLATE.sub(value_of, template)


@dataclass(frozen=True, slots=True)
class InputSeries:
    """One input series: ``series`` (``name{labels}``) and its ``values``, one per interval."""

    series: str
    values: str


@dataclass(frozen=True, slots=True)
class ExpectedAlert:
    """A firing alert as promtool reports it: every label (the rule's and the series') and the
    annotations with their templates filled in."""

    exp_labels: Mapping[str, str]
    exp_annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AlertCase:
    """The alerts named ``alertname`` firing at ``eval_time``: exactly ``exp_alerts`` (empty:
    none fires)."""

    eval_time: str
    alertname: str
    exp_alerts: tuple[ExpectedAlert, ...] = ()


@dataclass(frozen=True, slots=True)
class ExpectedSample:
    """One result of a PromQL expression: its labels (``name{labels}`` or ``{labels}``) and
    value (an int is written as one: ``1``, not ``1.0``)."""

    labels: str
    value: float


@dataclass(frozen=True, slots=True)
class ExprCase:
    """``expr`` evaluated at ``eval_time`` returns exactly ``exp_samples`` (empty: nothing)."""

    expr: str
    eval_time: str
    exp_samples: tuple[ExpectedSample, ...] = ()


@dataclass(frozen=True, slots=True)
class RuleTest:
    """One entry of ``tests``: series sampled every ``interval``, and what must hold. Empty
    ``alert_rule_test`` or ``promql_expr_test`` are left out of the file (promtool reads a
    missing list as an empty one); ``name`` (None: none) titles promtool's report."""

    interval: str
    input_series: tuple[InputSeries, ...]
    alert_rule_test: tuple[AlertCase, ...] = ()
    promql_expr_test: tuple[ExprCase, ...] = ()
    name: str | None = None


@dataclass(frozen=True, slots=True)
class RuleTestFile:
    """A test file: the ``rule_files`` it loads (paths relative to it), the rules' evaluation
    interval, its ``tests``, and ``comments`` written as ``#`` lines above them."""

    rule_files: tuple[str, ...]
    evaluation_interval: str
    tests: tuple[RuleTest, ...]
    comments: tuple[str, ...] = ()
