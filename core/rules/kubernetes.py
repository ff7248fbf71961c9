"""A rule file as a prometheus-operator ``PrometheusRule`` (``monitoring.coreos.com/v1``).

With prometheus-operator (kube-prometheus-stack) rules are not files on Prometheus' disk but
``PrometheusRule`` objects: the operator selects them by label (the chart's ``ruleSelector``
wants ``release: <release name>``) and writes their ``spec.groups`` into Prometheus' rule files.
So ``spec.groups`` is the plain file's ``groups`` exactly as ``to_document`` gives them (names,
intervals, rules with their ``for`` durations as generated), and the manifest is written by the
same ``render_yaml``.

Refused with ``PrometheusRuleError`` (both a ``RulesError`` and a ``ManifestError``): a file without rules
(as ``render_yaml`` refuses it), two groups of one name (the CRD keys ``spec.groups`` by name, so
the API server refuses the object), and a name, namespace or label Kubernetes would refuse.

>>> from fleetwatch.core.rules.model import AlertingRule, RuleFile, RuleGroup
>>> from fleetwatch.core.rules.render import render_yaml
>>> rules = RuleFile((RuleGroup("availability", (AlertingRule("Down", "up == 0", "5m"),)),))
>>> manifest = prometheus_rule(rules, "availability", labels={"release": "prometheus"})
>>> print(render_yaml(manifest), end="")
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: availability
  labels:
    release: prometheus
spec:
  groups:
  - name: availability
    rules:
    - alert: Down
      expr: up == 0
      for: 5m
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from fleetwatch.core.kubernetes import ManifestError, dns_name, object_metadata
from fleetwatch.core.rules.files import prometheus_rule_path
from fleetwatch.core.rules.model import RuleFile
from fleetwatch.core.rules.render import RulesError, to_document

__all__ = [
    "API_VERSION",
    "KIND",
    "PrometheusRuleError",
    "parse_labels",
    "prometheus_rule",
    "prometheus_rule_for",
    "prometheus_rule_path",
]

API_VERSION: Final = "monitoring.coreos.com/v1"
KIND: Final = "PrometheusRule"


class PrometheusRuleError(RulesError, ManifestError):
    """A rule file that cannot be a ``PrometheusRule``: a ``RulesError`` for the rules' sake and a
    ``ManifestError`` for the manifest's."""


def prometheus_rule(
    rules: RuleFile,
    name: str,
    *,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``rules`` as a ``PrometheusRule`` manifest named ``name`` (a DNS-1123 subdomain: derive
    one from other text with ``fleetwatch.core.kubernetes.dns_name``), in ``namespace`` when
    given, carrying ``labels`` (what the operator's ``ruleSelector`` matches). The rule file's
    comments are not part of the object."""
    if not rules.rule_count:
        raise PrometheusRuleError(f"{KIND} {name!r}: no rules: refusing an empty rule file")
    repeated = sorted(n for n, count in Counter(g.name for g in rules.groups).items() if count > 1)
    if repeated:
        raise PrometheusRuleError(
            f"{KIND} {name!r}: group names must be unique (spec.groups is keyed by name), "
            f"repeated: {', '.join(repeated)}"
        )
    try:
        metadata = object_metadata(KIND, name, namespace=namespace, labels=labels)
    except ManifestError as exc:
        raise PrometheusRuleError(str(exc)) from None
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {"groups": to_document(rules)["groups"]},
    }


def parse_labels(values: Sequence[str], option: str) -> dict[str, str]:
    """``KEY=VALUE`` option values as labels; ``PrometheusRuleError`` naming the option."""
    out: dict[str, str] = {}
    for value in values:
        key, eq, text = value.partition("=")
        if not eq or not key:
            raise PrometheusRuleError(f"{option}: expected KEY=VALUE, got {value!r}")
        out[key.strip()] = text.strip()
    return out


def prometheus_rule_for(
    rules: RuleFile, rules_file: Path, *, namespace: str | None, labels: Sequence[str]
) -> tuple[Path, dict[str, Any]]:
    """The path and manifest of ``rules_file``'s PrometheusRule, named after the file
    (``slo.rules.yaml`` -> ``slo-rules``), checked before anything is written."""
    path = prometheus_rule_path(rules_file)
    name = dns_name(path.name.removesuffix(".prometheusrule.yaml").replace(".", "-"))
    manifest = prometheus_rule(
        rules, name, namespace=namespace, labels=parse_labels(labels, "--rule-label")
    )
    return path, manifest
