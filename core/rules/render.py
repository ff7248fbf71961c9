"""The one writer of rule files, promtool test files and the other YAML the toolkit generates.

One style for all of them: keys in the order the format documents them, a string that holds a
newline as a ``|`` block (multi-line PromQL reads as it was written), Unicode as it is, and never
an anchor or alias, so the text depends on the value alone (two tests that expect the same
alerts each spell them out). Plain scalars are folded past ``width`` columns (``WIDTH`` unless
told). Comments are written as ``#`` lines at the top, one per line of each comment.

Like Sloth, it refuses to write a rule file without a single rule: Prometheus would load it
and evaluate nothing.

PyYAML is imported on the first render, not with the package: ``fleetwatch.core`` is installed
in serving images, which do not have it.

>>> from fleetwatch.core.rules.model import RecordingRule, RuleFile, RuleGroup
>>> rule = RecordingRule("job:up:sum", "sum by (job) (up)")
>>> print(render_yaml(RuleFile((RuleGroup("example", (rule,), "30s"),), ("generated",))), end="")
# generated
groups:
- name: example
  interval: 30s
  rules:
  - record: job:up:sum
    expr: sum by (job) (up)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from fleetwatch.core.rules.model import RecordingRule, Rule, RuleFile, RuleGroup
from fleetwatch.core.rules.unittests import (
    AlertCase,
    ExpectedAlert,
    ExpectedSample,
    ExprCase,
    InputSeries,
    RuleTest,
    RuleTestFile,
)

if TYPE_CHECKING:
    import yaml

__all__ = ["WIDTH", "RulesError", "render_yaml", "to_document"]

WIDTH: Final = 1000
"""Columns past which a plain scalar is folded onto the next line."""


class RulesError(ValueError):
    """A value the writer refuses: a rule file without rules."""


def _rule(rule: Rule) -> dict[str, Any]:
    if isinstance(rule, RecordingRule):
        out: dict[str, Any] = {"record": rule.record, "expr": rule.expr}
        if rule.labels:
            out["labels"] = dict(rule.labels)
        return out
    out = {"alert": rule.alert, "expr": rule.expr}
    if rule.for_ is not None:
        out["for"] = rule.for_
    if rule.labels:
        out["labels"] = dict(rule.labels)
    if rule.annotations:
        out["annotations"] = dict(rule.annotations)
    return out


def _group(group: RuleGroup) -> dict[str, Any]:
    out: dict[str, Any] = {"name": group.name}
    if group.interval is not None:
        out["interval"] = group.interval
    out["rules"] = [_rule(r) for r in group.rules]
    return out


def _series(s: InputSeries) -> dict[str, Any]:
    return {"series": s.series, "values": s.values}


def _alert(a: ExpectedAlert) -> dict[str, Any]:
    return {"exp_labels": dict(a.exp_labels), "exp_annotations": dict(a.exp_annotations)}


def _alert_case(case: AlertCase) -> dict[str, Any]:
    return {
        "eval_time": case.eval_time,
        "alertname": case.alertname,
        "exp_alerts": [_alert(a) for a in case.exp_alerts],
    }


def _sample(s: ExpectedSample) -> dict[str, Any]:
    return {"labels": s.labels, "value": s.value}


def _expr_case(case: ExprCase) -> dict[str, Any]:
    return {
        "expr": case.expr,
        "eval_time": case.eval_time,
        "exp_samples": [_sample(s) for s in case.exp_samples],
    }


def _test(test: RuleTest) -> dict[str, Any]:
    out: dict[str, Any] = {} if test.name is None else {"name": test.name}
    out["interval"] = test.interval
    out["input_series"] = [_series(s) for s in test.input_series]
    if test.alert_rule_test:
        out["alert_rule_test"] = [_alert_case(c) for c in test.alert_rule_test]
    if test.promql_expr_test:
        out["promql_expr_test"] = [_expr_case(c) for c in test.promql_expr_test]
    return out


def to_document(value: RuleFile | RuleTestFile) -> dict[str, Any]:
    """The file as plain dicts and lists, keys in file order (what ``yaml.safe_load`` of the
    rendered text gives back); comments are not part of it."""
    if isinstance(value, RuleFile):
        return {"groups": [_group(g) for g in value.groups]}
    return {
        "rule_files": list(value.rule_files),
        "evaluation_interval": value.evaluation_interval,
        "tests": [_test(t) for t in value.tests],
    }


def _dumper() -> type[yaml.SafeDumper]:
    """A safe dumper in the house style (built per render: PyYAML is imported only here)."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    def represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, represent_str)
    return Dumper


def _comment(text: str) -> str:
    return "".join(f"# {line}".rstrip() + "\n" for line in text.split("\n"))


def render_yaml(value: RuleFile | RuleTestFile | Mapping[str, Any], *, width: int = WIDTH) -> str:
    """The YAML text of a rule file, a promtool test file, or any other document (a Kubernetes
    manifest) given as a mapping. Raises ``RulesError`` for a rule file without rules."""
    import yaml

    if isinstance(value, RuleFile) and not value.rule_count:
        raise RulesError("no rules to write: refusing an empty rule file")
    comments: tuple[str, ...] = ()
    if isinstance(value, RuleFile | RuleTestFile):
        comments = value.comments
        document = to_document(value)
    else:
        document = dict(value)
    text = yaml.dump(document, Dumper=_dumper(), sort_keys=False, width=width, allow_unicode=True)
    return "".join(_comment(c) for c in comments) + text
