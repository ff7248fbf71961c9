"""The Prometheus HTTP source against a real Prometheus server on 127.0.0.1.

History is backfilled with ``promtool tsdb create-blocks-from openmetrics`` at fixed timestamps,
so the queries (evaluated at a fixed time) are deterministic.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fleetwatch.core.profiles import Signal, get_profile
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.outliers import Cause, Side, detect, table_from_prometheus
from tests.prometheus_blocks import free_port, serving

T0 = 1_700_000_000
STEPS = 81  # 20 minutes at 15 s
AT = T0 + 15 * (STEPS - 1)


def _openmetrics() -> str:
    p = get_profile("fleetwatch")
    out: list[str] = []
    per_step = 150  # 10 requests per second
    for r in range(5):
        labels = f'replica="r{r}",model="m"'
        for sig in (Signal.TTFT, Signal.TPOT, Signal.E2E):
            ref = p.metric(sig)
            bounds = list(ref.buckets)
            slow = r == 3 or (r == 4 and sig is Signal.TTFT)  # r4: long prompts
            i = len(bounds) // 2 + (1 if slow else 0)
            for le in [*bounds[i - 2 : i + 3], float("inf")]:
                n = per_step if le >= bounds[i] else 0
                le_s = "+Inf" if le == float("inf") else repr(le)
                out += [
                    f'{ref.name}_bucket{{{labels},le="{le_s}"}} {k * n} {T0 + 15 * k}'
                    for k in range(STEPS)
                ]
        errors = 15 if r == 1 else 0
        out += [
            f'fleetwatch_requests_total{{{labels},status="ok"}} {k * (per_step - errors)} {T0 + 15 * k}'
            for k in range(STEPS)
        ]
        out += [
            f'fleetwatch_requests_total{{{labels},status="error"}} {k * errors} {T0 + 15 * k}'
            for k in range(STEPS)
        ]
        prompt = 2000 if r == 4 else 500
        out += [
            f"fleetwatch_prompt_tokens_total{{{labels}}} {k * per_step * prompt} {T0 + 15 * k}"
            for k in range(STEPS)
        ]
        version = "0.8.0" if r == 2 else "0.9.0"
        out += [
            f'fleetwatch_build_info{{{labels},version="{version}"}} 1 {T0 + 15 * k}'
            for k in range(STEPS)
        ]
    return "\n".join([*out, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory, promtool, prometheus_bin) -> Iterator[str]:
    with serving(tmp_path_factory.mktemp("prom"), _openmetrics(), promtool, prometheus_bin) as url:
        yield url


def test_prometheus_source_judges_replicas_and_names_causes(prometheus_url):
    table = table_from_prometheus(
        prometheus_url, get_profile("fleetwatch"), window="5m", at=float(AT)
    )
    assert list(table.replicas) == ["r0", "r1", "r2", "r3", "r4"]
    report = detect(table)
    by = {(f.replica, f.signal): f for f in report.findings}
    assert {s for r, s in by if r == "r3"} == {"ttft", "tpot", "e2e"}
    assert by[("r3", "ttft")].side is Side.REPLICA
    assert by[("r1", "error_rate")].value == pytest.approx(0.1)
    assert by[("r2", "config")].cause is Cause.CONFIG_DRIFT
    assert {s for r, s in by if r == "r4"} == {"ttft"}
    assert by[("r4", "ttft")].side is Side.WORKLOAD
    assert by[("r4", "ttft")].cause is Cause.PROMPT_LENGTH_MIX
    assert not any(f.replica == "r0" for f in report.findings)


def test_prometheus_source_with_no_series_is_an_analysis_error(prometheus_url):
    with pytest.raises(
        AnalysisError, match=r"no vllm:request_success_total or latency series .*fleetwatch series"
    ):
        table_from_prometheus(prometheus_url, get_profile("vllm"), at=float(AT))


def test_unreachable_prometheus_is_an_analysis_error():
    with pytest.raises(AnalysisError, match="cannot reach Prometheus"):
        table_from_prometheus(f"http://127.0.0.1:{free_port()}", get_profile("fleetwatch"))
