"""The demo's generated files: Prometheus rules with their promtool tests, and dashboards.

Three rule files, each with its promtool test beside it (``<name>.test.yaml`` for ``<name>.yaml``):

- ``slo.rules.yaml``: the demo SLO spec on the fleetwatch profile (``fleetwatch.slo.rules``);
- ``outliers.rules.yaml``: the slow-replica detector as PromQL (``fleet``), with a
  rate window and ``for:`` short enough for a one-minute run;
- ``operational.rules.yaml``: KV cache, preemption, GPU, breaker, retry and telemetry alerts
  (``fleetwatch.dashboards.alerts``).

``check_rules`` runs ``promtool check rules`` and ``promtool test rules`` when promtool exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetwatch.core.atomic import atomic_write_text
from fleetwatch.core.rules.files import promtool_test_path

__all__ = [
    "OUTLIER_FOR",
    "OUTLIER_WINDOW",
    "PromtoolResult",
    "RuleCheck",
    "RuleFiles",
    "check_rules",
    "write_dashboards",
    "write_rules",
]

OUTLIER_WINDOW = "30s"
"""Rate window of the demo's outlier rules (the default 5m would outlast the run)."""
OUTLIER_FOR = "10s"
"""How long a replica must stand out before the demo's outlier alert fires."""


@dataclass(frozen=True, slots=True)
class RuleFiles:
    """Paths of the written rule files and their promtool tests."""

    rules: tuple[Path, ...]
    tests: tuple[Path, ...]
    alert_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PromtoolResult:
    """Outcome of one promtool invocation (``ok`` False with ``skipped`` when not installed)."""

    command: str
    ok: bool
    output: str
    skipped: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "ok": self.ok,
            "skipped": self.skipped,
            "output": self.output,
        }


def write_rules(folder: Path, spec: Any) -> RuleFiles:
    """Generate and write every rule file of the demo and its promtool test into ``folder``."""
    from fleetwatch.core.profiles import get_profile
    from fleetwatch.dashboards.alerts import alert_rules, alert_tests, rules_document
    from fleetwatch.dashboards.alerts import render_yaml as render_ops
    from fleetwatch.fleet.outliers.rules.generate import (
        ALERT_NAME,
        RuleOptions,
        outlier_rules,
        outlier_rules_test,
        render_yaml,
    )
    from fleetwatch.slo.rules import (
        generate_promtool_tests,
        generate_rules,
        render_rules,
        render_tests,
    )

    folder.mkdir(parents=True, exist_ok=True)
    profile = get_profile("fleetwatch")

    slo_path = folder / "slo.rules.yaml"
    ruleset = generate_rules(spec, profile)
    atomic_write_text(slo_path, render_rules(ruleset))
    atomic_write_text(
        promtool_test_path(slo_path),
        render_tests(generate_promtool_tests(ruleset, profile, slo_path.name)),
    )

    out_path = folder / "outliers.rules.yaml"
    options = RuleOptions(window=OUTLIER_WINDOW, for_=OUTLIER_FOR)
    atomic_write_text(out_path, render_yaml(outlier_rules(profile, options)))
    test_doc = outlier_rules_test(profile, out_path.name, options)
    atomic_write_text(promtool_test_path(out_path), render_yaml(test_doc))

    ops_path = folder / "operational.rules.yaml"
    atomic_write_text(ops_path, render_ops(rules_document(profile, "runbooks")))
    atomic_write_text(
        promtool_test_path(ops_path), render_ops(alert_tests(profile, ops_path.name, "runbooks"))
    )

    names = (
        *dict.fromkeys(a.name for a in ruleset.alerts),
        ALERT_NAME,
        *(a.name for a in alert_rules(profile)),
    )
    paths = (slo_path, out_path, ops_path)
    return RuleFiles(paths, tuple(promtool_test_path(p) for p in paths), names)


def write_dashboards(folder: Path, profile: str = "fleetwatch") -> tuple[Path, ...]:
    """The generated Grafana dashboards of ``profile`` (the same JSON as ``dashboards/json``)."""
    from fleetwatch.dashboards.build import render_all
    from fleetwatch.dashboards.build import write_dashboards as write_all

    return write_all(folder, render_all([profile]))


def _promtool(args: Sequence[str], cwd: Path, binary: str | None) -> PromtoolResult:
    command = " ".join(["promtool", *args])
    if binary is None:
        return PromtoolResult(command, False, "promtool not found on PATH", skipped=True)
    try:
        done = subprocess.run(
            [binary, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return PromtoolResult(command, False, f"{type(exc).__name__}: {exc}")
    text = (done.stdout + done.stderr).strip()
    return PromtoolResult(command, done.returncode == 0, text)


class RuleCheck:
    """``promtool check rules`` on every rule file, then ``promtool test rules`` on every test
    file in the background (the SLO tests evaluate every rule each second over half an hour of
    samples: tens of seconds of one core), so the demo's traffic runs meanwhile.

    ``results()`` waits for the background test and returns both outcomes.
    """

    def __init__(self, files: RuleFiles, *, binary: str | None = None) -> None:
        self._binary = binary or shutil.which("promtool")
        self._cwd = files.rules[0].parent if files.rules else Path(".")
        self._tests = [p.name for p in files.tests]
        self.check = _promtool(
            ["check", "rules", *(p.name for p in files.rules)], self._cwd, self._binary
        )
        self._proc: subprocess.Popen[str] | None = None
        if self._binary is not None and self._tests:
            self._proc = subprocess.Popen(
                [self._binary, "test", "rules", *self._tests],
                cwd=self._cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env={**os.environ, "GOMAXPROCS": "1"},
            )

    def results(self, timeout_s: float = 300.0) -> tuple[PromtoolResult, ...]:
        command = " ".join(["promtool", "test", "rules", *self._tests])
        if self._proc is None:
            return (
                self.check,
                PromtoolResult(command, False, "promtool not found on PATH", skipped=True),
            )
        try:
            output, _ = self._proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            output, _ = self._proc.communicate()
            return (self.check, PromtoolResult(command, False, f"timed out after {timeout_s:g} s"))
        return (self.check, PromtoolResult(command, self._proc.returncode == 0, output.strip()))

    def cancel(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()


def check_rules(files: RuleFiles, *, binary: str | None = None) -> tuple[PromtoolResult, ...]:
    """``promtool check rules`` on every rule file and ``promtool test rules`` on every test."""
    return RuleCheck(files, binary=binary).results()
