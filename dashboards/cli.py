"""Command line for this package; composed into `fleetwatch` by the front door."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fleetwatch.core.kubernetes import (
    PROMETHEUS_RULE_HELP,
    RULE_LABEL_HELP,
    RULE_NAMESPACE_HELP,
)
from fleetwatch.core.profiles.labels import LABELS_HELP
from fleetwatch.dashboards.errors import DashboardError

__all__ = ["app"]

app = typer.Typer(
    help="Grafana dashboards and operational alert rules generated from the metric profiles.",
    no_args_is_help=True,
)


@app.command("build")
def build(
    out: Annotated[Path, typer.Option("--out", help="Folder for <profile>-<view>.json.")],
    check: Annotated[
        bool,
        typer.Option("--check", help="Write nothing; fail if the folder differs from a rebuild."),
    ] = False,
    labels: Annotated[Path | None, typer.Option("--labels", help=LABELS_HELP)] = None,
) -> None:
    """Build every dashboard: SLO, fleet and replica for fleetwatch, vLLM and SGLang; resilience
    once, for the fleetwatch profile (its series come from the resilience library)."""
    from fleetwatch.core.preflight import input_dir, output_dir
    from fleetwatch.core.profiles.labels import load_scheme
    from fleetwatch.dashboards.build import drifted, render_all, write_dashboards

    scheme = load_scheme(labels)
    (input_dir if check else output_dir)(out)
    files = render_all(scheme=scheme)
    if check:
        problems = drifted(out, files)
        if problems:
            raise DashboardError(
                f"dashboards in {out} are out of date: {'; '.join(problems)} (run make dashboards)"
            )
        typer.echo(f"{len(files)} dashboards in {out} are up to date")
        return
    written = write_dashboards(out, files)
    typer.echo(f"wrote {len(written)} dashboards to {out}")


@app.command("runbooks")
def runbooks(
    out: Annotated[Path, typer.Option("--out", help="Folder for the pages and index.yaml.")],
    profile: Annotated[str, typer.Option("--profile", help="Metric profile name.")] = "vllm",
    labels: Annotated[Path | None, typer.Option("--labels", help=LABELS_HELP)] = None,
) -> None:
    """Write the runbook pages with every query in one profile's metric and label names, under
    the labels file's scheme (its matchers on every selector, its replica labels in every
    grouping); a query the profile cannot answer is kept and marked. Host the folder where
    links.runbooks points."""
    from fleetwatch.core.preflight import output_dir
    from fleetwatch.core.profiles import get_profile
    from fleetwatch.core.profiles.labels import with_labels
    from fleetwatch.dashboards.build import write_dashboards
    from fleetwatch.dashboards.runbooks import render_runbooks

    output_dir(out)
    pages = render_runbooks(with_labels(get_profile(profile), labels))
    written = write_dashboards(out, pages)
    typer.echo(f"wrote {len(written)} runbook files ({profile} profile) to {out}")


@app.command("alerts")
def alerts(
    profile: Annotated[str, typer.Option("--profile", help="Metric profile name.")] = "fleetwatch",
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Rules file; its promtool test goes beside it.")
    ] = Path("fleetwatch-operational.rules.yaml"),
    runbook_base: Annotated[
        str | None,
        typer.Option(
            "--runbook-base",
            help="Deprecated: set links.runbooks in the labels file (--labels). URL or path "
            "prefix of the runbook pages; overrides links.runbooks.",
        ),
    ] = None,
    resilience: Annotated[
        bool | None,
        typer.Option(
            "--resilience/--no-resilience",
            help="Include the breaker and retry-budget alerts, whose series come from "
            "fleetwatch's resilience library in your client code (default: only for the "
            "fleetwatch profile).",
        ),
    ] = None,
    labels: Annotated[Path | None, typer.Option("--labels", help=LABELS_HELP)] = None,
    prometheus_rule: Annotated[
        bool, typer.Option("--prometheus-rule", help=PROMETHEUS_RULE_HELP)
    ] = False,
    rule_namespace: Annotated[
        str | None, typer.Option("--rule-namespace", help=RULE_NAMESPACE_HELP)
    ] = None,
    rule_label: Annotated[
        list[str] | None, typer.Option("--rule-label", help=RULE_LABEL_HELP)
    ] = None,
) -> None:
    """Write the operational alert rules (KV cache, preemption, GPU, telemetry; breaker and
    retries where the resilience library is in use) for one profile, and its promtool unit test
    beside it (x.yaml -> x.test.yaml)."""
    from fleetwatch.core.atomic import atomic_write_text
    from fleetwatch.core.preflight import output_file
    from fleetwatch.core.profiles import get_profile
    from fleetwatch.core.profiles.labels import with_labels
    from fleetwatch.core.rules.files import promtool_test_path
    from fleetwatch.core.rules.kubernetes import prometheus_rule_for
    from fleetwatch.dashboards.alerts import alert_tests, render_yaml, rules_document

    tests = output_file(promtool_test_path(output_file(output)))
    chosen = with_labels(get_profile(profile), labels)
    document = rules_document(chosen, runbook_base, resilience=resilience)
    test_doc = alert_tests(chosen, output.name, runbook_base, resilience=resilience)
    manifest = None
    if prometheus_rule:
        manifest = prometheus_rule_for(
            document, output_file(output), namespace=rule_namespace, labels=rule_label or []
        )
    atomic_write_text(output, render_yaml(document))
    atomic_write_text(tests, render_yaml(test_doc))
    written = [str(output), str(tests)]
    if manifest is not None:
        atomic_write_text(output_file(manifest[0]), render_yaml(manifest[1]))
        written.append(str(manifest[0]))
    typer.echo(f"wrote {', '.join(written)}")
    warning = chosen.links.warning()
    if warning:
        typer.echo(warning, err=True)
    if runbook_base is not None:
        typer.echo(
            "warning: --runbook-base is deprecated; set links.runbooks in the labels file",
            err=True,
        )
