"""Command line for this package; composed into `fleetwatch` by the front door.

Heavy modules (pandas, scipy, numpy) are imported inside the commands so ``fleetwatch --help``
stays fast.
"""

from __future__ import annotations

import json
import math
import os
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import typer

from fleetwatch.core.kubernetes import PROMETHEUS_RULE_HELP, RULE_LABEL_HELP, RULE_NAMESPACE_HELP
from fleetwatch.core.profiles.labels import LABELS_HELP
from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.fleet.rowcap import DEFAULT_MAX_ROWS
from fleetwatch.records.options import (
    ENGINE_OPTION,
    FILTER_OPTIONS,
    SKIP_BAD_HELP,
    SPARK_MASTER_OPTION,
    OnceEach,
    filter_from_options,
    open_and_say,
    say_what_was_read,
)

if TYPE_CHECKING:
    from fleetwatch.records.dataset import Dataset
    from fleetwatch.records.filters import RecordFilter

__all__ = ["app"]

app = typer.Typer(
    help="Fleet diagnosis: slow replicas, p99 tails, run comparison.", no_args_is_help=True
)


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    return obj


def _emit(doc: dict[str, Any], text: str, as_json: bool) -> None:
    typer.echo(json.dumps(_clean(doc), indent=2, sort_keys=False) if as_json else text)


def _fingerprints(path: Path | None) -> Any:
    if path is None:
        return None
    import pandas as pd

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise AnalysisError(f"{path}: not a readable JSON file ({exc})") from None
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise AnalysisError(
            f"{path}: expected {{replica: {{key: value, ...}}, ...}} "
            "(e.g. engine_version, model_revision, flags)"
        )
    return pd.DataFrame({r: {k: str(v) for k, v in d.items()} for r, d in doc.items()}).T


RECORDS_HELP = (
    "Request records: files (.jsonl or .parquet), directories (every *.jsonl and *.parquet under "
    "them) or quoted globs ('runs/**/*.jsonl'), read as one dataset."
)
_SKIP_BAD = typer.Option(False, "--skip-bad", help=SKIP_BAD_HELP)


_SINCE = FILTER_OPTIONS["since"]
_UNTIL = FILTER_OPTIONS["until"]
_MODEL = FILTER_OPTIONS["model"]
_TRAFFIC_CLASS = FILTER_OPTIONS["traffic_class"]
_REPLICA = FILTER_OPTIONS["replica"]


def _dataset(
    paths: list[Path],
    *,
    max_rows: int | None,
    skip_bad: bool,
    where: RecordFilter | None = None,
) -> Dataset:
    """The dataset ``paths`` name (only the records ``where`` keeps), refused over ``max_rows``
    (counted before the filter) before it is read; the files left out as bad are counted on
    stderr, and so are the records a filter kept."""
    from fleetwatch.fleet.rowcap import check_rows
    from fleetwatch.records.dataset import describe, read_dataset, resolve

    files = resolve(paths)
    if max_rows is not None:
        check_rows(describe(paths, files), files, max_rows)
    data = read_dataset(files, skip_bad=skip_bad, where=where)
    say_what_was_read(data, describe(paths, files), where)
    return data


