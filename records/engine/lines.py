"""The JSON lines' columns, read as lines of text whose values one ``json_transform_strict``
(``typed``) or one ``json_extract_string`` a line takes: the same table as DuckDB's
``read_json``, for less CPU.

``read_json`` turns each line's values into the columns' types inside the reader. Read instead
as text, each small file whole (``read_text``, which reads a list of files on one thread, so the
files are split into one list per thread of the engine) and split at ``\n``, each line's values
taken by one ``json_extract_string`` of every column's path and cast to the column's type (a
real for a count through its double, rounded half to even as ``read_json`` rounds it), the table
of an hour of 200 replicas (72,000 files of about 50 KB, 7.2 M lines, 12 columns) cost 18.4-18.8 s
of CPU (10 s on two threads) against 27-31 s with the lines read by DuckDB's CSV reader; of ten
minutes (12,000 files) 3.2-4.5 s against 6.4-7.7 s for ``read_json``'s table, interleaved on a
busy machine. The CSV reader's cost is mostly per file, so a file larger than ``WHOLE_BYTES`` is
read by it, as lines of text, a buffer at a time (no quote, no escape, no header, a delimiter
that valid JSON never holds raw, lines ending at ``\n`` alone); so is anything not a plain file,
and every file where a path holds a character DuckDB's readers take as a pattern (``read_json``
too: each reader then numbers the files as ``read_json`` does). On values the record schema
allows the rows equal ``read_json``'s to the last bit, each line's file numbered as
``read_json`` numbers it (``EXCEPT ALL`` both ways over all 20 columns: the ten-minute
benchmark's 1.2 M records in 12,000 files, and the tests' lines of every shape those values
take, read whole, as a stream and both).

Read ``typed`` (first, by the engine), each line's values are turned into the columns' types by
``json_transform_strict``: the transform ``read_json`` applies to each line, so its values are
``read_json``'s, without the differences the untyped reading leaves (below; ``EXCEPT ALL`` both
ways: the ten-minute benchmark's 1.2 M records, every shape above with each key there), for a fifth
less CPU than the text and its casts (the table of the one-hour benchmark, 13 columns: 15.6-16.0 s
against 19.4-32.1 s; ten minutes: 2.7-2.8 s against 3.4 s). It refuses a line lacking one of the
keys (``read_json`` reads it as NULL), where the plugin writes every key on every line
(``core.records.write.json_line``): files written otherwise are read untyped.

Where the untyped reading refuses a line too (``refused``: not JSON, not an object, a value that
does not cast as ``read_json`` would cast it, such as ``true`` for a number, a carriage return
anywhere, a file not UTF-8), or a file read whole is gone once read (``read_text`` passes over a
file that is not there: ``gone``), the caller reads the files with ``read_json`` instead, so what
is read, and the message naming a bad file and line, are ``read_json``'s. Left different, on values
the record schema does not allow, which no writer of records writes: an object naming a key twice
(``read_json`` refuses it; read here with the first value, where Python's ``json`` takes the last);
a number written as a string in a form ``read_json`` refuses and a cast reads (``"+1"``,
``"1_000"``, ``"2 "``); a real where a string is due, printed as ``json_extract_string`` prints it
(``1e16`` as ``10000000000000000.0``, not ``1e+16``). Telling those apart would cost most of the
gain (a pattern matched over each line: 0.7-1.0 s of the 1.2 s a ten-minute slice gained when the
CSV reader first replaced ``read_json``).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from fleetwatch.records.filters import sql_list, sql_string

__all__ = ["WHOLE_BYTES", "Lines", "gone", "lines_sql", "refused"]

WHOLE_BYTES = 256 << 10
"""The largest file read whole. The CSV reader's cost is mostly per file: the plugin's files
(about 50 KB) cost it 40-70 % more than read whole, files of 256 KiB alike, larger ones less
(1 and 4 MiB: 5-15 % less, and a file read whole is held whole, with its lines)."""
_GLOB = frozenset("*?[")
"""Characters DuckDB's readers take a path holding as a pattern (``read_json`` among them)."""


class Lines(NamedTuple):
    sql: str
    """The ``FROM`` item."""
    whole: list[str]
    """The files read whole: ``read_text`` passes over one gone, so the caller checks they are
    still there once read (``gone``)."""


def refused() -> tuple[type[Exception], ...]:
    """The DuckDB errors of a line this reading refuses (an interruption, a full disk or memory
    run out are not among them)."""
    import duckdb

    return (duckdb.InvalidInputException, duckdb.ConversionException)


