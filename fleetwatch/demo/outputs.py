"""The run's own files under the output folder: the SLO spec copy, traces, request records,
``report.html`` and ``summary.json``, and the sorted list of every file the demo writes.

Rules and dashboards are written by ``artifacts``; Prometheus' config and log by ``fleet_phase``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fleetwatch.core.atomic import atomic_write_text
from fleetwatch.demo.artifacts import RuleFiles
from fleetwatch.demo.spec import SPEC_PATH

__all__ = ["Outputs"]


class Outputs:
    """Paths of the run's files under ``out`` and the writers of each."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.spec = out / "slo.yaml"
        self.traces = out / "traces.jsonl"
        self.records = out / "records.parquet"
        self.report = out / "report.html"
        self.summary = out / "summary.json"

    def copy_spec(self) -> None:
        shutil.copyfile(SPEC_PATH, self.spec)

    def write_records(self, records: Any) -> None:
        from fleetwatch.records import write_records

        write_records(self.records, records)

    def write_report(self, summary: Mapping[str, Any], lines: Sequence[str]) -> None:
        from fleetwatch.demo.page import build_page

        atomic_write_text(self.report, build_page(summary, summary["slo"]["burn"], lines))

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        atomic_write_text(self.summary, json.dumps(summary, indent=2) + "\n")

    def listing(self, rule_files: RuleFiles, dashboards: Sequence[Path]) -> list[str]:
        """Every file the demo writes (Prometheus' copies aside), relative to ``out``, sorted."""
        return sorted(
            str(p.relative_to(self.out))
            for p in [
                *rule_files.rules,
                *rule_files.tests,
                *dashboards,
                self.traces,
                self.records,
                self.spec,
                self.summary,
                self.report,
            ]
        )
