"""Parts of the generated outlier rules: which latency histograms a profile has, the recorded
series' names, the set of replicas compared with each other, and the alerts' annotations."""

from __future__ import annotations

from typing import Any

from fleetwatch.core.profiles import MetricRef, Profile, Signal
from fleetwatch.core.profiles.types import by
from fleetwatch.core.promql import format_matchers
from fleetwatch.core.rules import InputSeries, RecordingRule, Rule
from fleetwatch.core.rules.unittests import rendered as render_template
from fleetwatch.fleet.outliers.sources.exposition import LATENCY_SOURCES, ref_labels

__all__ = [
    "RUNBOOK_PAGE",
    "alert_annotations",
    "counter",
    "fleet_of",
    "kept",
    "latency_refs",
    "names",
    "ok_label",
    "peer_records",
    "rendered",
    "replica_match",
    "series_name",
    "test_labels",
]

RUNBOOK_PAGE = "replica-outlier.md"


def latency_refs(profile: Profile) -> list[tuple[str, MetricRef]]:
    out = []
    for name, sigs in LATENCY_SOURCES:
        for s in sigs:
            if profile.has(s) and profile.metric(s).kind == "histogram":
                out.append((name, profile.metric(s)))
                break
    return out


def names(signal: str, w: str) -> dict[str, str]:
    base = f"fleet_{signal}_seconds" if signal != "error" else "fleet_error"
    stat = f"p50_{w}" if signal != "error" else f"ratio_{w}"
    return {
        "replica": f"replica:{base}:{stat}",
        "median": f"fleet:{base}:{stat}_median",
        "mad": f"fleet:{base}:{stat}_mad",
        "scale": f"fleet:{base}:{stat}_scale",
        "ratio": f"replica:{base}:{stat}_ratio_to_median",
        "z": f"replica:{base}:{stat}_robust_z",
        "top": f"fleet:{base}:{stat}_median_bucket_top",
    }


def peer_records(profile: Profile, o: Any, records: list[Rule]) -> str:
    """Append the record of the replicas that are compared with each other (``…_peers``, value:
    their request rate) and return its name: serving at least ``min_rate_per_s``, and, when the
    profile counts prompt tokens, sent a prompt mix within ``mix_ratio`` (either way) of their
    fleet's median prompt tokens per request (recorded before it)."""
    rs, fs, w = by(profile.replica_set), by(profile.fleet_labels), o.window
    volume = f"replica:fleet_requests:rate{w}"
    serving = f"{volume} >= {o.min_rate_per_s:g}"
    peers = f"replica:fleet_requests:rate{w}_peers"
    if not profile.has(Signal.PROMPT_TOKENS):
        records.append(RecordingRule(peers, serving))
        return peers
    per_request = f"replica:fleet_prompt_tokens:per_request_{w}"
    median = f"fleet:fleet_prompt_tokens:per_request_{w}_median"
    ratio = f"replica:fleet_prompt_tokens:per_request_{w}_ratio_to_median"
    tokens = profile.metric(Signal.PROMPT_TOKENS).selector()
    records += [
        RecordingRule(
            per_request,
            f"sum by ({rs}) (rate({tokens}[{w}])) / on ({rs}) ({volume} > 0)",
        ),
        RecordingRule(median, f"quantile by ({fs}) (0.5, {per_request})"),
        RecordingRule(ratio, f"{per_request} / on ({fs}) group_left () ({median} > 0)"),
    ]
    k = o.mix_ratio
    records.append(
        RecordingRule(peers, f"{serving} unless on ({rs}) ({ratio} > {k:g} or {ratio} < {1 / k:g})")
    )
    return peers


def alert_annotations(profile: Profile, o: Any, signal: str, shown: str) -> dict[str, str]:
    """The outlier alert's annotations: its value in the summary, the command to run against
    the Prometheus that holds the series (``links.prometheus``, else the evaluating server's
    ``$externalURL``), the runbook and the replica's drill-down dashboard."""
    r, m = profile.replica_ref(), profile.model_label
    links = profile.links
    variables = {"model": f"{{{{ $labels.{m} | urlquery }}}}"}
    variables["replica"] = f"{{{{ $labels.{profile.replica_label} | urlquery }}}}"
    return {
        "summary": f"Replica {r} {signal} is {shown} its fleet median",
        "description": (
            f"{r} ({{{{ $labels.{m} }}}}) stands out from its peers on "
            f"{signal} over {o.window} (robust z > {o.z_cutoff:g}). Run `fleetwatch fleet "
            f"outliers --prometheus {links.outliers_url()} --profile {profile.name}` to see "
            "whether the replica or its traffic is to blame."
        ),
        "runbook_url": o.runbook_url or links.runbook(RUNBOOK_PAGE),
        "dashboard_url": links.dashboard(f"fleetwatch-{profile.name}-replica", variables),
    }


def rendered(
    profile: Profile, o: Any, signal: str, shown: str, labels: dict[str, str]
) -> dict[str, str]:
    """The annotations as promtool renders them for one alert (for the test's expectations)."""
    annotations = alert_annotations(profile, o, signal, shown)
    return {k: render_template(v, labels) for k, v in annotations.items()}


def test_labels(profile: Profile, model: str, replica: str) -> dict[str, str]:
    """A test series' labels: the model's first, then the replica's, routing and the scheme's
    (``{model_name: model, instance: replica}`` under the default scheme)."""
    return {profile.model_label: model, **profile.series_labels(model, replica)}


def kept(profile: Profile, labels: dict[str, str]) -> dict[str, str]:
    """The labels of ``labels`` that a per-replica record (and the alert) keeps."""
    return {k: labels[k] for k in profile.replica_set if k in labels}


def fleet_of(profile: Profile, labels: dict[str, str]) -> dict[str, str]:
    """The labels of ``labels`` that a per-fleet record keeps."""
    return {k: labels[k] for k in profile.fleet_labels if k in labels}


def replica_match(profile: Profile, labels: dict[str, str]) -> str:
    """Matchers selecting one replica's records (``{instance="replica-3"}``)."""
    return (
        "{" + format_matchers({k: labels[k] for k in profile.replica_labels if k in labels}) + "}"
    )


def ok_label(bad: MetricRef) -> dict[str, str]:
    """The label set of the non-error share of a counter split by a status-like label."""
    labels = ref_labels(bad)
    return {k: ("ok" if k == "status" else "stop") for k in labels}


def series_name(name: str, labels: dict[str, str]) -> str:
    """A series as promtool's input and expectations spell it: ``name{labels}``."""
    return f"{name}{{{format_matchers(labels)}}}"


def counter(name: str, labels: dict[str, str], per_step: int, steps: int) -> InputSeries:
    """A promtool input series counting up by ``per_step`` for ``steps`` samples."""
    return InputSeries(series_name(name, labels), f"0+{per_step}x{steps}")
