"""Command line for this package; composed into `fleetwatch` by the front door.

Thin shell: read files, call the pure functions in ``slo``, write files atomically. Heavy
imports (pandas, numpy) happen inside the commands so ``fleetwatch --help`` stays fast.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from fleetwatch.core.kubernetes import PROMETHEUS_RULE_HELP, RULE_LABEL_HELP, RULE_NAMESPACE_HELP
from fleetwatch.core.profiles.labels import LABELS_HELP
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
    from fleetwatch.core.profiles import Profile
    from fleetwatch.slo.spec import SLOSpec

app = typer.Typer(
    help="SLOs: validate specs, generate Prometheus rules, report budgets, backtest alerts.",
    no_args_is_help=True,
)

_SPEC = typer.Argument(..., help="SLO spec (fleetwatch YAML or OpenSLO v1).")
_RECORDS = typer.Option(
    ...,
    "--records",
    metavar="<path>",
    help="Request records: a file (.jsonl or .parquet), a directory (every *.jsonl and *.parquet "
    "under it) or a quoted glob; repeat it to read several as one dataset.",
)
_SKIP_BAD = typer.Option(False, "--skip-bad", help=SKIP_BAD_HELP)
_JSON = typer.Option(False, "--json", help="Print JSON instead of text.")
_GOODPUT = typer.Option(
    None,
    "--goodput",
    help="The exporter's goodput target TTFT,TPOT in seconds (engine serve --goodput, "
    "instrument(goodput=...)); goodput SLOs must use the same thresholds.",
)


_SINCE = FILTER_OPTIONS["since"]
_UNTIL = FILTER_OPTIONS["until"]
_MODEL = FILTER_OPTIONS["model"]
_TRAFFIC_CLASS = FILTER_OPTIONS["traffic_class"]
_REPLICA = FILTER_OPTIONS["replica"]


def _records(
    spec: Any,
    paths: list[Path],
    *,
    skip_bad: bool = False,
    where: Any = None,
    engine: str = "memory",
    spark_master: str | None = None,
) -> Any:
    """The records ``paths`` name (one dataset; only those ``where`` keeps), refused when empty
    or when an SLO's selector matches none. With a query ``engine`` (and no ITL SLO, whose gap
    counts the engines do not read) every SLO's events are binned in the engine, one
    ``GROUP BY`` a SLO (``StreamedCounts``). Else a dataset of one Parquet file and no filter stays
    a path (streamed in row batches by the commands; only the distinct selector values are read
    to check it); any other is read whole, a filter pushed into each Parquet file's read."""
    from fleetwatch.records.dataset import describe, read_dataset, resolve
    from fleetwatch.slo.checks import check_selectors
    from fleetwatch.slo.errors import SLOSpecError
    from fleetwatch.slo.events import needed_columns

    itl = any("itl_buckets" in needed_columns(slo) for slo in spec.slos)
    if engine != "memory" and not itl:
        return _engine_counts(spec, paths, skip_bad, where, engine, spark_master)
    files = resolve(paths)
    path = files[0]
    if where is None and len(files) == 1 and path.suffix.lower() in (".parquet", ".pq"):
        from fleetwatch.slo.stream import distinct_rows

        selected = {
            c for slo in spec.slos for c in ("traffic_class", "model") if getattr(slo.selector, c)
        }
        seen, rows = distinct_rows(path, tuple(sorted(selected)))
        if rows == 0:
            raise SLOSpecError(f"{path}: no records to evaluate (the file is empty)")
        check_selectors(spec, seen, where=str(path), records=rows)
        return path
    name = describe(paths, files)
    data = read_dataset(files, skip_bad=skip_bad, where=where)
    say_what_was_read(data, name, where)
    frame = data.frame
    if len(frame) == 0:
        empty = "the file is empty" if len(files) == 1 else "every file is empty"
        raise SLOSpecError(f"{name}: no records to evaluate ({empty})")
    check_selectors(spec, frame, where=name)
    return frame


