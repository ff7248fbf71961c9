"""The dataset's check folded into a command's first query: the scan that reduces the rows also
counts them and checks them, where a scan of its own (``Engine.check``) would read every row once
more before (at 100 M Parquet rows, 4-6 s of CPU for the columns a command reads).

A command whose scan was opened with ``open_scan(..., fold_check=True)`` adds ``check_columns``
to the select list of its first query, one grouping of every row of ``records`` (no ``WHERE``),
and hands that query's result to ``checked``. The groups' counts add up to what ``check`` counts:
the rows, the rows lacking a column every record has, the rows the record checks refuse. Where
either of the last two is not nought, ``check`` itself runs, so a bad file is named by the same
one line as when the dataset is checked first. A dataset with a filter, or read with
``--skip-bad`` (which leaves a bad file out and opens the rest again), is checked first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fleetwatch.records.engine import REQUIRED, Engine, implausible

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CHECK_COLUMNS", "check_columns", "checked", "models"]

CHECK_COLUMNS = ("fw_rows", "fw_missing", "fw_odd")
"""The columns ``check_columns`` adds to a query's result (``checked`` takes them off)."""


def check_columns(engine: Engine) -> str:
    """``, `` and the aggregates counting what ``check`` counts over a query's groups, while the
    engine's rows are not checked yet; ``""`` once they are, or where the files vouch for them
    (``Engine.vouched``: then they are counted from the footers)."""
    if engine.counted is not None:
        return ""
    vouched = engine.vouched()
    if vouched is not None:  # checked when written: counted from the footers
        engine.check()  # counts what a filter keeps, where there is one
        return ""
    missing = " OR ".join(f"{c} IS NULL" for c in REQUIRED)
    rows, lacking, odd = CHECK_COLUMNS
    return (
        f", count(*) AS {rows}, count(*) FILTER (WHERE {missing}) AS {lacking}, "
        f"count(*) FILTER (WHERE {implausible(engine.columns)}) AS {odd}"
    )


def checked(engine: Engine, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame``, the result of a query given ``check_columns``, without those columns; the
    engine's rows counted from them, or, where a row lacks a required column or is refused by
    the record checks, the engine's ``check`` run for its ``RecordError`` naming the file."""
    if engine.counted is not None or CHECK_COLUMNS[0] not in frame.columns:
        return frame
    rows, lacking, odd = (int(frame[c].sum()) for c in CHECK_COLUMNS)
    if lacking or odd:
        engine.check()
    else:
        engine.counted = (rows, rows)
    return frame.drop(columns=list(CHECK_COLUMNS))


def models(engine: Engine) -> list[str]:
    """The dataset's models, sorted, a record naming none under ``reductions.UNNAMED`` (as
    ``reductions.MODEL`` counts it), from a query that also checks the rows where the engine's
    are not checked yet. Grouped on the stored column: half the CPU of grouping on ``MODEL``,
    whose ``coalesce`` is computed a row where a dictionary-coded column's values are compared
    once each. Where the rows are counted already and the footers say each file's one model
    (``DuckEngine.pinned``), no query at all."""
    from fleetwatch.records.engine.reductions import UNNAMED

    pinned = getattr(engine, "pinned", None)
    if pinned is not None and not check_columns(engine):  # the rows counted: no scan to fold
        said = pinned("model")
        if said is not None:  # each file's one model, by its footer (a compacted dataset)
            return list(said)
    got = checked(
        engine, engine.query(f"SELECT model AS m{check_columns(engine)} FROM records GROUP BY 1")
    )
    return sorted({UNNAMED if m is None or m != m else str(m) for m in got["m"]})
