"""The JSON lines' columns, read as lines of text whose values one ``json_extract_string`` a
line takes: the same table as DuckDB's ``read_json`` gives, for a quarter less CPU.

``read_json`` turns each line's values into the columns' types inside the reader. Read instead
by the CSV reader as one column of text (no quote, no escape, no header, a delimiter that valid
JSON never holds raw, lines ending at ``\\n`` alone), each line's values taken by one
``json_extract_string`` of every column's path and cast to the column's type (a real for a
count through its double, rounded half to even as ``read_json`` rounds it), the table of the
plugin's files costs 3.9-4.1 s of CPU against 5.0-5.3 s at 1.2 M records (11 columns) and no
less at 5 columns; on values the record schema allows, its rows equal ``read_json``'s to the
last bit (``EXCEPT ALL`` both ways: the benchmark's records over 17 columns, and the tests'
lines of every shape those values take over all 20).

Where this reading refuses a line (``refused``: not JSON, not an object, a value that does not
cast as ``read_json`` would cast it, such as ``true`` for a number, a carriage return anywhere),
the caller reads the files with ``read_json`` instead, so what is read, and the message naming a
bad file and line, are ``read_json``'s. Left different, on values the record schema does not
allow, which no writer of records writes: an object naming a key twice (``read_json`` refuses
it; read here with the first value, where Python's ``json`` takes the last); a number written
as a string in a form ``read_json`` refuses and a cast reads (``"+1"``, ``"1_000"``, ``"2 "``);
a real where a string is due, printed as ``json_extract_string`` prints it (``1e16`` as
``10000000000000000.0``, not ``1e+16``). Telling those apart would cost most of the gain (a
pattern matched over each line: 0.7-1.0 s of the 1.2 s).
"""

from __future__ import annotations

from collections.abc import Mapping

from fleetwatch.records.filters import sql_string

__all__ = ["lines_sql", "refused"]


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


def lines_sql(files: str, columns: Mapping[str, str], *, numbered: bool = False) -> str:
    """A ``FROM`` item of the JSON lines of ``files`` (a SQL list of paths): ``columns`` (name
    -> SQL type) and, ``numbered``, ``file_index`` (the file's place in the list)."""
    paths = ", ".join(sql_string(f'$."{name}"') for name in columns)
    cast = ", ".join(
        f"{_cast(at, kind)} AS {name}" for at, (name, kind) in enumerate(columns.items(), 1)
    )
    number = ", file_index" if numbered else ""
    blank = "trim(line, chr(32) || chr(9)) = ''"  # JSON's white space but the line ends
    values = (
        f"CASE WHEN starts_with(line, '{{') THEN json_extract_string(line, [{paths}]) "
        f"WHEN {blank} THEN NULL ELSE error('a line that is not a JSON object') END"
    )  # (a line of white space skipped, as read_json skips it; a filter on it costs twice)
    lines = (
        f"read_csv({files}, columns={{'line': 'VARCHAR'}}, delim=chr(1), quote='', escape='', "
        "new_line='\\n', header=false, auto_detect=false)"
    )
    return (
        f"(SELECT {cast}{number} FROM (SELECT {values} AS v{number} FROM {lines} "
        "WHERE line IS NOT NULL) AS l WHERE v IS NOT NULL)"
    )