def _engine_counts(
    spec: Any,
    paths: list[Path],
    skip_bad: bool,
    where: Any,
    engine: str,
    spark_master: str | None,
) -> Any:
    """Every SLO's events binned in a query engine over the dataset (``engine_counts``), the
    records checked by the same scan. A selector is checked against the records' values only
    where its SLO has no event (one that matched a record has matched)."""
    from fleetwatch.slo.checks import check_selectors
    from fleetwatch.slo.events import needed_columns
    from fleetwatch.slo.stream import engine_counts

    columns = sorted({"arrival_s", *(c for slo in spec.slos for c in needed_columns(slo))})
    selected = sorted(
        {c for slo in spec.slos for c in ("traffic_class", "model") if getattr(slo.selector, c)}
    )
    scan, name = open_and_say(
        paths,
        engine=engine,
        spark_master=spark_master,
        where=where,
        skip_bad=skip_bad,
        columns=columns,
        fold_check=True,
    )
    with scan:
        empty = "the file is empty" if len(scan.files) == 1 else "every file is empty"
        counts = engine_counts(spec, scan.engine, empty=f"{name}: no records to evaluate ({empty})")
        unseen = any(
            bins.span() is None and (slo.selector.traffic_class or slo.selector.model)
            for slo, bins in zip(spec.slos, counts.counts, strict=True)
        )
        if selected and unseen:
            seen = scan.engine.query(f"SELECT DISTINCT {', '.join(selected)} FROM records")
            check_selectors(spec, seen, where=name, records=counts.records)
        return counts


def _goodput(text: str | None) -> tuple[float, float] | None:
    from fleetwatch.core.goodput import parse_goodput_target
    from fleetwatch.slo.errors import SLOSpecError

    if text is None:
        return None
    try:
        return parse_goodput_target(text)
    except ValueError as exc:
        raise SLOSpecError(f"--goodput: {exc}") from None


def _check_alerts(spec: SLOSpec, profile: Profile | None, goodput: str | None) -> None:
    """Refuse alerts that can never fire and goodput SLOs off the exporter's target; warn
    (stderr) where scaled windows distort the budget shares."""
    from fleetwatch.slo.rules.feasibility import (
        check_goodput_target,
        check_reachable,
        scaling_warnings,
    )

    check_reachable(spec)
    check_goodput_target(spec, profile, _goodput(goodput))
    for line in scaling_warnings(spec):
        typer.echo(f"warning: {line}", err=True)


@app.command("validate")
def validate(
    spec: Path = _SPEC,
    profile: str | None = typer.Option(
        None, "--profile", help="Also check that this metric profile can express every SLO."
    ),
    goodput: str | None = _GOODPUT,
) -> None:
    """Check a spec; print each SLO's budget and burn-rate windows."""
    from fleetwatch.core.duration import format_duration
    from fleetwatch.core.profiles import get_profile
    from fleetwatch.slo.load import read_spec

    parsed = read_spec(spec)
    prof = get_profile(profile) if profile is not None else None
    _check_alerts(parsed, prof, goodput)
    if prof is not None:
        from fleetwatch.slo.rules.generate import generate_rules

        generate_rules(parsed, prof)
    else:
        from fleetwatch.slo.checks import check_thresholds_on_some_profile

        check_thresholds_on_some_profile(parsed)
    typer.echo(f"{spec}: ok: service {parsed.service}, {len(parsed.slos)} SLO(s)")
    for slo in parsed.slos:
        typer.echo(
            f"  {slo.name}: {slo.sli.kind.value} {slo.objective:g}% over "
            f"{format_duration(slo.period_s)}, budget {slo.budget_s / 60:.1f} min"
        )
        for w in slo.windows:
            typer.echo(
                f"    {w.severity:<6} {w.burn:g}x over {format_duration(w.long_s)}"
                f" and {format_duration(w.short_s)}: fires after "
                f"{w.budget_fraction(slo.period_s) * 100:.3g}% of the budget"
            )


