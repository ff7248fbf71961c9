"""``fleet outliers --prometheus`` on a fleet's own label scheme, against a real Prometheus.

vLLM series as a Kubernetes fleet's Prometheus stores them: ``namespace``, ``pod`` and
``job`` labels besides vLLM's ``model_name``. Two models in ``llm-prod``: five replicas of
``small`` and four of ``big``, whose every latency is about three times ``small``'s; ``big-1``
is slower still. Beside them, series the scheme's matchers leave out: a ``job="batch"`` pod
serving ``small`` that is slower than anything, and a ``small`` pod in ``llm-dev``. Under the
scheme (replicas named ``namespace/pod``, ``job="vllm"``, ``namespace="llm-prod"``) the only
finding is ``llm-prod/big-1``, judged against ``big`` alone; pooled, the four ``big`` replicas
would all stand out.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from fleetwatch.cli import main
from fleetwatch.core.profiles import Signal, get_profile
from fleetwatch.core.profiles.labels import LabelScheme, parse_matcher_list
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.outliers import table_from_prometheus, tables_from_prometheus
from tests.prometheus_blocks import serving

T0 = 1_700_000_000
STEPS = 81  # 20 minutes at 15 s
AT = T0 + 15 * (STEPS - 1)
PER_STEP = 150  # requests a replica finishes per 15 s

LABELS = """\
replica: [namespace, pod]
routing: [namespace]
matchers: ['job="vllm"', 'namespace="llm-prod"']
"""


def _replica(labels: str, shift: int) -> list[str]:
    """One replica's series: every request in the latency bucket ``shift`` above the middle."""
    profile = get_profile("vllm")
    out = []
    for sig in (Signal.TTFT, Signal.TPOT, Signal.E2E):
        ref = profile.metric(sig)
        bounds = list(ref.buckets)
        i = len(bounds) // 2 - 3 + shift
        for le in [*bounds[max(0, i - 2) : i + 3], float("inf")]:
            n = PER_STEP if le >= bounds[i] else 0
            le_s = "+Inf" if le == float("inf") else repr(le)
            out += [
                f'{ref.name}_bucket{{{labels},le="{le_s}"}} {k * n} {T0 + 15 * k}'
                for k in range(STEPS)
            ]
    for reason, n in (("stop", PER_STEP), ("error", 0)):
        out += [
            f'vllm:request_success_total{{{labels},finished_reason="{reason}"}} {k * n} '
            f"{T0 + 15 * k}"
            for k in range(STEPS)
        ]
    out += [
        f"vllm:prompt_tokens_total{{{labels}}} {k * PER_STEP * 500} {T0 + 15 * k}"
        for k in range(STEPS)
    ]
    return out


def _openmetrics() -> str:
    out: list[str] = []
    members = [("small", f"small-{i}", 0) for i in range(5)]
    members += [("big", f"big-{i}", 3 + (2 if i == 1 else 0)) for i in range(4)]
    for n, (model, pod, shift) in enumerate(members):
        labels = (
            f'job="vllm",namespace="llm-prod",pod="{pod}",instance="10.0.0.{n}:8000",'
            f'model_name="{model}"'
        )
        out += _replica(labels, shift)
    batch = 'job="batch",namespace="llm-prod",pod="batch-0",instance="10.0.1.0:8000"'
    out += _replica(f'{batch},model_name="small"', 6)
    dev = 'job="vllm",namespace="llm-dev",pod="small-0",instance="10.0.2.0:8000"'
    out += _replica(f'{dev},model_name="small"', 6)
    return "\n".join([*out, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus_url(tmp_path_factory, promtool, prometheus_bin) -> Iterator[str]:
    with serving(tmp_path_factory.mktemp("prom"), _openmetrics(), promtool, prometheus_bin) as url:
        yield url


SCHEME = LabelScheme(
    replica=("namespace", "pod"),
    routing=("namespace",),
    matchers=parse_matcher_list(['job="vllm"', 'namespace="llm-prod"']),
)


def test_one_table_per_model_named_by_namespace_and_pod(prometheus_url):
    tables = tables_from_prometheus(
        prometheus_url, SCHEME.apply(get_profile("vllm")), window="5m", at=float(AT)
    )
    names = [name for name, _ in tables]
    assert names == ["model_name=big,namespace=llm-prod", "model_name=small,namespace=llm-prod"]
    big, small = (t for _, t in tables)
    assert list(big.replicas) == [f"llm-prod/big-{i}" for i in range(4)]
    assert list(small.replicas) == [f"llm-prod/small-{i}" for i in range(5)]


def test_the_cli_flags_only_the_slow_replica_of_its_own_model(prometheus_url, tmp_path, capsys):
    labels = tmp_path / "labels.yaml"
    labels.write_text(LABELS)
    argv = ["fleet", "outliers", "--prometheus", prometheus_url, "--profile", "vllm"]
    argv += ["--labels", str(labels), "--window", "5m", "--at", str(AT), "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    found = {(f["model"], f["replica"], f["signal"]) for m in doc["models"] for f in m["findings"]}
    assert {r for _, r, _ in found} == {"llm-prod/big-1"}
    assert {s for _, _, s in found} == {"ttft", "tpot", "e2e"}
    assert {m for m, _, _ in found} == {"model_name=big,namespace=llm-prod"}


def test_pooled_models_are_refused_by_the_one_table_reader(prometheus_url):
    with pytest.raises(AnalysisError, match=r"2 fleets \(big, small\)"):
        table_from_prometheus(
            prometheus_url,
            LabelScheme(replica=("namespace", "pod")).apply(get_profile("vllm")),
            window="5m",
            at=float(AT),
            selector='job="vllm",namespace="llm-prod"',
        )


def test_labels_without_prometheus_are_refused(tmp_path, capsys):
    labels = tmp_path / "labels.yaml"
    labels.write_text(LABELS)
    argv = ["fleet", "outliers", "--metrics-dir", str(tmp_path), "--labels", str(labels)]
    assert main(argv) == 2
    assert "--labels" in capsys.readouterr().err