def _cast(at: int, kind: str) -> str:
    """SQL for the ``at``-th value's text as ``kind``: a count written as a real through its
    double (half to even, as ``read_json``; a whole number as it is, exact beyond 2**53)."""
    v = f"v[{at}]"
    if kind == "BIGINT":
        return (
            f"CASE WHEN contains({v}, '.') OR contains({v}, 'e') OR contains({v}, 'E') "
            f"THEN CAST(CAST({v} AS DOUBLE) AS BIGINT) ELSE CAST({v} AS BIGINT) END"
        )
    return f"CAST({v} AS {kind})"


def _size(path: str) -> int | None:
    """``path``'s size where it is a file, else None (the stream's reader says what it is)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def _indexed(at: Sequence[int]) -> str:
    """SQL for a row's place in the whole list from ``file_index``, its file's place in a part's
    list ``at``."""
    place = "CAST(file_index AS BIGINT)"
    if at[-1] - at[0] == len(at) - 1:  # a run of the whole list
        return f"{place} + {at[0]}"
    return f"[{', '.join(map(str, at))}][{place} + 1]"


def _parts(files: Sequence[str], parts: int) -> tuple[list[list[int]], list[int]]:
    """The places of the files read whole, ``parts`` runs of about as many files, and those of
    the files read as a stream: all of them where a path holds a pattern's character, so each
    reader numbers the files as ``read_json`` does."""
    if any(_GLOB.intersection(path) for path in files):
        return [], list(range(len(files)))
    whole: list[int] = []
    streamed: list[int] = []
    for i, path in enumerate(files):
        size = _size(path)
        (whole if size is not None and size <= WHOLE_BYTES else streamed).append(i)
    n = min(max(parts, 1), len(whole))
    return [whole[k * len(whole) // n : (k + 1) * len(whole) // n] for k in range(n)], streamed


def gone(files: Sequence[str]) -> bool:
    """Whether one of ``files`` (a ``Lines``' ``whole``) is not a file any more."""
    return not all(os.path.isfile(path) for path in files)


def lines_sql(
    files: Sequence[str | Path],
    columns: Mapping[str, str],
    *,
    numbered: bool = False,
    parts: int = 1,
    typed: bool = False,
) -> Lines:
    """A ``FROM`` item of the JSON lines of ``files``: ``columns`` (name -> SQL type) and,
    ``numbered``, ``file_index`` (the file's place in ``files``); the files read whole split
    into ``parts`` lists, read at once (the engine's threads). ``typed``: each line's values
    taken by ``json_transform_strict``, which refuses a line lacking one of the columns' keys."""
    names = [str(f) for f in files]
    if not names:
        raise ValueError("no files to read")
    whole, streamed = _parts(names, parts)
    number = ", file_index" if numbered else ""
    # a carriage return anywhere: read_json reads the file, which may end lines at one;
    # a byte order mark at the start left out, as read_json leaves it
    content = (
        "CASE WHEN contains(content, chr(13)) THEN error('a carriage return') "
        "WHEN starts_with(content, chr(65279)) THEN substr(content, 2) "
        "ELSE content END AS content"
    )
    texts = []
    for at in whole:
        listed = sql_list(names[i] for i in at)
        index = f", {_indexed(at)} AS file_index" if numbered else ""
        texts.append(
            f"SELECT unnest(string_split(content, chr(10))) AS line{number} FROM "
            f"(SELECT {content}{index} FROM read_text({listed}))"
        )
    if streamed:
        listed = sql_list(names[i] for i in streamed)
        index = f", {_indexed(streamed)} AS file_index" if numbered else ""
        texts.append(
            f"SELECT line{index} FROM read_csv({listed}, columns={{'line': 'VARCHAR'}}, "
            "delim=chr(1), quote='', escape='', new_line='\\n', header=false, auto_detect=false) "
            "WHERE line IS NOT NULL"
        )
    if typed:
        structure = sql_string(json.dumps(dict(columns)))
        taken = f"json_transform_strict(line, {structure})"
        cast = ", ".join(f"struct_extract(v, {sql_string(name)}) AS {name}" for name in columns)
    else:
        paths = ", ".join(sql_string(f'$."{name}"') for name in columns)
        taken = f"json_extract_string(line, [{paths}])"
        cast = ", ".join(
            f"{_cast(at, kind)} AS {name}" for at, (name, kind) in enumerate(columns.items(), 1)
        )
    blank = "trim(line, chr(32) || chr(9)) = ''"  # JSON's white space but the line ends
    values = (
        f"CASE WHEN starts_with(line, '{{') THEN {taken} "
        f"WHEN {blank} THEN NULL "
        "ELSE error('a line that is not a JSON object') END"
    )  # (a line of white space skipped, as read_json skips it; a filter on it costs twice)
    lines = " UNION ALL ".join(texts)
    sql = (
        f"(SELECT {cast}{number} FROM (SELECT {values} AS v{number} FROM ({lines}) AS t "
        "WHERE line IS NOT NULL) AS l WHERE v IS NOT NULL)"
    )
    return Lines(sql, [names[i] for at in whole for i in at])
