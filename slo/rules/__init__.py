"""Prometheus rules for SLOs: recording rules, metadata, multiwindow burn alerts, promtool tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetwatch.core.lazy import lazy_attributes
from fleetwatch.slo.rules.generate import AlertInfo, RuleSet, generate_rules
from fleetwatch.slo.rules.render import render_rules, render_tests, rule_file

if TYPE_CHECKING:
    from fleetwatch.slo.rules.promtool_tests import generate_promtool_tests

__all__ = [
    "AlertInfo",
    "RuleSet",
    "generate_promtool_tests",
    "generate_rules",
    "render_rules",
    "render_tests",
    "rule_file",
]


# promtool tests build their series with pandas: loaded on first use, not by `slo validate`.
__getattr__ = lazy_attributes(__name__, {"generate_promtool_tests": "promtool_tests"})
