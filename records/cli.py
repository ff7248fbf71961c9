"""`fleetwatch records …`: check and summarise request-record files; compact and prune datasets."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import typer

from fleetwatch.records.options import SKIP_BAD_HELP, OnceEach

app = typer.Typer(
    help="Request records: the shared format of finished requests.", no_args_is_help=True
)


@app.command("validate", cls=OnceEach)
def validate(
    paths: list[str] = typer.Argument(
        ...,
        metavar="PATH",
        help="Record files (.jsonl, .parquet), folders (recursively) or quoted globs, as every "
        "record command reads them; each file is read and checked whole, one at a time.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    allow_empty: bool = typer.Option(
        False, "--allow-empty", help="Accept files with no records (refused by default)."
    ),
    skip_bad: bool = typer.Option(
        False,
        "--skip-bad",
        help="Name each record file that cannot be read (corrupt, or not records) on stderr, "
        "count it in the summary and go on, instead of stopping at the first.",
    ),
) -> None:
    """Check record files and print a summary: files, rows, time span, models, replicas, status
    counts. A fleet's folder is checked file by file, in the memory of one file (about 11 µs a
    JSON-lines record: an hour of 200 replicas in about 80 s).

    Files without a single record are an error unless ``--allow-empty``; the first file that
    cannot be read is one line naming it (exit 2) unless ``--skip-bad``; a file removed since
    the folder was listed (pruned) is left out."""
    from fleetwatch.core.records.schema import RecordError
    from fleetwatch.records.dataset import resolve

    files = resolve(paths)
    rows = 0
    first, last = float("inf"), float("-inf")
    replicas: set[str] = set()
    models: set[str] = set()
    status: Counter[str] = Counter()
    bad: list[str] = []
    gone = 0
    for path in files:
        if not path.exists():  # pruned since it was listed: nothing left to check
            gone += 1
            continue
        try:
            part = _file_summary(path)
        except FileNotFoundError:  # (pruned while it was opened)
            gone += 1
            continue
        except RecordError as exc:
            if not skip_bad:
                raise
            bad.append(str(exc))
            typer.echo(f"warning: skipped a bad record file: {exc}", err=True)
            continue
        if part is not None:
            rows += part[0]
            first, last = min(first, part[1]), max(last, part[2])
            replicas |= part[3]
            models |= part[4]
            status += part[5]
    named = paths[0] if len(paths) == 1 else " ".join(paths)
    if bad and len(bad) + gone == len(files):
        raise RecordError(f"no file could be read ({len(bad)} bad, each named above)", path=named)
    if not rows and not allow_empty:
        empty = "an empty file" if len(files) == 1 else "empty files"
        raise RecordError(f"no records ({empty}; --allow-empty accepts it)", path=named)
    span = last - first if rows else 0.0
    summary = {
        "file": named,
        "files": len(files) - gone,
        "rows": rows,
        "span_s": round(span, 3),
        "models": sorted(models),
        "replicas": sorted(replicas),
        "status": dict(sorted(status.items())),
        "bad_files": len(bad),
    }
    if as_json:
        typer.echo(json.dumps(summary, indent=2))
        return
    typer.echo(f"{named}: ok" if not bad else f"{named}: ok but {len(bad)} bad file(s) skipped")
    typer.echo(f"  files     {len(files) - gone}")
    typer.echo(f"  rows      {rows}")
    typer.echo(f"  span      {span:.3f} s")
    typer.echo(f"  models    {len(models)}: {', '.join(sorted(models))}")
    typer.echo(f"  replicas  {len(replicas)}: {', '.join(sorted(replicas))}")
    typer.echo("  status    " + ", ".join(f"{k}={v}" for k, v in sorted(status.items())))


def _file_summary(
    path: Path,
) -> tuple[int, float, float, set[str], set[str], Counter[str]] | None:
    """One checked record file's rows, first arrival, last finish, replicas, models and status
    counts (None: no rows); JSON lines as checked lists (a frame a small segment would cost
    more), Parquet as its frame."""
    from fleetwatch.core.records.write import JSONL_SUFFIXES
    from fleetwatch.records.io import read_columns, read_records

    if path.suffix.lower() in JSONL_SUFFIXES:
        got = read_columns(path)
        if not got["arrival_s"]:
            return None
        arrival, finished = got["arrival_s"], got["finished_s"]
        return (
            len(arrival),
            float(min(arrival)),
            float(max(finished)),
            set(got["replica"]),
            set(got["model"]),
            Counter(got["status"]),
        )
    df = read_records(path)
    if not len(df):
        return None
    return (
        len(df),
        float(df["arrival_s"].min()),
        float(df["finished_s"].max()),
        set(df["replica"].dropna().unique().tolist()),
        set(df["model"].dropna().unique().tolist()),
        Counter({str(k): int(v) for k, v in df["status"].value_counts().items() if v}),
    )


def _duration_s(option: str, text: str, *, zero_ok: bool = False) -> float:
    """Seconds in a duration option's value (``30s``, ``7d``, ``1h30m``); a value that is not
    one is a ``RecordError`` naming the option."""
    from fleetwatch.core.duration import parse_duration
    from fleetwatch.core.records.schema import RecordError

    if zero_ok and text.strip() in ("0", "0s"):
        return 0.0
    try:
        return float(parse_duration(text))
    except ValueError as exc:
        raise RecordError(f"{option} {exc}") from None


@app.command("compact", cls=OnceEach)
def compact(
    sources: list[str] = typer.Argument(
        ...,
        metavar="SRC",
        help="Sealed record segments: files, folders (recursively) or quoted globs, as every "
        "record command reads them. Dotfiles and *.tmp (files being written) are never taken.",
    ),
    out: str = typer.Option(
        ...,
        "--out",
        metavar="DEST",
        help="The compacted dataset: a folder, or object storage (s3://bucket/prefix, with "
        "--state). Files go to DEST/date=YYYY-MM-DD/hour=HH/replica=NAME/part-BATCH.parquet "
        "(each record's finished_s, UTC).",
    ),
    min_age: str = typer.Option(
        "30s",
        "--min-age",
        help="Take only files last modified at least this long ago (30s, 5m; 0s: every file), "
        "so a file being sealed now waits for the next run.",
    ),
    delete_sources: bool = typer.Option(
        True,
        "--delete-sources/--keep-sources",
        help="Remove each source once its records are in DEST (default), or keep it and list "
        "it in DEST's manifest so that a later run does not compact it again.",
    ),
    target_rows: int = typer.Option(
        250_000,
        "--target-rows",
        min=1,
        help="Rows per batch (memory: about 1 KB a row): a run's sources are merged in batches "
        "of about this many rows, each batch one file per partition.",
    ),
    skip_bad: bool = typer.Option(False, "--skip-bad", help=SKIP_BAD_HELP),
    state: Path | None = typer.Option(
        None,
        "--state",
        help="Folder for the journal, manifest and lock (default DEST/.compact; required for "
        "object storage: a local folder, one per destination and host).",
    ),
) -> None:
    """Merge sealed record segments into an hour- and replica-partitioned Parquet dataset,
    crash-safe: a run killed at any moment loses and duplicates no record once a later run
    completes. In a local DEST (its state in DEST/.compact), each hour ended 15 minutes ago
    has its partitions' parts rolled up into one file each (a reader sees the parts or the
    file, never both). Prints one line: files in, records in, files out, partitions."""
    import os
    import time

    from fleetwatch.records.compact import KILL_AT_ENV, STAGES, compact, describe_run, kill_at
    from fleetwatch.records.rollup import ROLLUP_STAGES

    result = compact(
        sources,
        out,
        now=time.time(),
        min_age_s=_duration_s("--min-age", min_age, zero_ok=True),
        delete_sources=delete_sources,
        target_rows=target_rows,
        skip_bad=skip_bad,
        state=state,
        checkpoint=kill_at(os.environ.get(KILL_AT_ENV), stages=(*STAGES, *ROLLUP_STAGES)),
    )
    for line in result.recovered:
        typer.echo(f"note: {out}: {line}", err=True)
    for line in result.not_rolled_up:
        typer.echo(f"warning: {line}", err=True)
    if result.skipped:
        typer.echo(
            f"warning: {out}: skipped {len(result.skipped)} bad segment(s), left in place "
            f"(first: {result.skipped[0][1]})",
            err=True,
        )
    typer.echo(describe_run(result, out, min_age=min_age, kept=not delete_sources))


@app.command("prune", cls=OnceEach)
def prune(
    dataset: str = typer.Argument(
        ...,
        metavar="DEST",
        help="A record dataset folder: one that compact writes, or a folder of sealed segments.",
    ),
    older_than: str = typer.Option(
        ...,
        "--older-than",
        help="Remove records that finished longer ago than this (7d, 36h, 2w): whole hour "
        "partitions by their names; other record files by the largest finished_s in their "
        "Parquet statistics, or else by their mtime.",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Say what would be removed, and remove nothing."
    ),
) -> None:
    """Remove whole partitions (and other record files) whose records all finished before the
    cutoff, crash-safe: a partition is hidden by one rename before its files are removed, so a
    kill never leaves part of one readable. Prints a line for each, then the totals."""
    import os
    import time
    from datetime import UTC, datetime

    from fleetwatch.records.compact import kill_at
    from fleetwatch.records.prune import KILL_AT_ENV, STAGES, prune

    result = prune(
        dataset,
        older_than_s=_duration_s("--older-than", older_than),
        now=time.time(),
        dry_run=dry_run,
        checkpoint=kill_at(os.environ.get(KILL_AT_ENV), env=KILL_AT_ENV, stages=STAGES),
    )
    verb = "would remove" if dry_run else "removed"
    if result.finished_leftovers:
        typer.echo(
            f"note: {dataset}: finished removing {result.finished_leftovers} partition(s) a "
            "stopped prune had hidden",
            err=True,
        )
    for r in result.removals:
        what = f"{r.path}{os.sep}" if r.partition else f"old record files in {r.path}{os.sep}"
        typer.echo(f"{verb} {what} ({r.files:,} files, {r.bytes:,} bytes; by {r.by})")
    cutoff = datetime.fromtimestamp(result.cutoff_s, UTC).isoformat().replace("+00:00", "Z")
    typer.echo(
        f"{dataset}: {verb} {result.partitions:,} partitions, {result.files:,} files, "
        f"{result.bytes:,} bytes (records finished before {cutoff})"
    )
