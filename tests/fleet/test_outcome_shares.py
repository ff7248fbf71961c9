"""``fleet outliers`` from Prometheus and from ``/metrics`` snapshots judges the output shape and
the failures by outcome, from the request counter's outcome series, by their counts, one fleet
per model.

vLLM series in a real Prometheus (promtool-backfilled, 10 minutes at 15 s): five replicas of
``small``, 10 % of whose answers are cut at ``max_tokens`` and 1 % aborted, and four of ``big``,
30 % of whose answers are cut. ``small-2`` cuts 30 % like ``big`` does, and ``small-4`` aborts
4 %: each is named by its share, replica-side; no replica of ``big`` is, though pooled with
``small`` all four would stand out. Snapshots of ``small``'s replicas (lifetime counts) name the
same two.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.core.profiles import Signal, get_profile
from fleetwatch.fleet.outliers import Cause, Side, detect, tables_from_prometheus
from fleetwatch.fleet.outliers.by_model import detect_tables, findings_of
from fleetwatch.fleet.outliers.signals import signal_spec
from fleetwatch.fleet.outliers.sources.snapshots import table_from_metrics_text
from tests.prometheus_blocks import ramp, serving

T0 = 1_700_000_000
STEPS = 41
AT = T0 + 15 * (STEPS - 1)
PER_STEP = 100  # requests a replica finishes per 15 s: 4,000 in the window

SHAPES = {
    **{f"small-{i}": ("small", 0.10, 0.01) for i in range(5)},
    **{f"big-{i}": ("big", 0.30, 0.01) for i in range(4)},
    "small-2": ("small", 0.30, 0.01),
    "small-4": ("small", 0.10, 0.04),
}
"""Per pod: its model, the share of answers cut at max_tokens, the share aborted."""


def _openmetrics() -> str:
    prof = get_profile("vllm")
    out: list[str] = []
    for n, (pod, (model, cut, abort)) in enumerate(sorted(SHAPES.items())):
        labels = f'pod="{pod}",instance="10.0.0.{n}:8000",model_name="{model}"'
        for sig in (Signal.TTFT, Signal.TPOT, Signal.E2E):
            ref = prof.metric(sig)
            mid = ref.buckets[len(ref.buckets) // 2]  # every request in one bucket
            for le_s in (repr(mid), "+Inf"):
                out += ramp(f'{ref.name}_bucket{{{labels},le="{le_s}"}}', PER_STEP, T0, STEPS)
        reasons = {"length": cut, "abort": abort, "error": 0.005}
        reasons["stop"] = 1.0 - sum(reasons.values())
        for reason, share in reasons.items():
            series = f'vllm:request_success_total{{{labels},finished_reason="{reason}"}}'
            out += ramp(series, PER_STEP * share, T0, STEPS)
    return "\n".join([*out, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus_url(
    tmp_path_factory: pytest.TempPathFactory, promtool: Path, prometheus_bin: Path
) -> Iterator[str]:
    with serving(tmp_path_factory.mktemp("prom"), _openmetrics(), promtool, prometheus_bin) as url:
        yield url


def test_shares_come_from_the_outcome_counts_of_each_replica(prometheus_url: str) -> None:
    tables = dict(
        tables_from_prometheus(prometheus_url, get_profile("vllm"), window="10m", at=float(AT))
    )
    small = tables["small"]
    assert {"truncated_share", "outcome=aborted", "error_rate"} <= small.counted
    assert small.values.loc["10.0.0.6:8000", "truncated_share"] == pytest.approx(0.3, abs=0.002)
    assert small.values.loc["10.0.0.8:8000", "outcome=aborted"] == pytest.approx(0.04, abs=0.001)
    assert small.stderr is not None
    assert small.stderr.loc["10.0.0.5:8000", "truncated_share"] == pytest.approx(
        (0.14 * 0.86 / 4000) ** 0.5, rel=0.02
    )


def test_an_outcome_share_is_named_and_described_by_its_outcome_and_judged_as_errors_are() -> None:
    """An abort is a status of its own, not a kind of error: ``outcome=aborted``, never the
    records' ``error_type=<kind>`` (a subtype of status error)."""
    spec, errors = signal_spec("outcome=aborted"), signal_spec("error_rate")
    assert spec.description == "share of requests that ended as 'aborted'"
    assert (spec.family, spec.gate, spec.min_effect, spec.worse) == (
        errors.family,
        errors.gate,
        errors.min_effect,
        errors.worse,
    )
    assert (
        signal_spec("error_type=oom").description == "share of requests that ended in error 'oom'"
    )


def test_the_replica_cutting_answers_and_the_one_aborting_are_named_within_their_model(
    prometheus_url: str,
) -> None:
    tables = tables_from_prometheus(prometheus_url, get_profile("vllm"), window="10m", at=float(AT))
    found = {
        (f.replica, f.signal, f.side, f.cause)
        for f in findings_of(detect_tables(tables))  # type: ignore[arg-type]
    }
    assert found == {
        ("10.0.0.6:8000", "truncated_share", Side.REPLICA, Cause.OUTPUT_SHAPE),
        ("10.0.0.8:8000", "outcome=aborted", Side.REPLICA, Cause.REPLICA_ERRORS),
    }


def test_the_cli_reports_the_shape_finding_from_prometheus(
    prometheus_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["fleet", "outliers", "--prometheus", prometheus_url, "--profile", "vllm"]
    assert main([*argv, "--window", "10m", "--at", str(AT), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    found = {(m["model"], f["replica"], f["signal"]) for m in doc["models"] for f in m["findings"]}
    assert found == {
        ("small", "10.0.0.6:8000", "truncated_share"),
        ("small", "10.0.0.8:8000", "outcome=aborted"),
    }


def _snapshot(model: str, cut: float, abort: float, n: int = 4000) -> str:
    """One replica's vLLM ``/metrics`` text: ``n`` requests in one latency bucket."""
    prof = get_profile("vllm")
    labels = f'model_name="{model}"'
    lines = []
    for sig in (Signal.TTFT, Signal.TPOT, Signal.E2E):
        ref = prof.metric(sig)
        mid = ref.buckets[len(ref.buckets) // 2]
        lines += [f"# TYPE {ref.name} histogram"]
        lines += [f'{ref.name}_bucket{{{labels},le="{le}"}} {n}' for le in (repr(mid), "+Inf")]
        lines += [f"{ref.name}_count{{{labels}}} {n}", f"{ref.name}_sum{{{labels}}} {n * mid}"]
    reasons = {"length": cut, "abort": abort, "error": 0.005}
    reasons["stop"] = 1.0 - sum(reasons.values())
    lines.append("# TYPE vllm:request_success counter")
    lines += [
        f'vllm:request_success_total{{{labels},finished_reason="{r}"}} {round(n * share)}'
        for r, share in reasons.items()
    ]
    return "\n".join([*lines, ""])


def test_snapshots_name_the_same_replicas_by_their_lifetime_counts() -> None:
    texts = {
        pod: _snapshot(m, cut, abort) for pod, (m, cut, abort) in SHAPES.items() if m == "small"
    }
    table = table_from_metrics_text(texts, get_profile("vllm"))
    assert {"truncated_share", "outcome=aborted"} <= table.counted
    found = {(f.replica, f.signal, f.cause) for f in detect(table).findings}
    assert found == {
        ("small-2", "truncated_share", Cause.OUTPUT_SHAPE),
        ("small-4", "outcome=aborted", Cause.REPLICA_ERRORS),
    }
