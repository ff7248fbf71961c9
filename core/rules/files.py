"""The one naming rule for a generated promtool test file: ``<rules>.test.yaml`` beside the rules.

The rules file's last ``.yaml`` (or ``.yml``) suffix becomes ``.test.yaml``; a name without one
gets ``.test.yaml`` appended. Every command that writes rules with their test uses this
(``slo rules``, ``fleet rules``, ``dashboards alerts`` and the demo).

>>> from pathlib import Path
>>> promtool_test_path(Path("out/slo.rules.yaml")).as_posix()
'out/slo.rules.test.yaml'
>>> promtool_test_path(Path("ops.yml")).name
'ops.test.yaml'
>>> promtool_test_path(Path("rules")).name
'rules.test.yaml'
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["beside", "prometheus_rule_path", "promtool_test_path"]


def beside(rules_file: Path, kind: str) -> Path:
    """``rules_file``'s ``.yaml`` (or ``.yml``) suffix replaced by ``.<kind>.yaml``."""
    name = rules_file.name
    for suffix in (".yaml", ".yml"):
        if name.endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
            break
    return rules_file.with_name(f"{name}.{kind}.yaml")


def promtool_test_path(rules_file: Path) -> Path:
    """Where the promtool unit-test file of ``rules_file`` goes: beside it, ``<stem>.test.yaml``."""
    return beside(rules_file, "test")


def prometheus_rule_path(rules_file: Path) -> Path:
    """Where the PrometheusRule of ``rules_file`` goes: ``<stem>.prometheusrule.yaml``."""
    return beside(rules_file, "prometheusrule")
