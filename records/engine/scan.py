"""A dataset opened in a query engine: its files resolved, its bad files left out (``--skip-bad``)
or named, its rows counted before and after the filter, so every row is accounted for.

``open_scan`` is what a command calls: the engine named by ``--engine`` over the paths given.
``Scan`` answers what ``records.options.say_what_was_read`` asks of a dataset (``files``,
``skipped``, ``rows``, ``rows_before_filter``), so a command reports a scan as it does a read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fleetwatch.core.records.schema import RecordError
from fleetwatch.records.engine import ENGINES, Engine

if TYPE_CHECKING:
    from fleetwatch.records.filters import RecordFilter
    from fleetwatch.records.remote import Remote

__all__ = ["Scan", "open_engine", "open_scan"]

_MAX_RETRIES = 1000


@dataclass
class Scan:
    """An engine holding the ``records`` view of a dataset, and what went into it."""

    engine: Engine
    files: tuple[Path, ...]
    skipped: tuple[tuple[Path, str], ...] = ()
    rows_before_filter: int | None = None
    """Records in the files before the filter; None when no filter was given."""
    notes: list[str] = field(default_factory=list)

    @property
    def rows(self) -> int:
        """Records the filter kept (every record when there is no filter); known once the rows
        are checked (``open_scan``, or the command's first query when it folds the check in)."""
        if self.engine.counted is None:
            raise RuntimeError("the records are counted by the command's first query, not yet run")
        return self.engine.counted[1]

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> Scan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_engine(
    name: str,
    files: Sequence[Path],
    *,
    where: RecordFilter | None = None,
    columns: Sequence[str] | None = None,
    spark_master: str | None = None,
    remote: Sequence[Remote] = (),
    defer: Sequence[str] = (),
) -> Engine:
    """The engine ``name`` (``duckdb`` or ``spark``) over ``files`` (and, for DuckDB, the
    object-storage datasets ``remote``; ``defer``: columns of ``columns`` read only when a
    query asks for them, ``DuckEngine``)."""
    if name == "duckdb":
        from fleetwatch.records.engine.duck import DuckEngine

        return DuckEngine(files, where=where, columns=columns, remote=remote, defer=defer)
    if name == "spark":
        if not spark_master:
            raise RecordError(
                "--engine spark needs --spark-master: spark://HOST:7077, local[N], or a Spark "
                "Connect URL sc://HOST:15002"
            )
        from fleetwatch.records.engine.spark import SparkEngine

        return SparkEngine(files, where=where, columns=columns, master=spark_master)
    raise RecordError(f"--engine {name!r}: give one of {', '.join(ENGINES)}")


def _named(exc: RecordError, files: Sequence[Path]) -> list[Path]:
    """The file an error names: its ``path`` where it has one, else the longest file name in its
    message (``part-10.jsonl`` named, ``part-1.jsonl`` is not)."""
    if exc.path is not None:
        return [p for p in files if str(p) == exc.path]
    found = [p for p in files if str(p) in exc.message]
    return [max(found, key=lambda p: len(str(p)))] if found else []


def open_scan(
    paths: Sequence[Path],
    *,
    engine: str = "duckdb",
    where: RecordFilter | None = None,
    skip_bad: bool = False,
    columns: Sequence[str] | None = None,
    spark_master: str | None = None,
    fold_check: bool = False,
    defer: Sequence[str] = (),
) -> Scan:
    """``paths`` resolved and opened in ``engine``; a file the engine cannot read, or whose rows
    are not records, is a ``RecordError`` naming it, or with ``skip_bad`` left out and counted.
    A filter that keeps no record is a ``RecordError`` naming the filter. ``fold_check``: the
    caller's first query checks the rows (``records.engine.folded``), where there is no filter
    and no ``skip_bad``; else they are checked here, by a scan of their own."""
    from fleetwatch.records.dataset import describe, pruned_or_refused, resolve
    from fleetwatch.records.remote import is_url, location, open_remote

    urls = [location(p) for p in paths if is_url(p)]
    local = [p for p in paths if not is_url(p)]
    if urls and engine != "duckdb":
        raise RecordError(
            f"{urls[0].split('?', 1)[0]}: object storage is read by --engine duckdb; a Spark "
            "cluster reads its own storage: give it paths it can reach (s3a://...) as files"
        )
    remote = [open_remote(u, where) for u in urls]
    files = pruned_or_refused(local, resolve(local), where) if local else []
    skipped: list[tuple[Path, str]] = []
    for _ in range(_MAX_RETRIES):
        opened = None
        try:
            opened = open_engine(
                engine,
                files,
                where=where,
                columns=columns,
                spark_master=spark_master,
                remote=remote,
                defer=defer,
            )
            if fold_check and where is None and not skip_bad:
                break
            total, kept = opened.check()
        except RecordError as exc:
            if opened is not None:
                opened.close()
            bad = _named(exc, files) if skip_bad else []
            if not bad:
                raise
            skipped.extend((p, str(exc)) for p in bad)
            files = [p for p in files if p not in bad]
            continue
        break
    else:  # pragma: no cover - a thousand bad files, one by one
        raise RecordError(f"more than {_MAX_RETRIES} bad record files", path=describe(paths, files))
    if where is not None and total and not kept:  # a filter: checked above
        opened.close()
        raise RecordError(
            f"no records match {where.describe()} (of {total:,} read"
            + ("; times are the records' finished_s)" if "finished_s" in where.columns() else ")"),
            path=describe(paths, files) if len(paths) == 1 else f"{len(files):,} record files",
        )
    return Scan(
        opened,
        (*files, *(Path(k) for store in remote for k in store.keys)),
        tuple(skipped),
        rows_before_filter=None if where is None else total,
    )