@app.command("rules")
def rules(
    spec: Path = _SPEC,
    profile: str = typer.Option("fleetwatch", "--profile", help="Metric profile."),
    output: Path = typer.Option(..., "-o", "--output", help="Rules file to write."),
    goodput: str | None = _GOODPUT,
    labels: Path | None = typer.Option(None, "--labels", help=LABELS_HELP),
    prometheus_rule: bool = typer.Option(False, "--prometheus-rule", help=PROMETHEUS_RULE_HELP),
    rule_namespace: str | None = typer.Option(None, "--rule-namespace", help=RULE_NAMESPACE_HELP),
    rule_label: list[str] | None = typer.Option(None, "--rule-label", help=RULE_LABEL_HELP),
) -> None:
    """Write Prometheus rules for a profile, and their promtool test file beside them."""
    from fleetwatch.core.atomic import atomic_write_text
    from fleetwatch.core.preflight import output_file
    from fleetwatch.core.profiles import get_profile
    from fleetwatch.core.profiles.labels import with_labels
    from fleetwatch.core.rules import render_yaml
    from fleetwatch.core.rules.files import promtool_test_path
    from fleetwatch.core.rules.kubernetes import prometheus_rule_for
    from fleetwatch.slo.load import read_spec
    from fleetwatch.slo.rules import (
        generate_promtool_tests,
        generate_rules,
        render_rules,
        render_tests,
    )
    from fleetwatch.slo.rules.render import WIDTH, rule_file

    test_path = output_file(promtool_test_path(output_file(output)))
    prof = with_labels(get_profile(profile), labels)
    parsed = read_spec(spec)
    _check_alerts(parsed, prof, goodput)
    ruleset = generate_rules(parsed, prof)
    tests = generate_promtool_tests(ruleset, prof, output.name)
    manifest = None
    if prometheus_rule:
        manifest = prometheus_rule_for(
            rule_file(ruleset), output, namespace=rule_namespace, labels=rule_label or []
        )
        output_file(manifest[0])
    atomic_write_text(output, render_rules(ruleset))
    atomic_write_text(test_path, render_tests(tests))
    n_rules = sum(len(g.rules) for g in ruleset.groups)
    typer.echo(
        f"wrote {output} ({len(ruleset.groups)} groups, {n_rules} rules, "
        f"{len(ruleset.alerts)} alerts) and {test_path} ({len(tests.tests)} promtool tests)"
    )
    if manifest is not None:
        atomic_write_text(manifest[0], render_yaml(manifest[1], width=WIDTH))
        typer.echo(f"wrote {manifest[0]} (PrometheusRule {manifest[1]['metadata']['name']})")
    warning = prof.links.warning()
    if parsed.runbook_base is not None:
        warning = (
            f"warning: {spec}: runbook_base is deprecated; set links.runbooks in the labels "
            "file (--labels)"
        )
    if warning:
        typer.echo(warning, err=True)


@app.command("report", cls=OnceEach)
def report(
    spec: Path = _SPEC,
    records: list[Path] = _RECORDS,
    as_json: bool = _JSON,
    at: float | None = typer.Option(None, "--at", help="Report time (records' clock, s)."),
    skip_bad: bool = _SKIP_BAD,
    since: str | None = _SINCE,
    until: str | None = _UNTIL,
    model: list[str] | None = _MODEL,
    traffic_class: list[str] | None = _TRAFFIC_CLASS,
    replica: list[str] | None = _REPLICA,
    engine: str = ENGINE_OPTION,
    spark_master: str | None = SPARK_MASTER_OPTION,
) -> None:
    """SLI, error budget left and current burn rates over request records (binned in the query
    engine, only each bin's counts brought out, so any number of records works; --engine memory
    reads them whole, as an ITL SLO does)."""
    from fleetwatch.slo.load import read_spec
    from fleetwatch.slo.report import report_json, report_spec, report_text

    where = filter_from_options(since, until, model, traffic_class, replica)
    parsed = read_spec(spec)
    frame = _records(
        parsed,
        records,
        skip_bad=skip_bad,
        where=where,
        engine=engine,
        spark_master=spark_master,
    )
    reports = report_spec(parsed, frame, at_s=at)
    if as_json:
        typer.echo(json.dumps({"service": parsed.service, "slos": report_json(reports)}, indent=2))
    else:
        typer.echo(report_text(parsed, reports), nl=False)


@app.command("backtest", cls=OnceEach)
def backtest(
    spec: Path = _SPEC,
    records: list[Path] = _RECORDS,
    as_json: bool = _JSON,
    skip_bad: bool = _SKIP_BAD,
    since: str | None = _SINCE,
    until: str | None = _UNTIL,
    model: list[str] | None = _MODEL,
    traffic_class: list[str] | None = _TRAFFIC_CLASS,
    replica: list[str] | None = _REPLICA,
    engine: str = ENGINE_OPTION,
    spark_master: str | None = SPARK_MASTER_OPTION,
) -> None:
    """When each burn-rate alert would have fired over the records, with delay and reset (binned
    in the query engine, only each bin's counts brought out, so any number of records works;
    --engine memory reads them whole, as an ITL SLO does)."""
    from fleetwatch.slo.load import read_spec
    from fleetwatch.slo.report import backtest_json, backtest_spec, backtest_text

    where = filter_from_options(since, until, model, traffic_class, replica)
    parsed = read_spec(spec)
    frame = _records(
        parsed,
        records,
        skip_bad=skip_bad,
        where=where,
        engine=engine,
        spark_master=spark_master,
    )
    results = backtest_spec(parsed, frame)
    if as_json:
        typer.echo(
            json.dumps({"service": parsed.service, "slos": backtest_json(results)}, indent=2)
        )
    else:
        typer.echo(backtest_text(parsed, results), nl=False)
