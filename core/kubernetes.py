"""Kubernetes object metadata as the API server checks it: names, namespaces, labels.

Every manifest the toolkit writes (a ``PrometheusRule``, a ``PodMonitor``, an HPA) carries a
``metadata`` block the API server refuses when a name or a label is malformed, long after the
file was generated. ``object_metadata`` checks it where it is built, with Kubernetes' own rules
(``k8s.io/apimachinery/pkg/util/validation``), and ``ManifestError`` names the field, the value
and the rule:

- an object name is a DNS-1123 subdomain: at most 253 characters of lowercase letters, digits,
  ``-`` and ``.``, starting and ending with a letter or digit (``dns_name`` derives one from any
  text, such as a file name);
- a namespace is a DNS-1123 label: the same without ``.``, at most 63 characters;
- a label key is a name of at most 63 characters (letters, digits, ``-``, ``_``, ``.``, starting
  and ending with a letter or digit) after an optional DNS-subdomain prefix and ``/``
  (``app.kubernetes.io/name``); a label value is empty or such a name;
- a container port name (what a PodMonitor scrapes by) is an IANA service name: at most 15
  lowercase letters, digits and ``-``, with a letter, without ``--``.

>>> object_metadata("PrometheusRule", "slo-chat", namespace="monitoring", labels={"release": "prometheus"})
{'name': 'slo-chat', 'namespace': 'monitoring', 'labels': {'release': 'prometheus'}}
>>> dns_name("SLO rules_v2.yaml")
'slo-rules-v2.yaml'
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from fleetwatch.core.brief import brief

__all__ = [
    "PROMETHEUS_RULE_HELP",
    "RULE_LABEL_HELP",
    "RULE_NAMESPACE_HELP",
    "ManifestError",
    "check_dns_label",
    "check_labels",
    "check_port_name",
    "dns_name",
    "object_metadata",
]

_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
)
_QUALIFIED: Final = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_SUBDOMAIN_RULE: Final = (
    "a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending with a "
    "letter or digit, at most 253 characters"
)
_LABEL_RULE: Final = (
    "a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or "
    "digit, at most 63 characters"
)
_NAME_RULE: Final = (
    "letters, digits, '-', '_' and '.', starting and ending with a letter or digit, at most 63 "
    "characters"
)


PROMETHEUS_RULE_HELP: Final = (
    "Also write the rules as a prometheus-operator PrometheusRule beside them "
    "(x.yaml -> x.prometheusrule.yaml)."
)
RULE_NAMESPACE_HELP: Final = "Namespace of the PrometheusRule (default: none, kubectl's)."
RULE_LABEL_HELP: Final = (
    "Label of the PrometheusRule, KEY=VALUE, repeatable (what the operator's ruleSelector "
    "matches, e.g. release=prometheus)."
)


class ManifestError(ValueError):
    """A Kubernetes manifest the API server (or the operator reading it) would refuse: which
    field, which value, and the rule it breaks."""


def dns_name(text: str) -> str:
    """``text`` as an object name: lowercased, each run of other characters turned into ``-``,
    trimmed to 253 characters and to a letter or digit at both ends. ``ManifestError`` when
    nothing is left (``"__"``)."""
    name = re.sub(r"[^a-z0-9.]+", "-", text.lower())
    name = re.sub(r"\.[-.]*|-+\.[-.]*", ".", name)  # no empty or '-'-edged dot-separated part
    name = name[:253].strip("-.")
    if not name:
        raise ManifestError(f"no object name can be made from {brief(text)}")
    return name


def _check_subdomain(field: str, value: object) -> str:
    if isinstance(value, str) and len(value) <= 253 and _DNS_SUBDOMAIN.fullmatch(value):
        return value
    hint = ""
    if isinstance(value, str) and re.search(r"[A-Za-z0-9]", value):
        hint = f"; dns_name() makes it {dns_name(value)!r}"
    raise ManifestError(f"{field} {brief(value)}: must be {_SUBDOMAIN_RULE}{hint}")


def check_dns_label(field: str, value: object) -> str:
    """``value`` when it is a DNS-1123 label (a namespace, a container port name's base rule);
    otherwise ``ManifestError`` naming ``field``."""
    if not isinstance(value, str) or len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise ManifestError(f"{field} {brief(value)}: must be {_LABEL_RULE}")
    return value


def check_port_name(field: str, value: object) -> str:
    """``value`` when it is a container port name (an IANA service name: at most 15 lowercase
    letters, digits and ``-``, with a letter, no ``-`` at either end nor two in a row); otherwise
    ``ManifestError`` naming ``field``."""
    if (
        not isinstance(value, str)
        or len(value) > 15
        or not _DNS_LABEL.fullmatch(value)
        or "--" in value
        or not re.search(r"[a-z]", value)
    ):
        raise ManifestError(
            f"{field} {brief(value)}: must be a container port name (at most 15 lowercase "
            "letters, digits and '-', with at least one letter, no '-' at either end or twice "
            "in a row)"
        )
    return value


def _check_label_key(field: str, key: object) -> str:
    if not isinstance(key, str):
        raise ManifestError(f"{field}: label key {brief(key)} is not a string")
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        raise ManifestError(
            f"{field}: label key {brief(key)}: the prefix before '/' must be {_SUBDOMAIN_RULE}"
        )
    if len(name) > 63 or not _QUALIFIED.fullmatch(name):
        raise ManifestError(f"{field}: label key {brief(key)}: the name must be {_NAME_RULE}")
    return key


def check_labels(field: str, labels: Mapping[str, str] | None) -> dict[str, str]:
    """``labels`` as a plain dict, each key and value checked as Kubernetes checks labels (and
    ``matchLabels``); ``ManifestError`` naming ``field`` and the first bad key or value."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise ManifestError(
            f"{field}: must be a mapping of label keys to values, got {brief(labels)}"
        )
    out: dict[str, str] = {}
    for key, value in labels.items():
        _check_label_key(field, key)
        if not isinstance(value, str):
            raise ManifestError(f"{field}: label {key!r}: value {brief(value)} is not a string")
        if value and (len(value) > 63 or not _QUALIFIED.fullmatch(value)):
            raise ManifestError(
                f"{field}: label {key!r}: value {brief(value)} must be empty or {_NAME_RULE}"
            )
        out[key] = value
    return out


def object_metadata(
    kind: str,
    name: str,
    *,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``metadata`` of a ``kind`` object: ``name``, ``namespace`` when given (otherwise
    ``kubectl`` applies it to the current one), ``labels`` when any. Each is checked;
    ``ManifestError`` names the first that Kubernetes would refuse."""
    out: dict[str, Any] = {"name": _check_subdomain(f"{kind} name", name)}
    if namespace is not None:
        out["namespace"] = check_dns_label(f"{kind} namespace", namespace)
    checked = check_labels(f"{kind} metadata.labels", labels)
    if checked:
        out["labels"] = checked
    return out