@app.command("outliers", cls=OnceEach)
def outliers(
    records: list[Path] | None = typer.Argument(None, help=RECORDS_HELP),
    prometheus: str | None = typer.Option(None, "--prometheus", help="Prometheus base URL."),
    metrics_dir: Path | None = typer.Option(
        None, "--metrics-dir", help="Directory of per-replica /metrics snapshots (<replica>.prom)."
    ),
    profile: str = typer.Option("fleetwatch", help="Metric profile for Prometheus/metrics input."),
    window: str = typer.Option("10m", help="Prometheus rate window."),
    at: float | None = typer.Option(None, help="Prometheus evaluation time (Unix seconds)."),
    selector: str = typer.Option("", help='Extra label matchers, e.g. model="llama".'),
    quantile: float = typer.Option(0.5, help="Latency quantile compared across replicas."),
    min_requests: int = typer.Option(50, help="Requests a replica needs to be judged."),
    fingerprints: Path | None = typer.Option(
        None, help="JSON {replica: {engine_version: ..., model_revision: ..., flags: ...}}."
    ),
    noise_shape: str = typer.Option(
        "any",
        help="Noise between healthy replicas the 1 % false-alarm level holds for: any (normal, "
        "heavy-tailed or two hardware batches), or normal (looser cutoffs: more power in small "
        "fleets whose replicas are known to be alike).",
    ),
    skip_bad: bool = _SKIP_BAD,
    since: str | None = _SINCE,
    until: str | None = _UNTIL,
    model: list[str] | None = _MODEL,
    traffic_class: list[str] | None = _TRAFFIC_CLASS,
    replica: list[str] | None = _REPLICA,
    engine: str = ENGINE_OPTION,
    spark_master: str | None = SPARK_MASTER_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    verbose: bool = typer.Option(
        False, "--verbose", help="Every finding with its evidence, not one line per replica."
    ),
    fail_on_finding: bool = typer.Option(False, help="Exit 1 when a replica-side finding exists."),
    labels: Path | None = typer.Option(None, "--labels", help=LABELS_HELP + " With --prometheus."),
) -> None:
    """Find replicas that stand out from the fleet median, and say why."""
    from fleetwatch.core.profiles import get_profile
    from fleetwatch.core.profiles.labels import with_labels
    from fleetwatch.fleet.checks import check_outlier_inputs
    from fleetwatch.fleet.outliers import (
        DetectorConfig,
        OutlierReport,
        Side,
        detect,
        table_from_metrics_dir,
        tables_from_prometheus,
    )
    from fleetwatch.fleet.outliers.by_model import OutliersByModel, detect_by_model, findings_of
    from fleetwatch.fleet.outliers.by_model import verbose as verbose_report

    check_outlier_inputs(
        records=records or None,
        prometheus=prometheus,
        metrics_dir=metrics_dir,
        fingerprints=fingerprints,
        window=window,
        quantile=quantile,
        min_requests=min_requests,
        noise_shape=noise_shape,
    )
    if labels is not None and prometheus is None:
        raise AnalysisError(
            "--labels names Prometheus series and labels: give it with --prometheus"
        )
    where = filter_from_options(since, until, model, traffic_class, replica)
    if where is not None and not records:
        raise AnalysisError(
            "--since, --until, --model, --traffic-class and --replica filter request records; "
            "give RECORDS, or use --selector for Prometheus"
        )
    config = DetectorConfig(min_requests=min_requests, noise_shape=noise_shape)
    report: OutlierReport | OutliersByModel
    if records and engine == "memory":
        from fleetwatch.records.dataset import describe

        data = _dataset(records, max_rows=None, skip_bad=skip_bad, where=where)
        report = detect_by_model(
            data.frame,
            config,
            quantile=quantile,
            fingerprint=_fingerprints(fingerprints),
            where=describe(records, data.files),
        )
    elif records:
        from fleetwatch.fleet.outliers.by_model import detect_tables
        from fleetwatch.fleet.outliers.sources.engine import NEEDS, tables_from_engine

        prints = _fingerprints(fingerprints)
        scan, name = open_and_say(
            records,
            engine=engine,
            spark_master=spark_master,
            where=where,
            skip_bad=skip_bad,
            columns=NEEDS,
            fold_check=True,
        )
        with scan:
            tables = tables_from_engine(
                scan.engine, quantile=quantile, fingerprint=prints, where=name
            )
        report = detect_tables(tables, config)
    elif prometheus is not None:
        from fleetwatch.fleet.outliers.by_model import detect_tables

        fleets = tables_from_prometheus(
            prometheus,
            with_labels(get_profile(profile), labels),
            window=window,
            quantile=quantile,
            at=at,
            selector=selector,
        )
        report = detect_tables(fleets, config)
    else:
        assert metrics_dir is not None
        table = table_from_metrics_dir(metrics_dir, get_profile(profile), quantile=quantile)
        report = detect(table, config)
    if verbose:
        report = verbose_report(report)
    _emit(report.to_dict(), report.render(), as_json)
    if fail_on_finding and any(f.side is Side.REPLICA for f in findings_of(report)):
        raise typer.Exit(1)


MAX_ROWS_HELP = (
    "Refuse records of more rows in all (checked before reading; memory is about 1.1 KB a row, "
    "the records being read whole)."
)


