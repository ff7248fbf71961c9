"""Kubernetes object metadata: names, namespaces, labels and port names Kubernetes would refuse are
refused where the manifest is built, naming the field, the value and the rule; ``dns_name``
makes a valid name from any text that has a letter or digit."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetwatch.core.kubernetes import (
    ManifestError,
    check_dns_label,
    check_labels,
    check_port_name,
    dns_name,
    object_metadata,
)

SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def test_metadata_holds_what_is_given_and_nothing_else() -> None:
    assert object_metadata("PodMonitor", "vllm") == {"name": "vllm"}
    assert object_metadata(
        "PodMonitor", "vllm.a-1", namespace="llm-a", labels={"app.kubernetes.io/part-of": ""}
    ) == {"name": "vllm.a-1", "namespace": "llm-a", "labels": {"app.kubernetes.io/part-of": ""}}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "SLO_rules",
            r"PrometheusRule name 'SLO_rules': must be a DNS-1123 subdomain.*'slo-rules'",
        ),
        ("-rules", r"name '-rules': must be a DNS-1123 subdomain.*dns_name\(\) makes it 'rules'"),
        ("a..b", r"name 'a\.\.b': must be a DNS-1123 subdomain"),
        ("", r"name '': must be a DNS-1123 subdomain"),
        ("x" * 254, r"at most 253 characters"),
        (7, r"name 7: must be a DNS-1123 subdomain"),
    ],
)
def test_a_bad_name_is_refused_with_the_rule_and_a_valid_one(name: object, message: str) -> None:
    with pytest.raises(ManifestError, match=message):
        object_metadata("PrometheusRule", name)  # type: ignore[arg-type]


@pytest.mark.parametrize("namespace", ["Monitoring", "a.b", "a" * 64, "-a", ""])
def test_a_bad_namespace_is_refused(namespace: str) -> None:
    with pytest.raises(ManifestError, match=r"PodMonitor namespace .*: must be a DNS-1123 label"):
        object_metadata("PodMonitor", "ok", namespace=namespace)
    with pytest.raises(ManifestError, match=r"^f .*DNS-1123 label"):
        check_dns_label("f", namespace)


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ({"a b": "x"}, r"label key 'a b': the name must be letters, digits"),
        ({"Example.com/a": "x"}, r"label key 'Example.com/a': the prefix before '/' must be"),
        ({"/a": "x"}, r"label key '/a': the prefix before '/' must be"),
        ({"a/": "x"}, r"label key 'a/': the name must be"),
        ({"k" * 64: "x"}, r"label key .*: the name must be .*at most 63"),
        ({"release": "prometheus stack"}, r"label 'release': value 'prometheus stack' must be"),
        ({"release": "v" * 64}, r"label 'release': value .* must be empty or .*at most 63"),
        ({"release": "-p"}, r"label 'release': value '-p' must be"),
        ({"release": 1}, r"label 'release': value 1 is not a string"),
        ({1: "x"}, r"label key 1 is not a string"),
    ],
)
def test_a_bad_label_is_refused_naming_the_key(labels: dict[object, object], message: str) -> None:
    with pytest.raises(ManifestError, match=r"^PrometheusRule metadata\.labels: " + message):
        object_metadata("PrometheusRule", "ok", labels=labels)  # type: ignore[arg-type]


def test_labels_must_be_a_mapping() -> None:
    with pytest.raises(ManifestError, match=r"^sel: must be a mapping"):
        check_labels("sel", ["release=prometheus"])  # type: ignore[arg-type]
    assert check_labels("sel", None) == {}


@pytest.mark.parametrize("port", ["http", "metrics", "h2c-8000", "a1"])
def test_container_port_names(port: str) -> None:
    assert check_port_name("port", port) == port


@pytest.mark.parametrize("port", ["HTTP", "8000", "a--b", "-http", "a" * 16, "", 8000, "my_port"])
def test_a_bad_container_port_name_is_refused(port: object) -> None:
    with pytest.raises(ManifestError, match=r"^PodMonitor port .*: must be a container port name"):
        check_port_name("PodMonitor port", port)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("SLO rules_v2.yaml", "slo-rules-v2.yaml"),
        ("fleetwatch-slo-vllm", "fleetwatch-slo-vllm"),
        ("--a--", "a"),
        ("a.-b", "a.b"),
        ("a-.b..c", "a.b.c"),
        ("Ünïcode ≤ 250", "n-code-250"),
    ],
)
def test_dns_name(text: str, name: str) -> None:
    assert dns_name(text) == name


@given(st.text(min_size=1, max_size=300))
def test_dns_name_is_always_valid_or_refused(text: str) -> None:
    try:
        name = dns_name(text)
    except ManifestError as exc:
        assert "no object name can be made" in str(exc)
        return
    assert len(name) <= 253 and SUBDOMAIN.fullmatch(name), name
    assert object_metadata("PodMonitor", name)["name"] == name
