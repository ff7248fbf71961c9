"""The JSON lines read as lines of text (``records.engine.lines``): the same table as DuckDB's
``read_json``, row for row and bit for bit, over the plugin's files and over lines written by
hand in every shape a value takes; where it refuses a line, the engine reads the files with
``read_json`` and so reads, or names, what it always did."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from fleetwatch.core.records.schema import RecordError
from fleetwatch.records.dataset import resolve
from fleetwatch.records.engine import COLUMNS, lines
from fleetwatch.records.engine.duck import DuckEngine
from fleetwatch.records.engine.lines import lines_sql
from fleetwatch.records.filters import sql_list, sql_string
from fleetwatch.records.io import write_records
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet
from tests.records.plugin_tree import plugin_tree

_SPEC = "{" + ", ".join(f"{sql_string(c)}: '{t}'" for c, t in COLUMNS.items()) + "}"


def _both(
    files: list[Path], *, parts: int = 1, numbered: bool = False, typed: bool = False
) -> tuple[int, int, int]:
    """Rows of ``read_json``'s table, and those of each table the other lacks (``EXCEPT ALL``
    both ways, every column of the schema and, ``numbered``, each row's file's place)."""
    listed = sql_list(files)
    con = duckdb.connect()
    number = ", file_index" if numbered else ""
    con.execute(
        f"CREATE TABLE a AS SELECT *{number} FROM read_json({listed}, "
        f"format='newline_delimited', columns={_SPEC})"
    )
    con.execute(
        "CREATE TABLE b AS SELECT * FROM "
        + lines_sql(files, COLUMNS, numbered=numbered, parts=parts, typed=typed).sql
    )
    (rows,) = con.execute("SELECT count(*) FROM a").fetchone() or (0,)
    (only_a,) = con.execute("SELECT count(*) FROM (FROM a EXCEPT ALL FROM b)").fetchone() or (0,)
    (only_b,) = con.execute("SELECT count(*) FROM (FROM b EXCEPT ALL FROM a)").fetchone() or (0,)
    return rows, only_a, only_b


_SHAPES = [
    # the schema's own shape, every column (the plugin writes them all)
    {c: None for c in COLUMNS}
    | {"replica": "r-0", "arrival_s": 1796119788.5602605, "finished_s": 1796119790.0180042},
    # reals for counts, rounded as their doubles are (half to even), exponents, -0.0, extremes
    {"replica": "r-1", "arrival_s": 1796119788.25, "finished_s": 1.7961197e9, "prompt_tokens": 2.5},
    {"replica": "r-1", "arrival_s": -0.0, "finished_s": 5e-324, "output_tokens": -0.5},
    {"replica": "r-1", "arrival_s": 1, "finished_s": 2, "prompt_tokens": 25e-1, "preemptions": 7.5},
    {"replica": "r-1", "arrival_s": 1.7976931348623157e308, "finished_s": 0.1, "preemptions": 1e3},
    {"replica": "r-1", "arrival_s": 1, "finished_s": 2, "cached_prompt_tokens": 9007199254740993},
    # a number as a string (read_json casts it), a whole number where a string is due
    {"replica": 5, "arrival_s": "1796119788.25", "finished_s": 2, "output_tokens": "12"},
    # strings: escapes, unicode beyond the basic plane, control characters, empty
    {"replica": 'r "2" \\ \u00e9 \U0001f600 \u0001\t\n', "arrival_s": 1, "finished_s": 2},
    {"replica": "r-3", "arrival_s": 1, "finished_s": 2, "tenant": "", "trace_id": "a\\b"},
    # keys missing, a key of another case (not the column), keys the schema does not have
    {"replica": "r-4", "Arrival_s": 3.0, "finished_s": 4, "itl_buckets": [1, 2, 3], "extra": None},
    {},
]


def _every_key(path: Path) -> Path:
    """``path``'s lines with every column's key, null where it had none, as the plugin writes
    them (``core.records.write.json_line``); blank lines kept."""
    out = path.with_name(f"every-{path.name}")
    rows = path.read_text().split("\n")
    none = dict.fromkeys(COLUMNS)
    out.write_text("\n".join(json.dumps(none | json.loads(r)) if r.strip() else r for r in rows))
    return out


def test_lines_holding_every_key_read_typed_are_read_json_s_table_bit_for_bit(
    tmp_path: Path,
) -> None:
    """Each line's values turned into the columns' types by ``json_transform_strict`` (the
    transform ``read_json`` applies): the plugin's files and lines of every shape, every key
    there, give ``read_json``'s rows exactly; a file lacking a key is refused, and the engine
    reads it untyped."""
    tree = plugin_tree(tmp_path / "fleet")
    jsonl = [p for p in resolve([tree.root]) if p.suffix == ".jsonl"]
    every = [_every_key(p) for p in jsonl]
    assert _both(every, parts=2, numbered=True, typed=True) == (960, 0, 0)
    shapes = tmp_path / "shapes.jsonl"
    text = "\n".join(json.dumps(s) for s in _SHAPES if "Arrival_s" not in s)
    shapes.write_text("\n   \n\t \n" + text + "\n\n" + text)
    assert _both([_every_key(shapes)], typed=True) == (2 * (len(_SHAPES) - 1), 0, 0)
    with pytest.raises(duckdb.InvalidInputException, match="does not have key"):
        _both(jsonl[:1], typed=True)  # the test's plugin files write no trace_id
    with DuckEngine(every) as engine:
        assert engine.json_read == "typed" and engine.check() == (960, 960)
    rows = 960 + len(jsonl[0].read_text().splitlines())
    with DuckEngine([*every, jsonl[0]]) as engine:
        assert engine.json_read == "lines" and engine.check() == (rows, rows)


def test_the_lines_read_as_text_are_read_json_s_table_bit_for_bit(tmp_path: Path) -> None:
    """The plugin's files, and lines of every shape a value takes (reals for counts, exponents,
    extremes, escapes, keys missing or of another case, blank lines, lines of
    spaces or tabs, no final newline), give ``read_json``'s rows exactly."""
    tree = plugin_tree(tmp_path / "fleet")
    jsonl = [p for p in resolve([tree.root]) if p.suffix == ".jsonl"]
    rows, only_json, only_lines = _both(jsonl)
    assert rows == 960 and only_json == only_lines == 0  # two of three segments a replica
    shapes = tmp_path / "shapes.jsonl"
    text = "\n".join(json.dumps(s) for s in _SHAPES)
    shapes.write_text("\n   \n\t \n" + text + "\n\n" + text)
    assert _both([shapes]) == (2 * len(_SHAPES), 0, 0)
    with DuckEngine(resolve([tree.root])) as engine:
        assert engine.json_read == "lines" and engine.check() == (tree.rows, tree.rows)