@app.command("tail", cls=OnceEach)
def tail(
    records: list[Path] = typer.Argument(..., help=RECORDS_HELP),
    percentile: float = typer.Option(99.0, help="Tail cohort: at or above this percentile."),
    target: str = typer.Option("e2e", help="Latency to attribute: e2e or ttft."),
    max_rows: int | None = typer.Option(
        None, "--max-rows", help=MAX_ROWS_HELP + " With --engine memory only."
    ),
    skip_bad: bool = _SKIP_BAD,
    since: str | None = _SINCE,
    until: str | None = _UNTIL,
    model: list[str] | None = _MODEL,
    traffic_class: list[str] | None = _TRAFFIC_CLASS,
    replica: list[str] | None = _REPLICA,
    engine: str = ENGINE_OPTION,
    spark_master: str | None = SPARK_MASTER_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Attribute the latency tail to queueing, prompt length, preemption, interference, replica.

    RECORDS are one dataset: any number of files, directories and quoted globs. Through an
    engine, memory is bounded whatever the rows: the tail's threshold and the body's medians are
    exact order statistics in the engine, then each model's replicas are summed a group of at
    most a million requests at a time. --engine memory reads the records whole (about 1.1 KB a
    row) and refuses more than --max-rows (2,000,000) before reading."""
    from fleetwatch.fleet.tail import attribute_tail_by_model

    if target not in ("e2e", "ttft"):
        raise AnalysisError(f"--target must be e2e or ttft, got {target!r}")
    where = filter_from_options(since, until, model, traffic_class, replica)
    goal: Literal["e2e", "ttft"] = "e2e" if target == "e2e" else "ttft"
    if engine == "memory":
        limit = DEFAULT_MAX_ROWS if max_rows is None else max_rows
        report = attribute_tail_by_model(
            _dataset(records, max_rows=limit, skip_bad=skip_bad, where=where).frame,
            percentile=percentile,
            target=goal,
        )
    else:
        from fleetwatch.fleet.tail.engine import NEEDS, tail_in_engine
        from fleetwatch.records.engine.duck import DEFERRED

        scan, _ = open_and_say(
            records,
            engine=engine,
            spark_master=spark_master,
            where=where,
            skip_bad=skip_bad,
            columns=NEEDS,
            fold_check=True,
            defer=DEFERRED,  # the ids: read for the requests listed only
        )
        with scan:
            report = tail_in_engine(scan.engine, percentile=percentile, target=goal)
    _emit(report.to_dict(), report.render(), as_json)


@app.command("compare", cls=OnceEach)
def compare(
    before: Path = typer.Argument(
        ..., help="Records of the earlier run: a file, a directory or a quoted glob."
    ),
    after: Path = typer.Argument(
        ..., help="Records of the later run: a file, a directory or a quoted glob."
    ),
    alpha: float = typer.Option(
        0.01,
        help="Family-wise error rate: at most this share of comparisons of two runs of one "
        "system list any regression (Holm across the metrics).",
    ),
    min_effect: float = typer.Option(
        0.05, help="Smallest shift, as a share of the before value, that counts as a regression."
    ),
    confidence: float = typer.Option(0.95, help="Confidence level of the bootstrap intervals."),
    draws: int = typer.Option(2000, help="Bootstrap replicates (intervals only)."),
    seed: int = typer.Option(0, help="Bootstrap seed (intervals only; verdicts are exact)."),
    max_rows: int | None = typer.Option(
        None, "--max-rows", help=MAX_ROWS_HELP + " With --engine memory only; per run."
    ),
    skip_bad: bool = _SKIP_BAD,
    since: str | None = _SINCE,
    until: str | None = _UNTIL,
    model: list[str] | None = _MODEL,
    traffic_class: list[str] | None = _TRAFFIC_CLASS,
    replica: list[str] | None = _REPLICA,
    engine: str = ENGINE_OPTION,
    spark_master: str | None = SPARK_MASTER_OPTION,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    exit_code: bool = typer.Option(
        False,
        "--exit-code",
        help="Exit with the verdict, for a pipeline to gate on: 0 no regression, 3 regression, "
        "4 inconclusive (the data cannot rule out a --min-effect regression).",
    ),
) -> None:
    """Compare two runs: one verdict per latency metric at a stated family-wise error rate.

    Each percentile (p50, p90, p99) gets an exact permutation test; a metric is regressed when
    Holm across the metrics rejects it and it rose by at least --min-effect. When the prompt or
    output mix changed, the test and the threshold compare like with like (within request-size
    strata), so a workload change alone is never a regression. Also: bootstrap intervals,
    Mann-Whitney, which component moved, the workload check.

    BEFORE and AFTER are each one file, directory (every *.jsonl and *.parquet under it) or
    quoted glob. Through an engine, memory is bounded whatever the rows: each metric is one
    ordered pass over both runs' values, sorted by the engine (out of core). --engine memory
    reads both runs whole (about 1.1 KB a row) and refuses a run over --max-rows (2,000,000)
    before either is read.
    """
    from fleetwatch.fleet.compare import compare_runs_by_model
    from fleetwatch.fleet.rowcap import check_rows
    from fleetwatch.records.dataset import describe, resolve

    if draws < 100:
        raise AnalysisError(f"--draws must be at least 100, got {draws}")
    where = filter_from_options(since, until, model, traffic_class, replica)
    options: dict[str, Any] = {
        "alpha": alpha,
        "min_effect": min_effect,
        "confidence": confidence,
        "draws": draws,
        "seed": seed,
    }
    if engine == "memory":
        limit = DEFAULT_MAX_ROWS if max_rows is None else max_rows
        for run in (before, after):  # both refused or not before either is read
            files = resolve([run])
            check_rows(describe([run], files), files, limit)
        frames = [
            _dataset([run], max_rows=limit, skip_bad=skip_bad, where=where).frame
            for run in (before, after)
        ]
        report = compare_runs_by_model(*frames, **options)
    else:
        from fleetwatch.fleet.compare.engine import NEEDS, compare_in_engines

        open_run = partial(
            open_and_say,
            engine=engine,
            spark_master=spark_master,
            where=where,
            skip_bad=skip_bad,
            columns=NEEDS,
            fold_check=True,
        )
        with open_run([before])[0] as b, open_run([after])[0] as a:
            report = compare_in_engines(b.engine, a.engine, **options)
    _emit(report.to_dict(), report.render(), as_json)
    if exit_code:
        from fleetwatch.fleet.compare.report import VERDICT_EXIT, run_verdict

        raise typer.Exit(VERDICT_EXIT[run_verdict(report)])


@app.command("canary", cls=OnceEach)
def canary(
    prometheus: str = typer.Option(..., "--prometheus", help="Prometheus base URL."),
    canary_selector: str = typer.Option(
        ..., "--canary", help='Label matchers of the canary\'s series, e.g. pod="vllm-7".'
    ),
    baseline: str = typer.Option(
        ..., "--baseline", help='Label matchers of the baseline\'s, e.g. pod=~"vllm-[0-6]".'
    ),
    profile: str = typer.Option(
        "fleetwatch", help="Metric profile (fleetwatch, vllm, sglang, tgi)."
    ),
    labels: Path | None = typer.Option(None, "--labels", help=LABELS_HELP),
    window: str = typer.Option("10m", help="The window judged, ending at --at."),
    at: float | None = typer.Option(None, help="End of the window (Unix seconds; default now)."),
    min_requests: int = typer.Option(
        500, help="Requests each side needs in the window before anything but a hold."
    ),
    alpha: float = typer.Option(
        0.01,
        help="Family-wise error of each family judged: the histogram signals (split evenly "
        "over the latencies and, where the profile has it, the output length), the rates.",
    ),
    min_effect: float = typer.Option(
        0.05,
        help="Smallest slowdown (share of latency) and rate rise (share of the baseline's) "
        "that matters.",
    ),
    confidence: float = typer.Option(
        0.95, help="One-sided confidence with which a promote rules a material regression out."
    ),
    max_error_rise: float | None = typer.Option(
        None,
        "--max-error-rise",
        help="Rise of the error rate (and of each failure outcome's: aborts, rejections) that "
        "matters, in percentage points, e.g. 0.25 (half the budget of a 99.5 % SLO); default "
        "--min-effect of the baseline's rate, 0.1 point at least.",
    ),
    fingerprint: Path | None = typer.Option(
        None,
        "--fingerprint",
        help="A fingerprint of the canary (probe fingerprint --json): a replica answering unlike "
        "its reference rolls the canary back.",
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Write the report as JSON."),
) -> None:
    """Judge a canary against its baseline from live Prometheus data: promote, hold or roll back.

    TTFT, TPOT and end-to-end latency by a rank test over histogram buckets (and the output
    length both ways, where the profile has its histogram), errors and each outcome the profile
    counts by their counts, over the window. Exit status: 0 promote, 3 roll
    back, 4 hold (not enough data, or a material regression not ruled out); 2 bad input.
    """
    from fleetwatch.core.atomic import atomic_write_text
    from fleetwatch.core.profiles import get_profile
    from fleetwatch.core.profiles.labels import with_labels
    from fleetwatch.fleet.canary.judge import judge_canary
    from fleetwatch.fleet.canary.prometheus import check_selector, sides_from_prometheus
    from fleetwatch.fleet.checks import check_canary_inputs

    check_canary_inputs(
        prometheus=prometheus,
        window=window,
        min_requests=min_requests,
        alpha=alpha,
        min_effect=min_effect,
        confidence=confidence,
        json_out=json_out,
        fingerprint=fingerprint,
        max_error_rise=max_error_rise,
    )
    can, base = check_selector(canary_selector, "--canary"), check_selector(baseline, "--baseline")
    if can == base:
        raise AnalysisError("--canary and --baseline select the same series")
    prof = with_labels(get_profile(profile), labels)
    wrong: list[str] = []
    seen = ""
    if fingerprint is not None:
        from fleetwatch.fleet.canary.fingerprint import fingerprint_findings

        wrong, seen = fingerprint_findings(fingerprint)
    b, c, notes = sides_from_prometheus(
        prometheus, prof, baseline=base, canary=can, window=window, at=at
    )
    report = judge_canary(
        b,
        c,
        alpha=alpha,
        min_effect=min_effect,
        confidence=confidence,
        min_requests=min_requests,
        notes=[*notes, seen] if seen else notes,
        fingerprint=wrong,
        max_error_rise=None if max_error_rise is None else max_error_rise / 100,
    )
    typer.echo(report.render())
    if json_out is not None:
        atomic_write_text(json_out, json.dumps(_clean(report.to_dict()), indent=2) + "\n")
    raise typer.Exit(report.exit_code)


@app.command("rules")
def rules(
    profile: str = typer.Option(
        "fleetwatch", help="Metric profile (fleetwatch, vllm, sglang, tgi)."
    ),
    output: Path = typer.Option(..., "-o", "--output", help="Rules file to write (YAML)."),
    test_file: Path | None = typer.Option(
        None, help="promtool test file to write (default: beside it, x.yaml -> x.test.yaml)."
    ),
    window: str = typer.Option("5m", help="Rate window of the recording rules."),
    for_: str = typer.Option("10m", "--for", help="How long before the alert fires."),
    labels: Path | None = typer.Option(None, "--labels", help=LABELS_HELP),
    prometheus_rule: bool = typer.Option(False, "--prometheus-rule", help=PROMETHEUS_RULE_HELP),
    rule_namespace: str | None = typer.Option(None, "--rule-namespace", help=RULE_NAMESPACE_HELP),
    rule_label: list[str] | None = typer.Option(None, "--rule-label", help=RULE_LABEL_HELP),
) -> None:
    """Write the outlier detector as Prometheus recording and alerting rules, plus a promtool test."""
    from fleetwatch.core.atomic import atomic_write_text
    from fleetwatch.core.preflight import output_file
    from fleetwatch.core.profiles import get_profile
    from fleetwatch.core.profiles.labels import with_labels
    from fleetwatch.core.rules.files import promtool_test_path
    from fleetwatch.core.rules.kubernetes import prometheus_rule_for
    from fleetwatch.fleet.checks import check_duration
    from fleetwatch.fleet.outliers.rules.generate import (
        RuleOptions,
        outlier_rules,
        outlier_rules_test,
        render_yaml,
    )

    check_duration(window, "--window")
    check_duration(for_, "--for")
    test_path = output_file(test_file or promtool_test_path(output_file(output)))
    prof = with_labels(get_profile(profile), labels)
    opts = RuleOptions(window=window, for_=for_)
    try:
        rel = Path(os.path.relpath(output, test_path.parent)).as_posix()
    except ValueError:
        rel = str(output.resolve())
    rules_value = outlier_rules(prof, opts)
    text = render_yaml(rules_value)
    test_text = render_yaml(outlier_rules_test(prof, rel, opts))
    manifest = None
    if prometheus_rule:
        manifest = prometheus_rule_for(
            rules_value, output, namespace=rule_namespace, labels=rule_label or []
        )
        output_file(manifest[0])
    try:
        atomic_write_text(output, text)
        atomic_write_text(test_path, test_text)
        if manifest is not None:
            atomic_write_text(manifest[0], render_yaml(manifest[1]))
    except OSError as exc:
        raise AnalysisError(f"cannot write rules: {exc}") from None
    typer.echo(f"wrote {output} and {test_path} (check: promtool test rules {test_path})")
    if manifest is not None:
        typer.echo(f"wrote {manifest[0]} (PrometheusRule {manifest[1]['metadata']['name']})")
    warning = prof.links.warning()
    if warning:
        typer.echo(warning, err=True)


@app.command("podmonitor")
def podmonitor(
    engine: str = typer.Option(
        "vllm", help="What the pods run: vllm or fleetwatch (engine serve)."
    ),
    name: str = typer.Option(..., "--name", help="PodMonitor name (DNS-1123)."),
    namespace: str = typer.Option(..., "--namespace", help="Namespace of the PodMonitor."),
    selector: list[str] = typer.Option(
        ..., "--selector", help="Pod label the pods carry, KEY=VALUE, repeatable."
    ),
    port: str = typer.Option("http", "--port", help="Name of the pods' metrics port."),
    interval: str = typer.Option("15s", "--interval", help="Scrape interval."),
    job: str | None = typer.Option(
        None, "--job", help="job label of the targets (default: the operator's namespace/name)."
    ),
    pod_namespace: list[str] | None = typer.Option(
        None, "--pod-namespace", help="Namespace the pods are in, repeatable (default: its own)."
    ),
    label: list[str] | None = typer.Option(
        None, "--label", help="Label of the PodMonitor, KEY=VALUE (its podMonitorSelector)."
    ),
    output: Path = typer.Option(..., "-o", "--output", help="Manifest file to write (YAML)."),
) -> None:
    """Write a prometheus-operator PodMonitor that scrapes vLLM's or engine serve's /metrics, its
    targets labelled namespace and pod (what a label scheme of namespace,pod reads)."""
    from fleetwatch.core.atomic import atomic_write_text
    from fleetwatch.core.preflight import output_file
    from fleetwatch.core.rules import render_yaml
    from fleetwatch.core.rules.kubernetes import parse_labels
    from fleetwatch.fleet.podmonitor import pod_monitor

    manifest = pod_monitor(
        engine,
        name,
        namespace=namespace,
        match_labels=parse_labels(selector, "--selector"),
        port=port,
        interval=interval,
        namespaces=tuple(pod_namespace or ()),
        job=job,
        labels=parse_labels(label or [], "--label"),
    )
    atomic_write_text(output_file(output), render_yaml(manifest))
    typer.echo(f"wrote {output} (PodMonitor {namespace}/{name})")


@app.command("capacity")
def capacity(
    probe: Path | None = typer.Argument(
        None, help="Probe run JSON (`fleetwatch probe run --json`)."
    ),
    rate: float = typer.Option(10.0, help="Target arrival rate, requests per second."),
    peak_rate: float | None = typer.Option(
        None, help="Burst peak rate (default: --rate; --simulate without a probe: 3 x --rate)."
    ),
    burst: float = typer.Option(120.0, help="Burst duration, seconds."),
    ttft: float = typer.Option(1.0, help="TTFT target, seconds."),
    tpot: float = typer.Option(0.1, help="TPOT target, seconds."),
    cold_start: float = typer.Option(120.0, "--cold-start", help="Replica cold start, seconds."),
    cold_start_from: str | None = typer.Option(
        None,
        "--cold-start-from",
        help="Measured cold start instead of --cold-start: a /metrics URL or saved exposition "
        "file holding fleetwatch_engine_startup_seconds (the slowest start found is used).",
    ),
    headroom: float = typer.Option(0.2, help="Share of the sustainable rate kept spare."),
    quantile: str = typer.Option(
        "p99", help="Quantile the targets apply to (p50, p90, p99, p999)."
    ),
    profile: str = typer.Option("vllm", help="Metric profile (fleetwatch, vllm, sglang, tgi)."),
    model: str = typer.Option("model", help="Model label value the autoscaler selects."),
    name: str = typer.Option("llm", help="Deployment to scale."),
    namespace: str = typer.Option("default", help="Kubernetes namespace."),
    prometheus_url: str = typer.Option("http://prometheus.monitoring:9090", help="For KEDA."),
    output: Path | None = typer.Option(
        None,
        "-o",
        "--output",
        help="Directory for hpa.yaml, keda.yaml, capacity.rules.yaml + test, and "
        "capacity.prometheusrule.yaml.",
    ),
    simulate: bool = typer.Option(False, "--simulate", help="Also run the burst simulator."),
    seed: int = typer.Option(0, help="Simulator seed."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    labels: Path | None = typer.Option(None, "--labels", help=LABELS_HELP),
    model_config: Path | None = typer.Option(
        None,
        "--model-config",
        help="The model's config.json (or its folder): plan from the model arithmetic when no "
        "probe run is given (an upper bound), and check a probe's rate against it.",
    ),
    gpu: str = typer.Option("H100-SXM", help="With --model-config: each replica's GPU."),
    gpus: int | None = typer.Option(
        None,
        help="With --model-config: GPUs a replica, --tp x --pp x --dp-attention (default: "
        "their product; given alone, tensor parallel).",
    ),
    tp: int | None = typer.Option(
        None, "--tp", help="With --model-config: tensor-parallel degree (must divide the heads)."
    ),
    pp: int = typer.Option(1, "--pp", help="With --model-config: pipeline-parallel stages."),
    ep: int = typer.Option(
        1, "--ep", help="With --model-config: expert-parallel groups (whole routed experts)."
    ),
    dp_attention: int = typer.Option(
        1, "--dp-attention", help="With --model-config: attention replicas within a replica."
    ),
    context: int = typer.Option(4096, help="With --model-config: tokens in each sequence's KV."),
    output_tokens: float = typer.Option(
        256.0, "--output-tokens", help="With --model-config: mean output tokens a request."
    ),
) -> None:
    """Replicas, warm pool and scaling delays from a probe's capacity curve (or, with
    --model-config and no probe, from the model arithmetic's bound); queue-depth autoscaling
    manifests (HPA, KEDA) and recording rules; with --simulate, how scaling on GPU utilisation,
    on queue depth and on queue depth with a warm pool fare in a burst."""
    from fleetwatch.fleet.capacity.run import ModelOptions, capacity_command

    measured = None
    if cold_start_from is not None:
        from fleetwatch.fleet.capacity.cold_start import cold_start_from as read_cold_start

        measured = read_cold_start(cold_start_from)
        cold_start = measured.seconds
    doc, text = capacity_command(
        probe=probe,
        rate=rate,
        peak_rate=peak_rate,
        burst=burst,
        ttft=ttft,
        tpot=tpot,
        cold_start=cold_start,
        headroom=headroom,
        quantile=quantile,
        profile=profile,
        target=(name, namespace, model, prometheus_url),
        output=output,
        simulate=simulate,
        seed=seed,
        labels=labels,
        model=None
        if model_config is None
        else ModelOptions(
            config=model_config,
            gpu=gpu,
            gpus=gpus,
            dp_attention=dp_attention,
            context=context,
            output_tokens=output_tokens,
            tp=tp,
            pp=pp,
            ep=ep,
        ),
    )
    if measured is not None and cold_start_from is not None:
        doc["cold_start"] = {"seconds": measured.seconds, "phases": measured.phases}
        text = measured.render(cold_start_from) + "\n\n" + text
    _emit(doc, text, as_json)
