"""Alerts an on-call can follow: every alert of every generator (operational, SLO, outlier)
carries a runbook link and a dashboard link to a dashboard that exists, with its replica and
model variables set from the alert's labels; one labels-file setting (``links``) makes every
link absolute, and without it each generator says so in one warning line; the outlier alert's
command names the Prometheus to query; a bad link is named with its file (that a bad ``links``
stops every generator before it writes is in test_labels_everywhere)."""

from __future__ import annotations

import json
import re
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetwatch.cli import main
from fleetwatch.core.links import Links, LinksError, links_from_mapping
from fleetwatch.core.profiles import get_profile
from fleetwatch.core.profiles.labels import LabelScheme
from fleetwatch.dashboards.build import render_all

ROOT = Path(__file__).resolve().parents[2]
RUNBOOKS = "https://git.example.com/sre/fleetwatch/-/blob/main/runbooks"
GRAFANA = "https://grafana.example.com"
PROMETHEUS = "https://prometheus.example.com"
LINKS = f"links:\n  runbooks: {RUNBOOKS}/\n  grafana: {GRAFANA}\n  prometheus: {PROMETHEUS}\n"
SPECS = {"vllm": "vllm.yaml", "fleetwatch": "chat.yaml"}


def _generate(tmp_path: Path, profile: str, labels: Path | None) -> dict[str, list[dict[str, Any]]]:
    """The alerting rules each generator writes for ``profile``, by generator."""
    out = tmp_path / ("with" if labels else "without")
    out.mkdir()
    extra = ["--labels", str(labels)] if labels else []
    spec = str(ROOT / "slo" / "examples" / SPECS[profile])
    argvs = {
        "ops": ["dashboards", "alerts", "--profile", profile, "-o", str(out / "ops.yaml")],
        "slo": ["slo", "rules", spec, "--profile", profile, "-o", str(out / "slo.yaml")]
        + (["--goodput", "0.5,0.05"] if profile == "fleetwatch" else []),
        "fleet": ["fleet", "rules", "--profile", profile, "-o", str(out / "fleet.yaml")],
    }
    found = {}
    for name, argv in argvs.items():
        assert main([*argv, *extra]) == 0, name
        doc = yaml.safe_load((out / f"{name}.yaml").read_text())
        found[name] = [r for g in doc["groups"] for r in g["rules"] if "alert" in r]
        assert found[name], name
    return found


def _dashboards() -> dict[str, set[str]]:
    """Each built dashboard's uid and its template variables' names."""
    out = {}
    for text in render_all().values():
        doc = json.loads(text)
        out[doc["uid"]] = {v["name"] for v in doc["templating"]["list"]}
    return out


@pytest.mark.parametrize("profile", sorted(SPECS))
def test_every_alert_links_its_runbook_and_an_existing_dashboard(tmp_path, profile, capsys):
    labels = tmp_path / "labels.yaml"
    labels.write_text(LINKS)
    dashboards = _dashboards()
    for generator, alerts in _generate(tmp_path, profile, labels).items():
        for rule in alerts:
            notes, where = rule["annotations"], (generator, rule["alert"])
            assert notes["runbook_url"].startswith(RUNBOOKS + "/"), where
            assert (ROOT / "runbooks" / notes["runbook_url"].rsplit("/", 1)[1]).is_file(), where
            url = urllib.parse.urlsplit(notes["dashboard_url"])
            assert f"{url.scheme}://{url.netloc}" == GRAFANA, where
            uid = url.path.removeprefix("/d/")
            assert uid in dashboards, where
            variables = urllib.parse.parse_qs(url.query)
            assert {k.removeprefix("var-") for k in variables} <= dashboards[uid], where
    assert "warning" not in capsys.readouterr().err