@pytest.mark.parametrize(
    ("parts", "whole_bytes"),
    [(1, None), (3, None), (2, 3000), (3, "median"), (4, 0)],  # some of each, interleaved
)
def test_files_read_whole_in_parts_or_streamed_give_read_json_s_rows_and_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parts: int, whole_bytes: int | str | None
) -> None:
    """The files split among the threads' lists, some read whole and some as a stream: the
    rows are ``read_json``'s and each row's file is its place in the list given, so a column
    read later comes from the file that holds the row (``DuckEngine.with_deferred``)."""
    tree = plugin_tree(tmp_path / "fleet")
    jsonl = [p for p in resolve([tree.root]) if p.suffix == ".jsonl"]
    shapes = tmp_path / "shapes.jsonl"
    shapes.write_text("\n \n".join(json.dumps(s) for s in _SHAPES))
    files = [*jsonl[:5], shapes, *jsonl[5:]]
    sizes = sorted(p.stat().st_size for p in files)
    if whole_bytes == "median":
        whole_bytes = sizes[len(sizes) // 2]
    if isinstance(whole_bytes, int):
        assert whole_bytes == 0 or sizes[0] <= whole_bytes < sizes[-1]
        monkeypatch.setattr(lines, "WHOLE_BYTES", whole_bytes)
    whole = [str(p) for p in files if p.stat().st_size <= lines.WHOLE_BYTES]
    read = lines_sql(files, COLUMNS, parts=parts)
    assert read.whole == whole and read.sql.count("read_text(") == min(parts, len(whole))
    assert read.sql.count("read_csv(") == (len(whole) < len(files))
    assert _both(files, parts=parts, numbered=True) == (960 + len(_SHAPES), 0, 0)


def test_odd_files_give_read_json_s_rows_and_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A byte order mark, a line longer than ``read_json``'s largest object (which it reads),
    paths ``read_json`` takes as patterns (each reader numbers their files as it does): the
    rows and files ``read_json`` gives, read as lines."""
    monkeypatch.setattr(lines, "WHOLE_BYTES", 4 << 20)  # the long line's file read whole
    line = {"replica": "r", "arrival_s": 1.5, "finished_s": 2, "tenant": "x" * (3 << 19)}
    bom, long = tmp_path / "bom.jsonl", tmp_path / "long.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + (json.dumps(_SHAPES[0]) + "\n").encode() * 2)
    long.write_text(json.dumps(line) + "\n" + json.dumps(_SHAPES[1]))
    patterned = [tmp_path / "b?.jsonl", tmp_path / "bx.jsonl", tmp_path / "c[1].jsonl"]
    for p in patterned:
        p.write_text(json.dumps(_SHAPES[2]) + "\n")
    assert _both([bom, long], parts=2, numbered=True) == (4, 0, 0)
    assert _both([bom, *patterned, long], parts=2, numbered=True) == (8, 0, 0)  # b? read twice
    with DuckEngine([bom, long], columns=["replica", "tenant"]) as engine:
        assert engine.json_read == "lines"
        assert engine.query("SELECT tenant FROM records")["tenant"].str.len().max() == 3 << 19


def test_a_file_gone_not_utf_8_or_not_a_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file not UTF-8 (``read_text`` refuses it) is read by ``read_json``, whose message names
    it; so is one gone since its size was read (``read_text`` passes over it), one gone before,
    and a folder named as a file."""
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    write_records(good, synthetic_fleet(1, 2, seed=3))
    bad.write_bytes(b'{"replica": "r\xff", "arrival_s": 1, "finished_s": 2}\n')
    (tmp_path / "folder.jsonl").mkdir()
    with pytest.raises(RecordError, match=r"bad\.jsonl"):
        DuckEngine([good, bad])
    with pytest.raises(RecordError, match=r"gone\.jsonl"):
        DuckEngine([good, tmp_path / "gone.jsonl"])
    with pytest.raises(RecordError, match=r"folder\.jsonl"):
        DuckEngine([good, tmp_path / "folder.jsonl"])
    monkeypatch.setattr(lines, "_size", lambda path: 10)  # as if it were there when listed
    with pytest.raises(RecordError, match=r"gone\.jsonl"):
        DuckEngine([good, tmp_path / "gone.jsonl"], defer=["request_id"])
    with pytest.raises(RecordError, match=r"gone\.jsonl"):  # read typed, every key there
        DuckEngine([_every_key(good), tmp_path / "gone.jsonl"], defer=["request_id"])


@pytest.mark.parametrize(
    ("line", "reading", "read"),
    [
        # read_json casts it, and the typed reading as read_json does
        ('{"replica": "r", "arrival_s": true, "finished_s": 2}', "typed", 1.0),
        # a key lacking (``tenant``): the untyped reading refuses the true, read_json casts it
        ('{"replica": "r", "arrival_s": true, "finished_s": 2}', "read_json", 1.0),
        ('{"replica": "r", "arrival_s": 1, "finished_s": 2}\r', "read_json", 1.0),  # a CR
    ],
)
def test_a_line_refused_as_text_is_read_by_read_json(
    tmp_path: Path, line: str, reading: str, read: float
) -> None:
    """A line a text reading refuses but ``read_json`` reads: the engine's table is
    ``read_json``'s."""
    path = tmp_path / "odd.jsonl"
    path.write_text(line + "\n")
    columns = ["replica", "arrival_s", "finished_s"]
    if reading == "read_json" and "\r" not in line:
        columns.append("tenant")
    with DuckEngine([path], columns=columns) as engine:
        got = engine.query("SELECT arrival_s FROM records")
        assert engine.json_read == reading
    assert got["arrival_s"].tolist() == [read]


@pytest.mark.parametrize("every", [False, True])
@pytest.mark.parametrize("line", ["[1, 2]", "5", '"replica"', '{"replica": "r"} {"x": 1}'])
def test_a_line_that_is_not_one_object_is_named_not_read_as_nulls(
    tmp_path: Path, line: str, every: bool
) -> None:
    """A line that is JSON but not an object, or more than one value, is one error naming the
    file and its line, as ``read_json`` names it: never a row of NULLs (``every``: the other
    lines hold every key, so the typed reading reads them)."""
    good, path = tmp_path / "good.jsonl", tmp_path / "odd.jsonl"
    records = synthetic_fleet(1, 2, seed=3)
    write_records(good, records)
    write_records(path, records)
    if every:
        good, path = _every_key(good), _every_key(path)
        if line.startswith("{"):  # every key before the value after it
            line = json.dumps(dict.fromkeys(COLUMNS) | {"replica": "r"}) + ' {"x": 1}'
    with path.open("a") as out:
        out.write(line + "\n")
    with pytest.raises(RecordError, match=r"odd\.jsonl, row 3: not (valid JSON|a JSON object)"):
        DuckEngine([good, path])
