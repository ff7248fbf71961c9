"""The JSON lines' columns, read as lines of text whose values one ``json_extract_string`` a
line takes: the same table as DuckDB's ``read_json`` gives, for a quarter less CPU.

``read_json`` turns each line's values into the columns' types inside the reader. Read instead
by the CSV reader as one column of text (no quote, no escape, no header, a delimiter that valid
JSON never holds raw), each line's values taken by one ``json_extract_string`` of every
column's path and cast to the column's type, the table of the plugin's files costs 4.1-4.2 s of
CPU against 5.3-5.5 s at 1.2 M records (11 columns), 25.7 s against 33.4 s at 7.2 M, its rows
equal to ``read_json``'s to the last bit (``EXCEPT ALL`` both ways, over 17 columns).

Where this reading refuses a line (``refused``: not JSON, a value that does not cast as
``read_json`` would cast it, such as ``true`` for a number, a line that is not an object, a
carriage return anywhere: lines end at ``\\n`` alone), the caller reads the files with
``read_json`` instead, so what is read, and the message naming a bad file and line, are
``read_json``'s. One difference is left: an object that names a key twice, which ``read_json``
refuses, is read here with the key's first value (the project's own reader, Python's ``json``,
takes the last).
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


def lines_sql(files: str, columns: Mapping[str, str], *, numbered: bool = False) -> str:
    """A ``FROM`` item of the JSON lines of ``files`` (a SQL list of paths): ``columns`` (name
    -> SQL type) and, ``numbered``, ``file_index`` (the file's place in the list)."""
    paths = ", ".join(sql_string(f'$."{name}"') for name in columns)
    cast = ", ".join(
        f"CAST(v[{at}] AS {kind}) AS {name}" for at, (name, kind) in enumerate(columns.items(), 1)
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
