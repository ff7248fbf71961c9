"""The Kubernetes objects from the command line: every rules command writes, with
``--prometheus-rule``, a PrometheusRule beside its rules file holding the same groups;
``fleet capacity -o`` writes its rules as one beside the HPA; ``fleet podmonitor`` writes a
PodMonitor for vLLM or engine serve; each validates against the pinned prometheus-operator CRD,
and a bad option is one line, exit 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fleetwatch.cli import main
from tests.dashboards.test_kubernetes import schema_errors

ROOT = Path(__file__).resolve().parents[1]
RULE_OPTIONS = ["--prometheus-rule", "--rule-namespace", "monitoring"]
COMMANDS = {
    "slo": ["slo", "rules", str(ROOT / "slo/examples/vllm.yaml"), "--profile", "vllm"],
    "fleet": ["fleet", "rules", "--profile", "vllm"],
    "ops": ["dashboards", "alerts", "--profile", "vllm"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_each_rules_command_writes_its_prometheus_rule(tmp_path: Path, command: str) -> None:
    rules = tmp_path / f"{command}.rules.yaml"
    argv = [*COMMANDS[command], "-o", str(rules), *RULE_OPTIONS, "--rule-label", "release=kps"]
    assert main(argv) == 0
    manifest = yaml.safe_load((tmp_path / f"{command}.rules.prometheusrule.yaml").read_text())
    assert schema_errors(manifest) == []
    assert manifest["metadata"] == {
        "name": f"{command}-rules",
        "namespace": "monitoring",
        "labels": {"release": "kps"},
    }
    assert manifest["spec"]["groups"] == yaml.safe_load(rules.read_text())["groups"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_bad_rule_label_writes_nothing(tmp_path: Path, command: str, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    argv = [*COMMANDS[command], "-o", str(out / "r.yaml"), *RULE_OPTIONS, "--rule-label", "kps"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "--rule-label" in err and "KEY=VALUE" in err and "\n" not in err
    assert list(out.iterdir()) == []


def test_without_the_flag_no_prometheus_rule_is_written(tmp_path: Path) -> None:
    assert main([*COMMANDS["fleet"], "-o", str(tmp_path / "f.yaml")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.test.yaml", "f.yaml"]


def test_capacity_writes_its_rules_as_a_prometheus_rule_in_the_deployments_namespace(
    tmp_path: Path,
) -> None:
    from tests.fleet.test_capacity import probe_doc

    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps(probe_doc()))
    out = tmp_path / "k8s"
    assert main(["fleet", "capacity", str(probe), "--namespace", "llm-a", "-o", str(out)]) == 0
    manifest = yaml.safe_load((out / "capacity.rules.prometheusrule.yaml").read_text())
    assert schema_errors(manifest) == []
    assert manifest["metadata"]["namespace"] == "llm-a"
    plain = yaml.safe_load((out / "capacity.rules.yaml").read_text())
    assert manifest["spec"]["groups"] == plain["groups"]


@pytest.mark.parametrize("engine", ["vllm", "fleetwatch"])
def test_podmonitor_command_writes_a_valid_pod_monitor(tmp_path: Path, engine: str) -> None:
    out = tmp_path / "pm.yaml"
    argv = ["fleet", "podmonitor", "--engine", engine, "--name", "llm", "--namespace", "llm-prod"]
    argv += ["--selector", "app=llm", "--job", "vllm", "--label", "release=kps", "-o", str(out)]
    assert main(argv) == 0
    manifest = yaml.safe_load(out.read_text())
    assert schema_errors(manifest) == []
    assert manifest["kind"] == "PodMonitor"
    assert manifest["spec"]["selector"] == {"matchLabels": {"app": "llm"}}
    assert manifest["spec"]["podMetricsEndpoints"][0]["path"] == "/metrics"


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--selector", "app"], "--selector"),
        (["--selector", "app=llm", "--port", "Not_A_Port!"], "port"),
        (["--selector", "app=llm", "--interval", "soon"], "interval"),
    ],
)
def test_podmonitor_refuses_bad_options(
    tmp_path: Path, extra: list[str], says: str, capsys
) -> None:
    out = tmp_path / "pm.yaml"
    argv = ["fleet", "podmonitor", "--name", "llm", "--namespace", "llm-prod", *extra]
    assert main([*argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err
    assert not out.exists()
