"""The fleet lines: recorded beside the operational alerts, read by the fleet view, and in a real
promtool each model's quantile of the buckets summed over its replicas (worked out here from the
test's own buckets), one line per model and per label scheme."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from fleetwatch.core.profiles import Profile, Signal, get_profile
from fleetwatch.core.profiles.labels import LabelScheme, parse_matcher_list
from fleetwatch.core.promql import format_le, quote
from fleetwatch.core.rules import (
    ExpectedSample,
    ExprCase,
    InputSeries,
    RecordingRule,
    RuleTest,
    RuleTestFile,
)
from fleetwatch.dashboards.alerts import render_yaml, rules_document
from fleetwatch.dashboards.promql import TEMPLATE_VALUES, Scope, concrete
from fleetwatch.dashboards.recordings import (
    FLEET_QUANTILES,
    fleet_recording_names,
    fleet_recordings,
    recorded,
)
from fleetwatch.dashboards.views.common import LATENCY_SIGNALS
from fleetwatch.dashboards.views.fleet import fleet_rows
from tests.promtool_run import promtool_test

PROFILES = ("fleetwatch", "vllm", "sglang")

# Each replica's requests a minute in the histogram's first three buckets (not cumulative; none
# above them). Summed per model: a [5, 2, 4], b [3, 4, 6]; the two models' shapes differ from
# each other and from the whole fleet's [8, 6, 10], so a line summed over the wrong replicas
# has another value.
PER_MINUTE: Mapping[tuple[str, int], tuple[int, int, int]] = {
    ("a", 0): (5, 0, 0),
    ("a", 1): (0, 2, 4),
    ("b", 0): (1, 3, 0),
    ("b", 1): (2, 1, 6),
}
MODELS = ("a", "b")


def histogram_quantile(q: float, bounds: Sequence[float], cumulative: Sequence[float]) -> float:
    """Prometheus's ``histogram_quantile`` of cumulative bucket counts at upper ``bounds`` (the
    last +Inf): the rank ``q`` × total falls in the first bucket whose count reaches it, and
    the value is interpolated linearly within that bucket (the first one's lower bound is 0);
    a rank in the +Inf bucket gives the highest finite bound."""
    rank = q * cumulative[-1]
    b = next(i for i, count in enumerate(cumulative) if count >= rank)
    if b == len(bounds) - 1:
        return bounds[-2]
    lower, below = (0.0, 0.0) if b == 0 else (bounds[b - 1], cumulative[b - 1])
    return lower + (bounds[b] - lower) * (rank - below) / (cumulative[b] - below)


def _cumulative(per_bucket: Sequence[int]) -> list[int]:
    """Counts at each finite bound and +Inf (nothing lands above the finite ones)."""
    out = [sum(per_bucket[: k + 1]) for k in range(len(per_bucket))]
    return [*out, out[-1]]


def _model_line(
    q: float,
    bounds: Sequence[float],
    model: str,
    per_minute: Mapping[tuple[str, int], Sequence[int]],
) -> float:
    """The fleet line of ``model``: the quantile of its replicas' buckets, summed."""
    replicas = [v for (m, _), v in per_minute.items() if m == model]
    summed = [sum(c) for c in zip(*replicas, strict=True)]
    return histogram_quantile(q, bounds, _cumulative(summed))


def test_the_tests_quantile_interpolates_as_worked_by_hand() -> None:
    """Bounds 1, 2, 4: model a's [5, 2, 4] a minute has its median at rank 5.5, half a request
    into (1, 2], which holds 2: 1.25; its p99 at rank 10.89, 3.89 of the 4 into (2, 4]:
    3.945. Model b's [3, 4, 6]: rank 6.5, 3.5 of 4 into (1, 2]: 1.875. A rank in the first
    bucket starts from 0; one past the finite buckets reads the highest bound."""
    bounds = (1.0, 2.0, 4.0, math.inf)
    assert histogram_quantile(0.5, bounds, _cumulative([5, 2, 4])) == pytest.approx(1.25)
    assert histogram_quantile(0.99, bounds, _cumulative([5, 2, 4])) == pytest.approx(3.945)
    assert histogram_quantile(0.5, bounds, _cumulative([3, 4, 6])) == pytest.approx(1.875)
    assert histogram_quantile(0.25, bounds, _cumulative([8, 0, 0])) == pytest.approx(0.25)
    assert histogram_quantile(0.99, bounds, (1, 1, 1, 2)) == 4.0
    assert _model_line(0.5, bounds, "a", PER_MINUTE) == pytest.approx(1.25)
    assert _model_line(0.5, bounds, "b", PER_MINUTE) == pytest.approx(1.875)


@pytest.mark.parametrize("name", PROFILES)
def test_the_fleet_view_reads_its_fleet_lines_from_the_recordings(name: str) -> None:
    profile = get_profile(name)
    group = fleet_recordings(profile)
    assert group is not None
    assert group in rules_document(profile).groups
    records = {r.record for r in group.rules if isinstance(r, RecordingRule)}
    read = {
        q.expr.partition("{")[0]
        for row in fleet_rows(profile)
        for panel in row.panels
        if panel.title.endswith("fleet p50 and p99")
        for q in panel.queries
    }
    expected = {
        recorded(s, q) for s, _ in LATENCY_SIGNALS if profile.has(s) for q in FLEET_QUANTILES
    }
    assert read == records == expected == fleet_recording_names(profile)
    text = render_yaml(rules_document(profile))
    assert "_bucket" in text and "$" not in text.split("fleet", 1)[1].split("alert:")[0]


def _signals(profile: Profile) -> list[Signal]:
    return [s for s, _ in LATENCY_SIGNALS if profile.has(s)]


def _bounds(profile: Profile, signal: Signal) -> tuple[float, ...]:
    return (*profile.metric(signal).buckets[:3], math.inf)


def _input(
    profile: Profile, per_minute: Mapping[tuple[str, int], Sequence[int]]
) -> list[InputSeries]:
    """Every latency histogram's bucket series of each replica in ``per_minute``, labelled as
    the profile's scheme labels its series, counting from 0 each minute for ten minutes."""
    out = []
    for signal in _signals(profile):
        ref = profile.metric(signal)
        for (model, r), per_bucket in per_minute.items():
            labels = profile.series_labels(model, f"{model}{r}")
            for le, step in zip(_bounds(profile, signal), _cumulative(per_bucket), strict=True):
                text = ",".join(
                    f"{k}={quote(v)}" for k, v in {**labels, "le": format_le(le)}.items()
                )
                out.append(InputSeries(f"{ref.name}_bucket{{{text}}}", f"0+{step}x10"))
    return out


def _lines(
    profile: Profile,
    q: float,
    signal: Signal,
    per_minute: Mapping[tuple[str, int], Sequence[int]],
    fixed: Mapping[str, str],
) -> tuple[ExpectedSample, ...]:
    """One recorded line per model: named, labelled with the profile, the model and ``fixed``,
    its value worked out here from ``per_minute``."""
    bounds = _bounds(profile, signal)
    out = []
    for model in MODELS:
        labels = {"profile": profile.name, profile.model_label: model, **fixed}
        text = ",".join(f"{k}={quote(v)}" for k, v in labels.items())
        value = _model_line(q, bounds, model, per_minute)
        out.append(ExpectedSample(f"{recorded(signal, q)}{{{text}}}", value))
    return tuple(out)


def _test_file(
    files: Sequence[str], series: Sequence[InputSeries], cases: Sequence[ExprCase]
) -> str:
    """Each of ``cases`` evaluated at 10 minutes of ``series``, under the rules in ``files``."""
    test = RuleTest("1m", tuple(series), (), tuple(cases))
    return render_yaml(RuleTestFile(tuple(files), "1m", (test,)))


@pytest.mark.promtool
@pytest.mark.parametrize("name", PROFILES)
def test_each_models_recorded_line_is_the_quantile_of_its_replicas_summed_buckets(
    promtool: Path, tmp_path: Path, name: str
) -> None:
    """Two models of two replicas each: every recorded quantile has one series per model, with
    the profile's label, whose value is the quantile of that model's replicas' buckets summed,
    interpolated within the bucket as Prometheus does (computed here, not by the rule's own
    expression)."""
    profile = get_profile(name)
    (tmp_path / "ops.rules.yaml").write_text(render_yaml(rules_document(profile)))
    cases = [
        ExprCase(recorded(signal, q), "10m", _lines(profile, q, signal, PER_MINUTE, {}))
        for signal in _signals(profile)
        for q in FLEET_QUANTILES
    ]
    text = _test_file(["ops.rules.yaml"], _input(profile, PER_MINUTE), cases)
    done = promtool_test(promtool, tmp_path, text)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_recorded_lines_keep_the_schemes_fixed_labels_and_the_view_selects_on_them() -> None:
    """Equality matchers' labels are kept by the rule and selected on by the view; a regex on a
    routing label is applied to the recorded series; one on a label the series drops is not."""
    scheme = LabelScheme(
        replica=("namespace", "pod"),
        routing=("namespace",),
        matchers=parse_matcher_list(('job="vllm"', 'namespace=~"llm-.*"', 'instance!~"canary-.*"')),
    )
    scope = Scope(scheme.apply(get_profile("vllm")))
    group = fleet_recordings(scope.profile)
    assert group is not None
    assert "sum by (le, model_name, namespace, job) (rate(" in group.rules[0].expr
    assert scope.recorded("fleet:x") == (
        'fleet:x{profile="vllm",job="vllm",namespace=~"llm-.*",model_name=~"$model",'
        'namespace=~"$namespace"}'
    )


def _scheme(namespace: str) -> LabelScheme:
    return LabelScheme(matchers=parse_matcher_list(('job="vllm"', f'namespace="{namespace}"')))


@pytest.mark.promtool
def test_two_schemes_rules_in_one_prometheus_write_distinct_lines_and_each_view_reads_its_own(
    promtool: Path, tmp_path: Path
) -> None:
    """Prod's and staging's rules for the vLLM profile (``namespace="a"`` and ``"b"``), loaded
    together over both namespaces' buckets: each writes its own lines, labelled with its
    namespace, and the fleet view's query under each scheme reads only its own. Namespace b's
    models swap a's traffic, so the two schemes' lines differ."""
    mirrored = {(("b", "a")[MODELS.index(m)], r): v for (m, r), v in PER_MINUTE.items()}
    traffic = {"a": PER_MINUTE, "b": mirrored}
    view = {**TEMPLATE_VALUES, "model": "a|b"}
    files, series, cases = [], [], []
    both: dict[tuple[Signal, float], tuple[ExpectedSample, ...]] = {}
    for namespace, per_minute in traffic.items():
        profile = _scheme(namespace).apply(get_profile("vllm"))
        files.append(f"{namespace}.rules.yaml")
        (tmp_path / files[-1]).write_text(render_yaml(rules_document(profile)))
        series += _input(profile, per_minute)
        fixed = {"job": "vllm", "namespace": namespace}
        for signal in _signals(profile):
            for q in FLEET_QUANTILES:
                own = _lines(profile, q, signal, per_minute, fixed)
                query = concrete(Scope(profile).recorded(recorded(signal, q)), view)
                cases.append(ExprCase(query, "10m", own))
                both[signal, q] = both.get((signal, q), ()) + own
    cases += [ExprCase(recorded(s, q), "10m", lines) for (s, q), lines in both.items()]
    done = promtool_test(promtool, tmp_path, _test_file(files, series, cases))
    assert done.returncode == 0, done.stdout + done.stderr
