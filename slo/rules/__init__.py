"""Prometheus rules for SLOs: recording rules, metadata, multiwindow burn alerts, promtool tests."""

from slo.rules.generate import AlertInfo, Rule, RuleGroup, RuleSet, generate_rules
from slo.rules.promtool_tests import generate_promtool_tests
from slo.rules.render import render_rules, render_tests

__all__ = [
    "AlertInfo",
    "Rule",
    "RuleGroup",
    "RuleSet",
    "generate_promtool_tests",
    "generate_rules",
    "render_rules",
    "render_tests",
]
