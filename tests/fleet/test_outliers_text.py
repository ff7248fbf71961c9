"""What an on-call reads first from ``fleet outliers``: one line per flagged replica (its worst
finding's side and cause, every signal it stands out on) and the next step for that cause;
every finding with its evidence under ``--verbose``; the JSON unchanged by either."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fleetwatch.cli import main
from fleetwatch.core.records import RequestRecord, write_records
from fleetwatch.fleet.outliers import detect, table_from_records
from fleetwatch.fleet.outliers.judging.causes import Cause
from fleetwatch.fleet.outliers.report import NEXT_STEP
from fleetwatch.records.io import to_frame


def _fleet(n: int = 400, slow: str = "replica-3") -> list[RequestRecord]:
    """Six replicas alike but one, whose decode is 2x slower (seeded)."""
    rng = np.random.default_rng(7)
    rows = []
    for r in range(6):
        name = f"replica-{r}"
        factor = 2.0 if name == slow else 1.0
        for i in range(n):
            arrival = i * 0.5 + rng.uniform(0, 0.1)
            scheduled = arrival + rng.uniform(0.001, 0.01)
            first = scheduled + rng.lognormal(np.log(0.05), 0.2)
            out = 64
            finished = first + factor * (out - 1) * rng.lognormal(np.log(0.02), 0.1)
            rows.append(
                RequestRecord(
                    request_id=f"{name}-{i}", replica=name, model="m", arrival_s=arrival,
                    scheduled_s=scheduled, first_token_s=first, finished_s=finished,
                    prompt_tokens=512, output_tokens=out,
                )
            )  # fmt: skip
    return rows


def test_one_line_per_replica_with_its_next_step() -> None:
    report = detect(table_from_records(to_frame(_fleet())))
    assert report.findings and {f.replica for f in report.findings} == {"replica-3"}
    text = report.render().splitlines()
    lines = [line for line in text if line.startswith("  replica-3  ")]
    assert len(lines) == 1  # however many signals it stands out on
    worst = report.findings[0]
    assert f"{worst.side.value}-side: {worst.cause.value}" in lines[0]
    assert all(f.signal in lines[0] for f in report.findings)
    assert f"      next: {NEXT_STEP[worst.cause]}" in text
    assert not any(line.startswith("       - ") for line in text)  # evidence only when asked


def test_verbose_lists_every_finding_with_its_evidence(tmp_path: Path, capsys) -> None:
    path = tmp_path / "records.parquet"
    write_records(path, _fleet())
    assert main(["fleet", "outliers", str(path), "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "  1. replica-3  " in out and "       - " in out and "next:" not in out
    assert main(["fleet", "outliers", str(path), "--json", "--verbose"]) == 0
    verbose_doc = json.loads(capsys.readouterr().out)
    assert main(["fleet", "outliers", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == verbose_doc


def test_every_cause_has_a_next_step() -> None:
    assert set(NEXT_STEP) == set(Cause)
