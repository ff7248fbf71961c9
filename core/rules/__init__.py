"""The rules model and its one renderer: Prometheus rule files and promtool test files as
frozen values, written as YAML by ``render_yaml``; and where a rule file's test goes.

Every generator of rules (SLO burn-rate alerts, outlier and capacity rules, operational alerts)
builds these values and hands them to the one renderer, so the files share one style and one
refusal of an empty rule file. ``prometheus_rule`` wraps a rule file into the prometheus-operator
object that carries it on Kubernetes.

>>> rule = AlertingRule("Down", "up == 0", for_="5m", labels={"severity": "page"})
>>> print(render_yaml(RuleFile((RuleGroup("availability", (rule,)),))), end="")
groups:
- name: availability
  rules:
  - alert: Down
    expr: up == 0
    for: 5m
    labels:
      severity: page
"""

from __future__ import annotations

from fleetwatch.core.rules.files import promtool_test_path
from fleetwatch.core.rules.kubernetes import PrometheusRuleError, prometheus_rule
from fleetwatch.core.rules.model import AlertingRule, RecordingRule, Rule, RuleFile, RuleGroup
from fleetwatch.core.rules.render import WIDTH, RulesError, render_yaml, to_document
from fleetwatch.core.rules.unittests import (
    AlertCase,
    ExpectedAlert,
    ExpectedSample,
    ExprCase,
    InputSeries,
    RuleTest,
    RuleTestFile,
)

__all__ = [
    "WIDTH",
    "AlertCase",
    "AlertingRule",
    "ExpectedAlert",
    "ExpectedSample",
    "ExprCase",
    "InputSeries",
    "PrometheusRuleError",
    "RecordingRule",
    "Rule",
    "RuleFile",
    "RuleGroup",
    "RuleTest",
    "RuleTestFile",
    "RulesError",
    "prometheus_rule",
    "promtool_test_path",
    "render_yaml",
    "to_document",
]
