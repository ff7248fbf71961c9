"""Exit statuses that tell the truth: failed probe requests are shown by cause (all failed is an
error), an engine run that cannot serve its workload is refused, empty inputs are errors unless
allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleetwatch.cli import main
from fleetwatch.engine_probe.probe.failures import failure_causes, failure_text
from fleetwatch.engine_probe.probe.measure import RequestResult
from fleetwatch.engine_probe.probe.runner import LevelResult, ProbePlan, ProbeRun
from fleetwatch.engine_probe.probe.stats import summarise


def _result(i: int, *, error: str | None = None, http: int | None = None) -> RequestResult:
    status = "ok" if error is None and http is None else "error"
    return RequestResult(
        index=i,
        request_id=f"r{i}",
        scheduled_s=float(i),
        sent_s=float(i),
        finished_s=i + 0.5,
        first_token_s=None if status != "ok" else i + 0.1,
        chunk_times_s=() if status != "ok" else (i + 0.1, i + 0.2),
        chunk_tokens=() if status != "ok" else (1, 1),
        output_tokens=0 if status != "ok" else 2,
        status=status,
        http_status=http,
        error=error,
    )


def _run(results: list[RequestResult]) -> ProbeRun:
    plan = ProbePlan(levels=(1,), requests=len(results))
    summary = summarise(results, label="c=1", mode="closed", concurrency=1)
    return ProbeRun("http://h:9", plan, (LevelResult(1, tuple(results), summary),), 0.0)


def test_failures_are_counted_by_cause_most_frequent_first() -> None:
    run = _run(
        [
            _result(0),
            _result(1, error="HTTP 500: boom"),
            _result(2, error="HTTP 500: boom"),
            _result(3, error="ClientConnectorError: refused"),
            _result(4, http=503),
        ]
    )
    failed, total, causes = failure_causes(run)
    assert (failed, total) == (4, 5)
    assert causes[0] == ("HTTP 500: boom", 2)
    assert sorted(causes[1:]) == [("ClientConnectorError: refused", 1), ("HTTP 503", 1)]
    assert failure_text(causes, top=1) == "HTTP 500: boom (x2); 2 other cause(s)"


def _probe(monkeypatch: pytest.MonkeyPatch, run: ProbeRun, *extra: str) -> int:
    import fleetwatch.engine_probe.probe.runner as runner

    async def fake_run_plan(*args: Any, **kwargs: Any) -> ProbeRun:
        return run

    monkeypatch.setattr(runner, "run_plan", fake_run_plan)
    return main(["probe", "run", "http://h:9", "-n", "3", "--no-progress", *extra])


def test_a_run_with_some_failures_prints_them_and_exits_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run([_result(0), _result(1), _result(2, error="HTTP 429: queue full")])
    assert _probe(monkeypatch, run) == 0
    out = capsys.readouterr().out
    assert "1 of 3 requests failed:" in out
    assert "1  HTTP 429: queue full" in out


def test_a_run_where_every_request_failed_exits_2_naming_the_causes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run = _run([_result(i, error="ClientConnectorError: refused") for i in range(3)])
    records = tmp_path / "r.jsonl"
    assert _probe(monkeypatch, run, "--records", str(records)) == 2
    err = capsys.readouterr().err
    assert err == ("fleetwatch: error: all 3 requests failed: ClientConnectorError: refused (x3)\n")
    assert records.read_text().count("\n") == 3  # the failed requests are still recorded, whole


def test_an_empty_records_file_is_accepted_only_when_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    assert main(["records", "validate", str(path)]) == 2
    assert "--allow-empty" in capsys.readouterr().err
    assert main(["records", "validate", str(path), "--allow-empty"]) == 0
    assert "rows      0" in capsys.readouterr().out


def test_an_engine_run_that_leaves_requests_unfinished_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import fleetwatch.engine_probe.engine.workload as workload

    real = workload.run_offline

    def stop_early(engine: Any, items: Any, sampling: Any = None, max_steps: Any = None) -> Any:
        return real(engine, items, sampling, max_steps=1)

    monkeypatch.setattr(workload, "run_offline", stop_early)
    assert main(["engine", "run", "-n", "2", "--prompt-len", "8", "--max-tokens", "4"]) == 2
    captured = capsys.readouterr()
    assert "requests:        0/2 completed" in captured.out
    assert captured.err == "fleetwatch: error: only 0 of 2 requests completed in 1 steps\n"
