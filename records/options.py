"""Command-line parameters shared by the commands that read records: a dataset of paths, the
``--skip-bad`` flag, and options that take one value refusing a second one.

Click keeps the last of a repeated option (``--percentile 90 --percentile 99`` reads 99) and says
nothing; for an analysis that is a silent wrong answer, so these commands refuse it. The check
runs on the parsed command line before any value is converted, counting each option that takes a
single value (not a flag, not ``multiple``), so a repeat is one line and exit 2 whatever its
values are.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperCommand

if TYPE_CHECKING:
    from fleetwatch.records.dataset import Dataset
    from fleetwatch.records.engine.scan import Scan
    from fleetwatch.records.filters import RecordFilter

__all__ = [
    "FILTER_OPTIONS",
    "SKIP_BAD_HELP",
    "OnceEach",
    "filter_from_options",
    "say_what_was_read",
    "single_value_repeats",
]

SKIP_BAD_HELP = (
    "Leave out a record file that cannot be read (corrupt, or not records) and say how many "
    "were left out, instead of stopping at the first."
)


_TIME_HELP = (
    "records whose finished_s (the records' clock, Unix s) is {rel} this: Unix seconds "
    "(1733000000), an ISO-8601 time with a zone (2026-12-01T10:00:00Z) or a duration back "
    "from now (-1h, -10m, -90s, -1d)."
)
FILTER_OPTIONS: dict[str, Any] = {
    "since": typer.Option(
        None, "--since", metavar="TIME", help="Read only " + _TIME_HELP.format(rel="at or after")
    ),
    "until": typer.Option(
        None, "--until", metavar="TIME", help="Read only " + _TIME_HELP.format(rel="before")
    ),
    "model": typer.Option(
        None, "--model", help="Read only this model's records; repeat it for any of several."
    ),
    "traffic_class": typer.Option(
        None,
        "--traffic-class",
        help="Read only this traffic class's records; repeat it for any of several.",
    ),
    "replica": typer.Option(
        None, "--replica", help="Read only this replica's records; repeat it for any of several."
    ),
}
"""The dataset filter's options, one default each for a command's parameters (``since``,
``until``, ``model``, ``traffic_class``, ``replica``); ``filter_from_options`` builds the filter."""


ENGINE_OPTION = typer.Option(
    "duckdb",
    "--engine",
    help="Where the records are reduced: duckdb (in process, out of core: any number of rows in "
    "bounded memory), spark (a cluster: --spark-master), or memory (every record read into "
    "pandas; exact order statistics, memory grows with the rows).",
)
SPARK_MASTER_OPTION = typer.Option(
    None,
    "--spark-master",
    help="With --engine spark: spark://HOST:7077 (standalone), local[N], or a Spark Connect URL "
    "sc://HOST:15002 (Databricks, EMR, Dataproc). Record paths must be readable by the cluster.",
)


def filter_from_options(
    since: str | None,
    until: str | None,
    model: list[str] | None,
    traffic_class: list[str] | None,
    replica: list[str] | None,
    *,
    now: Callable[[], float] = time.time,
) -> RecordFilter | None:
    """The ``RecordFilter`` the options give (None: read every record); ``now`` is read only
    when a bound is a duration back from now."""
    from fleetwatch.records.filters import record_filter

    relative = any(v is not None and v.strip().startswith("-") for v in (since, until))
    return record_filter(
        since=since,
        until=until,
        models=model or (),
        traffic_classes=traffic_class or (),
        replicas=replica or (),
        now=now() if relative else 0.0,
    )


def say_what_was_read(data: Dataset | Scan, name: str, where: RecordFilter | None) -> None:
    """On stderr: the bad files a dataset left out (``--skip-bad``), and how many of its records
    a filter kept; nothing when neither applies."""
    if data.skipped:
        typer.echo(
            f"warning: {name}: skipped {len(data.skipped)} bad record file(s) of "
            f"{len(data.files) + len(data.skipped)} (first: {data.skipped[0][1]})",
            err=True,
        )
    if where is not None and data.rows_before_filter is not None:
        typer.echo(
            f"note: {name}: {data.rows:,} of {data.rows_before_filter:,} records match "
            f"{where.describe()}",
            err=True,
        )


def open_and_say(
    paths: Sequence[Path],
    *,
    engine: str,
    spark_master: str | None,
    where: RecordFilter | None,
    skip_bad: bool,
    columns: Sequence[str],
    fold_check: bool = False,
    defer: Sequence[str] = (),
) -> tuple[Scan, str]:
    """``paths`` opened in the query ``engine`` (``records.engine.scan.open_scan``; with
    ``fold_check`` the caller's first query checks the rows, where it can), what the read left
    out and what the filter kept said on stderr (``say_what_was_read``), and the dataset's name
    for messages. Use the scan in a ``with`` block."""
    from fleetwatch.records.dataset import describe
    from fleetwatch.records.engine.scan import open_scan

    scan = open_scan(
        paths,
        engine=engine,
        where=where,
        skip_bad=skip_bad,
        columns=columns,
        spark_master=spark_master,
        fold_check=fold_check,
        defer=defer,
    )
    name = describe(paths, scan.files)
    say_what_was_read(scan, name, where)
    return scan, name


def single_value_repeats(command: Any, ctx: Any, args: list[str]) -> list[tuple[Any, int]]:
    """Each option of ``command`` that takes one value and appears more than once in ``args``,
    with how many times (the command line as click parses it: ``--x=1``, ``-x 1``, after ``--``
    nothing is an option)."""
    parser = command.make_parser(ctx)
    _, _, order = parser.parse_args(args=list(args))
    counts: dict[int, tuple[Any, int]] = {}
    for param in order:
        if getattr(param, "param_type_name", "") != "option":
            continue
        if param.multiple or param.is_flag or param.count:
            continue
        seen = counts.get(id(param), (param, 0))[1]
        counts[id(param)] = (param, seen + 1)
    return [(param, n) for param, n in counts.values() if n > 1]


class OnceEach(TyperCommand):
    """A command whose single-value options may be given at most once each: a repeat is a usage
    error (one line, exit 2), never last-wins. Use as ``@app.command(cls=OnceEach)``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            repeats = single_value_repeats(self, ctx, args)
        except Exception:  # a command line that does not parse: click says so below, its way
            repeats = []
        for param, n in repeats:
            raise typer.BadParameter(
                f"given {n} times; give it once (a repeated option is refused, not last-wins)",
                ctx=ctx,
                param=param,
            )
        return list(super().parse_args(ctx, args))
