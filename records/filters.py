"""Which records of a dataset an analysis reads: a window on ``finished_s`` and sets of models,
traffic classes and replicas, applied while the files are read.

Times are the records' clock (``finished_s``, Unix seconds). A bound is an absolute Unix time
(``1733000000``), an ISO-8601 timestamp with a zone (``2026-12-01T10:00:00Z``) or a duration back
from ``now`` (``-1h``, ``-90s``, ``-1d``; Prometheus units); ``now`` is passed in, so nothing here
reads the wall clock. The window is half-open: ``since <= finished_s < until``. Each set is
"any of" (empty: every value).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fleetwatch.core.brief import brief
from fleetwatch.core.duration import parse_duration
from fleetwatch.core.records.schema import RecordError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

__all__ = ["RecordFilter", "parse_time", "record_filter", "sql_list", "sql_string"]

_SETS = (("models", "model"), ("traffic_classes", "traffic_class"), ("replicas", "replica"))
_FLAGS = {"models": "--model", "traffic_classes": "--traffic-class", "replicas": "--replica"}


def parse_time(option: str, text: str, *, now: float) -> float:
    """Seconds on the records' clock that ``text`` names (see the module docstring); a value that
    is none of the three forms is a ``RecordError`` naming ``option`` and the value."""
    value = text.strip()
    if value.startswith("-"):
        try:
            return now - parse_duration(value[1:])
        except ValueError as exc:
            raise RecordError(f"{option} {brief(text)}: {exc}") from None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds) or seconds < 0:
            raise RecordError(f"{option} {brief(text)}: must be a Unix time in seconds")
        return seconds
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise RecordError(
            f"{option} {brief(text)}: give Unix seconds (1733000000), an ISO-8601 time with a "
            "zone (2026-12-01T10:00:00Z) or a duration back from now (-1h, -10m, -1d)"
        ) from None
    if stamp.tzinfo is None:
        raise RecordError(
            f"{option} {brief(text)}: an ISO-8601 time needs a zone (Z or +02:00), "
            "so it names one instant"
        )
    return stamp.timestamp()


@dataclass(frozen=True, slots=True)
class RecordFilter:
    """Records with ``since_s <= finished_s < until_s`` (either bound None: open) whose model,
    traffic class and replica are each in its set (an empty set: any)."""

    since_s: float | None = None
    until_s: float | None = None
    models: frozenset[str] = field(default_factory=frozenset)
    traffic_classes: frozenset[str] = field(default_factory=frozenset)
    replicas: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if self.since_s is not None and self.until_s is not None and self.since_s > self.until_s:
            raise RecordError(
                f"--since {self.since_s:.3f} is after --until {self.until_s:.3f} "
                "(records' finished_s, Unix seconds): no record could match"
            )

    def describe(self) -> str:
        """The filter as options, for messages (``--model a --since 1733000000``)."""
        parts = [
            f"{_FLAGS[name]} {value}" for name, _ in _SETS for value in sorted(getattr(self, name))
        ]
        if self.since_s is not None:
            parts.append(f"--since {self.since_s:.3f}")
        if self.until_s is not None:
            parts.append(f"--until {self.until_s:.3f}")
        return " ".join(parts)

    def mask(self, frame: pd.DataFrame) -> np.ndarray[Any, Any]:
        """Which rows of a checked record frame match."""
        import numpy as np

        keep = np.ones(len(frame), dtype=bool)
        finished = frame["finished_s"].to_numpy(dtype=np.float64)
        if self.since_s is not None:
            keep &= finished >= self.since_s
        if self.until_s is not None:
            keep &= finished < self.until_s
        for name, column in _SETS:
            values = getattr(self, name)
            if values:
                keep &= frame[column].astype(object).isin(sorted(values)).to_numpy(dtype=bool)
        return keep

    def apply(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The matching rows of a checked record frame, renumbered from 0."""
        keep = self.mask(frame)
        return frame if keep.all() else frame[keep].reset_index(drop=True)

    def columns(self) -> tuple[str, ...]:
        """The stored columns the filter reads."""
        out = ["finished_s"] if self.since_s is not None or self.until_s is not None else []
        return (*out, *(column for name, column in _SETS if getattr(self, name)))

    def sql(self) -> str:
        """The filter as a portable SQL condition over the ``records`` view (``TRUE`` when it
        keeps everything): string literals quoted, floats written exactly (``repr``)."""
        out: list[str] = []
        if self.since_s is not None:
            out.append(f"finished_s >= {self.since_s!r}")
        if self.until_s is not None:
            out.append(f"finished_s < {self.until_s!r}")
        for name, column in _SETS:
            values = getattr(self, name)
            if values:
                out.append(f"{column} IN ({', '.join(sql_string(v) for v in sorted(values))})")
        return " AND ".join(out) or "TRUE"

    def parquet_filters(self) -> list[tuple[str, str, Any]]:
        """The filter in ``pyarrow.parquet.read_table(filters=...)`` form (a conjunction), so a
        Parquet file's row groups outside it are never decoded."""
        out: list[tuple[str, str, Any]] = []
        if self.since_s is not None:
            out.append(("finished_s", ">=", self.since_s))
        if self.until_s is not None:
            out.append(("finished_s", "<", self.until_s))
        for name, column in _SETS:
            values = getattr(self, name)
            if values:
                out.append((column, "in", sorted(values)))
        return out


def sql_string(value: str) -> str:
    """``value`` as a SQL string expression that DuckDB and every Spark release read alike: a
    quoted literal, or for a value holding ``'`` its pieces joined around ``chr(39)``. A doubled
    quote (``'it''s'``) is not portable: Spark 4.0 and earlier (and later releases with
    ``spark.sql.legacy.consecutiveStringLiterals.enabled``) read it as two adjacent literals and
    join them (``its``). A backslash (an escape in Spark, a character in DuckDB) is written as
    ``chr(92)`` the same way; NUL is refused. ``${...}`` is text in DuckDB, and in Spark where variable substitution is off (the
    spark engine turns it off)."""
    if "\x00" in value:
        raise RecordError(f"{brief(value)}: a NUL cannot be matched in a filter")
    special = {"'": "chr(39)", "\\": "chr(92)"}
    if not any(ch in value for ch in special):
        return f"'{value}'"
    pieces = re.split(r"(['\\])", value)
    parts = [special.get(p, f"'{p}'") for p in pieces if p]
    return "(" + " || ".join(parts) + ")"


def sql_list(values: Iterable[object]) -> str:
    """``values`` (paths, names) as a SQL list of strings (``sql_string`` each)."""
    return "[" + ", ".join(sql_string(str(v)) for v in values) + "]"


def record_filter(
    *,
    since: str | None = None,
    until: str | None = None,
    models: Iterable[str] = (),
    traffic_classes: Iterable[str] = (),
    replicas: Iterable[str] = (),
    now: float,
) -> RecordFilter | None:
    """The filter the command-line options give, or None when none is given (read everything)."""
    f = RecordFilter(
        since_s=None if since is None else parse_time("--since", since, now=now),
        until_s=None if until is None else parse_time("--until", until, now=now),
        models=frozenset(models),
        traffic_classes=frozenset(traffic_classes),
        replicas=frozenset(replicas),
    )
    return f if f.columns() else None