def test_alert_dashboard_links_fill_the_replica_and_model_from_the_alerts_labels(tmp_path):
    alerts = _generate(tmp_path, "vllm", None)
    by_name = {r["alert"]: r["annotations"] for rules in alerts.values() for r in rules}
    kv = by_name["FleetwatchKVCachePressure"]["dashboard_url"]
    assert kv == (
        "/d/fleetwatch-vllm-replica?var-model={{ $labels.model_name | urlquery }}"
        "&var-replica={{ $labels.instance | urlquery }}"
    )
    # Device and telemetry alerts keep no model label: only the replica is set.
    drops = by_name["FleetwatchTelemetryDrops"]["dashboard_url"]
    assert drops == "/d/fleetwatch-vllm-replica?var-replica={{ $labels.instance | urlquery }}"
    slo = next(r for r in alerts["slo"] if r["labels"]["severity"] == "page")
    assert slo["annotations"]["dashboard_url"] == (
        f"/d/fleetwatch-vllm-slo?var-slo={slo['labels']['slo']}"
    )


def test_every_operational_description_shows_its_value():
    from fleetwatch.dashboards.alerts import alert_rules

    for profile in ("fleetwatch", "vllm", "sglang"):
        for a in alert_rules(get_profile(profile), resilience=True):
            assert "$value" in a.value, (profile, a.name)
            assert a.example_value, (profile, a.name)
            assert a.annotations(get_profile(profile))["description"].endswith(a.value)


def test_unset_links_are_relative_and_each_generator_warns_once(tmp_path, capsys):
    alerts = _generate(tmp_path, "vllm", None)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("warning: no links.runbooks") for line in err)
    for rules in alerts.values():
        for rule in rules:
            assert rule["annotations"]["runbook_url"].startswith("runbooks/")
            assert rule["annotations"]["dashboard_url"].startswith("/d/fleetwatch-vllm-")


def test_the_outlier_command_names_the_prometheus_to_query(tmp_path):
    def commands(found: dict[str, list[dict[str, Any]]]) -> set[str]:
        texts = {r["annotations"]["description"] for r in found["fleet"]}
        return {m for t in texts for m in re.findall(r"`(fleetwatch fleet outliers[^`]*)`", t)}

    labels = tmp_path / "labels.yaml"
    labels.write_text(LINKS)
    assert commands(_generate(tmp_path, "vllm", labels)) == {
        f"fleetwatch fleet outliers --prometheus {PROMETHEUS} --profile vllm"
    }
    # Unset: the evaluating Prometheus's own external URL.
    assert commands(_generate(tmp_path, "vllm", None)) == {
        "fleetwatch fleet outliers --prometheus {{ $externalURL }} --profile vllm"
    }


def test_links_alone_change_only_the_links(tmp_path):
    plain = _generate(tmp_path, "vllm", None)
    labels = tmp_path / "labels.yaml"
    labels.write_text(LINKS)
    linked = _generate(tmp_path, "vllm", labels)
    for generator, rules in plain.items():
        for a, b in zip(rules, linked[generator], strict=True):
            assert a["expr"] == b["expr"] and a["labels"] == b["labels"]
            assert a["annotations"]["summary"] == b["annotations"]["summary"]


@pytest.mark.parametrize(
    ("links", "message"),
    [
        ({"runbooks": "runbooks/"}, "not an absolute http(s) or file URL"),
        ({"grafana": "https://g.example.com/?orgId=1"}, "takes no query or fragment"),
        ({"grafan": GRAFANA}, "unknown key 'grafan'"),
        ({"prometheus": ""}, "expected a URL"),
        (["https://g.example.com"], "expected a mapping"),
    ],
)
def test_a_bad_link_is_named_with_its_file(links, message):
    with pytest.raises(LinksError, match=re.escape(message)) as caught:
        links_from_mapping(links, "labels.yaml")
    assert str(caught.value).startswith("labels.yaml: links")


def test_a_scheme_of_links_only_leaves_the_profile_as_it_was_but_its_links():
    vllm = get_profile("vllm")
    applied = LabelScheme(links=Links(grafana=GRAFANA)).apply(vllm)
    assert applied.links.grafana == GRAFANA
    assert applied.signals == vllm.signals and applied.identity == vllm.identity
