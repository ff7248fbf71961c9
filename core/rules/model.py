"""Prometheus rule files as values: recording and alerting rules, their groups, the file.

Field names are the file's own (``record``, ``alert``, ``expr``, ``for``, ``labels``,
``annotations``; a group's ``name``, ``interval`` and ``rules``), so a value reads as the YAML
``fleetwatch.core.rules.render`` writes for it; ``for`` is spelled ``for_``. Durations are
Prometheus duration strings (``30s``, ``1h30m``) exactly as they appear in the file.

>>> rule = RecordingRule("job:up:sum", "sum by (job) (up)")
>>> RuleFile((RuleGroup("example", (rule,)),)).rule_count
1
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

__all__ = ["AlertingRule", "RecordingRule", "Rule", "RuleFile", "RuleGroup"]


@dataclass(frozen=True, slots=True)
class RecordingRule:
    """``expr`` evaluated every group interval and stored as the series ``record``, with
    ``labels`` added to each result."""

    record: str
    expr: str
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AlertingRule:
    """An alert named ``alert``, pending while ``expr`` returns a series and firing once it has
    for ``for_`` (None: no ``for``, fires at the first evaluation). ``annotations`` may hold
    Prometheus templates (``{{ $labels.instance }}``); they are written as given."""

    alert: str
    expr: str
    for_: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


Rule: TypeAlias = RecordingRule | AlertingRule


@dataclass(frozen=True, slots=True)
class RuleGroup:
    """Rules evaluated in order, every ``interval`` (None: Prometheus' global
    ``evaluation_interval``), so a rule can read the series recorded before it in the same
    evaluation."""

    name: str
    rules: tuple[Rule, ...]
    interval: str | None = None


@dataclass(frozen=True, slots=True)
class RuleFile:
    """What ``rule_files:`` points Prometheus at: ``groups``, plus ``comments`` written as
    ``#`` lines above them (who generated the file, from what)."""

    groups: tuple[RuleGroup, ...]
    comments: tuple[str, ...] = ()

    @property
    def rule_count(self) -> int:
        """Rules in all groups."""
        return sum(len(g.rules) for g in self.groups)
