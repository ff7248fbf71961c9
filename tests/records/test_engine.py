"""The DuckDB engine's ``records`` view of a dataset: every row read and counted, typed and
filled as the project's own reader fills it, filters as the in-memory filter keeps, bad files
named; and the portable histogram reductions equal to the same counts computed in numpy."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fleetwatch.core.records.schema import RecordError
from fleetwatch.records.dataset import read_dataset, resolve
from fleetwatch.records.engine.duck import DuckEngine
from fleetwatch.records.engine.reductions import (
    DERIVED,
    RATIO,
    RELATIVE_ERROR,
    ZERO_BUCKET,
    bucket_sql,
    bucket_values,
    weighted_quantile,
)
from fleetwatch.records.engine.scan import open_scan
from fleetwatch.records.filters import RecordFilter
from tests.records.plugin_tree import PluginTree, compacted, plugin_tree


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> PluginTree:
    return plugin_tree(tmp_path_factory.mktemp("engine") / "fleet")


def test_every_row_of_a_mixed_dataset_is_read_once(tree: PluginTree) -> None:
    files = resolve([tree.root])
    with DuckEngine(files) as engine:
        assert engine.check() == (tree.rows, tree.rows)
        got = engine.query("SELECT request_id, finished_s FROM records")
    whole = read_dataset([tree.whole]).frame
    assert len(got) == tree.rows and got["request_id"].is_unique
    assert set(got["request_id"]) == set(whole["request_id"])
    mine = got.set_index("request_id")["finished_s"].sort_index()
    theirs = whole.set_index("request_id")["finished_s"].sort_index()
    assert mine.to_numpy().tolist() == theirs.to_numpy().tolist()


def test_a_query_of_some_replicas_opens_only_the_files_that_may_hold_them(
    tree: PluginTree, tmp_path: Path
) -> None:
    """``frames(..., replicas=...)`` reads the rows it would read over every file, from the
    Parquet files whose statistics may hold those replicas (and the JSON lines), whether a file
    holds one replica or several."""
    whole = read_dataset([tree.whole]).frame
    names = sorted(str(r) for r in whole["replica"].unique())
    shared = tmp_path / "shared"
    shared.mkdir()
    for i, part in enumerate((names[: len(names) // 2], names[len(names) // 2 :])):
        rows = whole[whole["replica"].isin(part)]
        rows.to_parquet(shared / f"part-{i}.parquet", index=False)
    for root in (tree.root, shared):
        files = resolve([root])
        with DuckEngine(files) as engine:
            for group in ([names[0]], names[1:3], names):
                where = "replica IN (" + ", ".join(f"'{r}'" for r in group) + ")"
                ids = ["request_id", "finished_s"]
                narrowed = pd.concat(list(engine.frames(ids, where, replicas=group)))
                everywhere = pd.concat(list(engine.frames(ids, where)))
                assert sorted(narrowed["request_id"]) == sorted(everywhere["request_id"])
                assert len(narrowed) == int(whole["replica"].isin(group).sum())
            held = engine._holding([names[0]])
            parquet = [p for p in files if p.suffix == ".parquet"]
            assert parquet and held <= set(parquet)
            if root == shared:
                assert held == {shared / "part-0.parquet"}


def test_the_filter_keeps_what_the_in_memory_filter_keeps(tree: PluginTree) -> None:
    whole = read_dataset([tree.whole]).frame
    mid = float(np.median(whole["finished_s"]))
    where = RecordFilter(since_s=mid, replicas=frozenset({"replica-1", "replica-4"}))
    with DuckEngine(resolve([tree.root]), where=where) as engine:
        total, kept = engine.check()
        ids = set(engine.query("SELECT request_id FROM records")["request_id"])
    assert total == tree.rows
    assert ids == set(whole.loc[where.mask(whole), "request_id"])
    assert kept == len(ids) > 0


def test_a_value_a_file_leaves_out_reads_as_the_schema_default(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    path.write_text(
        '{"request_id": "a", "replica": "r", "model": "m", "arrival_s": 1.0, '
        '"finished_s": 2.0, "scheduled_s": 1.1, "first_token_s": 1.5}\n'
    )
    with DuckEngine([path]) as engine:
        row = engine.query("SELECT * FROM records").iloc[0]
        only = RecordFilter(traffic_classes=frozenset({"default"}))
    assert (row["traffic_class"], row["status"], row["output_tokens"]) == ("default", "ok", 0)
    with DuckEngine([path], where=only) as engine:
        assert engine.check() == (1, 1)
    frame = read_dataset([path]).frame.iloc[0]
    assert (frame["traffic_class"], frame["status"]) == ("default", "ok")


def test_a_foreign_json_file_is_named(tree: PluginTree, tmp_path: Path) -> None:
    foreign = tmp_path / "metrics.jsonl"
    foreign.write_text('{"cpu": 0.5}\n{"cpu": 0.7}\n')
    with pytest.raises(
        RecordError, match=r"metrics\.jsonl: 2 row\(s\) lack one of replica, arrival_s"
    ):
        open_scan([tree.root, foreign])
    with open_scan([tree.root, foreign], skip_bad=True) as scan:
        assert [p for p, _ in scan.skipped] == [foreign]
        assert scan.rows == tree.rows


def test_a_line_that_is_not_json_is_named_as_the_reader_names_it(
    tree: PluginTree, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(RecordError, match=r"bad\.jsonl, row 1: not valid JSON"):
        open_scan([tree.root, bad])
    with open_scan([tree.root, bad], skip_bad=True) as scan:
        assert len(scan.skipped) == 1 and scan.rows == tree.rows


def test_a_filter_that_keeps_nothing_is_refused(tree: PluginTree) -> None:
    where = RecordFilter(models=frozenset({"no-such-model"}))
    with pytest.raises(RecordError, match="no records match --model no-such-model"):
        open_scan([tree.root], where=where)


def _numpy_bucket(v: np.ndarray) -> np.ndarray:
    out = np.full(v.shape, ZERO_BUCKET, dtype=np.int64)
    pos = v > 0
    out[pos] = np.floor(np.log(v[pos]) / math.log(RATIO)).astype(np.int64)
    return out


@pytest.mark.parametrize("signal", ["ttft_s", "tpot_s", "e2e_s"])
def test_the_histogram_reduction_counts_what_numpy_counts(tree: PluginTree, signal: str) -> None:
    whole = read_dataset([tree.whole]).frame
    ok = whole[(whole["status"] == "ok") & whole[signal].notna()]
    expect = (
        pd.DataFrame(
            {"replica": ok["replica"].astype(str), "b": _numpy_bucket(ok[signal].to_numpy())}
        )
        .value_counts()
        .sort_index()
    )
    with DuckEngine(resolve([tree.root])) as engine:
        got = engine.query(
            f"SELECT replica, {bucket_sql(DERIVED[signal])} AS b, count(*) AS n FROM records "
            f"WHERE status = 'ok' AND {DERIVED[signal]} IS NOT NULL GROUP BY 1, 2"
        )
    got = got.set_index(["replica", "b"])["n"].sort_index()
    assert got.index.tolist() == expect.index.tolist()
    assert got.tolist() == expect.tolist()


def test_quantiles_from_buckets_are_within_the_stated_error() -> None:
    rng = np.random.default_rng(3)
    v = rng.lognormal(-1.0, 1.2, 50_000)
    b = _numpy_bucket(v)
    keys, counts = np.unique(b, return_counts=True)
    for q in (0.01, 0.5, 0.9, 0.99, 0.999):
        est = float(weighted_quantile(bucket_values(keys), counts, q)[0])
        exact = float(np.quantile(v, q))
        assert abs(est / exact - 1.0) <= RELATIVE_ERROR + 1e-12


def test_weighted_quantile_is_numpy_quantile_of_the_expanded_sample() -> None:
    rng = np.random.default_rng(0)
    for _ in range(500):
        k = int(rng.integers(1, 8))
        v = rng.choice(rng.normal(size=30), k, replace=False)
        c = rng.integers(0, 5, k)
        if not c.sum():
            continue
        q = np.concatenate(([0.0, 1.0], rng.uniform(0, 1, 5)))
        assert np.allclose(weighted_quantile(v, c, q), np.quantile(np.repeat(v, c), q))


def test_an_implausible_record_is_named_as_the_reader_names_it(
    tree: PluginTree, tmp_path: Path
) -> None:
    """The engine reads values, not rules: a row the reader would refuse (a request finished a
    week and more after it arrived) sends its file to the reader, for the reader's own line."""
    odd = tmp_path / "odd.jsonl"
    odd.write_text(
        '{"request_id": "a", "replica": "r", "model": "m", "arrival_s": 1.0, '
        '"finished_s": 2.0}\n'
        '{"request_id": "b", "replica": "r", "model": "m", "arrival_s": 1.0, '
        '"finished_s": 1e7}\n'
    )
    with pytest.raises(RecordError, match=r"odd\.jsonl, row 2, field 'finished_s': is 1e\+07 s"):
        open_scan([tree.root, odd])


def test_skip_bad_leaves_out_the_bad_file_only_not_one_whose_name_it_begins(
    tmp_path: Path,
) -> None:
    from fleetwatch.records import write_records
    from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet

    good = tmp_path / "part-1.jsonl"
    write_records(good, synthetic_fleet(2, 30, seed=1))
    (tmp_path / "part-10.jsonl").write_text("{not json\n")
    with open_scan([tmp_path], skip_bad=True) as scan:
        assert [p.name for p, _ in scan.skipped] == ["part-10.jsonl"]
        assert scan.files == (good,) and scan.rows == 60


def test_quantiles_from_counts_are_numpys_to_the_bit() -> None:
    rng = np.random.default_rng(4)
    for _ in range(2000):
        v = rng.lognormal(size=int(rng.integers(2, 60)))
        q = rng.uniform(0, 1, 3)
        assert np.array_equal(weighted_quantile(v, np.ones(len(v)), q), np.quantile(v, q))


def test_engines_working_at_once_share_the_memory_limit(tree: PluginTree) -> None:
    """compare's two runs sort at once: each engine holds half the limit, not the whole."""
    from fleetwatch.records.engine.duck import MEMORY_LIMIT, _bytes

    with DuckEngine(resolve([tree.root])) as engine:
        engine.share_memory(2)
        limit = str(engine.scalar("SELECT current_setting('memory_limit')"))
        threads = int(engine.scalar("SELECT current_setting('threads')"))
    whole = _bytes(MEMORY_LIMIT)
    assert whole is not None
    got = _bytes(limit)
    assert got is not None and abs(got - whole / 2) <= 0.01 * whole, limit
    assert threads == max(1, (os.cpu_count() or 1) // 2)
    assert _bytes("1.5GiB") == 3 * 2**29 and _bytes("512MB") == 512 * 10**6
    assert _bytes("lots") is None and _bytes("-1MB") is None


def test_the_json_lines_table_is_held_in_the_engine_s_own_file_and_gone_when_closed(
    tree: PluginTree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JSON lines' columns are written, compressed, to a database file of the engine's
    temporary folder (a temporary table past the memory limit would be spilled whole and read
    back: a third more CPU an hour of a fleet); closing the engine leaves nothing there, nor
    does a read that fails half way (its one line naming the file as ever)."""
    import tempfile

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(RecordError, match=r"bad\.jsonl, row 1: not valid JSON"):
        DuckEngine([*resolve([tree.root]), bad])
    assert not list(temporary.iterdir())
    with DuckEngine(resolve([tree.root])) as engine:
        folder = Path(engine._tmp.name)
        held = engine.query(
            "SELECT database_name, temporary FROM duckdb_tables() WHERE table_name = 'scanned'"
        )
        assert held.to_dict("records") == [{"database_name": "fw_scanned", "temporary": False}]
        assert (folder / "scanned.duckdb").is_file()
        assert engine.check() == (tree.rows, tree.rows)
    assert not folder.exists() and not list(temporary.iterdir())


def test_a_file_named_twice_is_read_twice_when_a_query_is_narrowed_to_its_replica(
    tree: PluginTree, tmp_path: Path
) -> None:
    """A Parquet file a caller lists twice is read twice, by the whole view and by a query
    narrowed to the replicas a file may hold alike."""
    whole = read_dataset([tree.whole]).frame
    files = _one_replica_a_file(whole, tmp_path / "one-each")
    with DuckEngine([files[0], *files]) as engine:
        name = str(engine.query("SELECT min(replica) AS r FROM records")["r"].iloc[0])
        held = int(engine.scalar(f"SELECT count(*) FROM records WHERE replica = '{name}'"))
        got = pd.concat(list(engine.frames(["arrival_s"], f"replica = '{name}'", replicas=[name])))
        assert len(got) == held == 2 * int((whole["replica"] == name).sum())


@pytest.mark.parametrize("limit", [3, 1 << 21])
def test_order_statistics_are_the_sorted_values_whether_ranges_are_narrowed_or_not(
    tree: PluginTree, limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rank's value is the sorted sample's, exactly: ranks sharing a bucket share one
    fetch, and a range holding more than the fetch limit (3: always narrowed) is cut down
    first; a value repeated past the limit (zero cached tokens) is found without a fetch."""
    from fleetwatch.records.engine import reductions

    monkeypatch.setattr(reductions, "_FETCH_LIMIT", limit)
    whole = read_dataset([tree.whole]).frame
    e2e = np.sort((whole["finished_s"] - whole["arrival_s"]).to_numpy(np.float64))
    cached = np.sort(whole["cached_prompt_tokens"].fillna(0).to_numpy(np.float64))
    ranks = [0, 1, len(e2e) // 2, len(e2e) // 2 + 1, len(e2e) - 2, len(e2e) - 1]
    with DuckEngine(resolve([tree.root])) as engine:
        got = reductions.order_statistics(
            engine, "(finished_s - arrival_s)", "FROM records WHERE TRUE", ranks
        )
        zeros = reductions.order_statistics(
            engine, "CAST(cached_prompt_tokens AS DOUBLE)", "FROM records WHERE TRUE", [0, 1]
        )
        q = reductions.exact_quantile(
            engine, "(finished_s - arrival_s)", "FROM records WHERE TRUE", 0.99, len(e2e)
        )
    assert got == [float(e2e[k]) for k in ranks]
    assert zeros == [float(cached[0]), float(cached[1])]
    assert q == float(np.quantile(e2e, 0.99))
    with DuckEngine(resolve([tree.root])) as engine, pytest.raises(ValueError, match="rank"):
        reductions.order_statistics(engine, "arrival_s", "FROM records WHERE TRUE", [len(e2e)])


@pytest.mark.parametrize("limit", [3, 1 << 21])
def test_quantiles_of_several_values_share_one_fetch_and_are_numpys(
    tree: PluginTree, limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``exact_quantiles`` over the same rows: each value's own histogram (given, of finer
    buckets, or queried), one fetch for all their ranges, each quantile numpy's to the bit."""
    from fleetwatch.records.engine import reductions

    monkeypatch.setattr(reductions, "_FETCH_LIMIT", limit)
    whole = read_dataset([tree.whole]).frame
    e2e = (whole["finished_s"] - whole["arrival_s"]).to_numpy(np.float64)
    prompt = whole["prompt_tokens"].to_numpy(np.float64)
    exprs = ("(finished_s - arrival_s)", "CAST(prompt_tokens AS DOUBLE)")
    source = "FROM records WHERE TRUE"
    fetches: list[str] = []
    with DuckEngine(resolve([tree.root])) as engine:
        fine = engine.query(
            f"SELECT {reductions.bucket_sql(exprs[0], 1.0005)} AS b, count(*) AS n "
            f"{source} GROUP BY 1"
        )
        query = engine.query

        def counted(sql: str) -> object:
            if sql.startswith("SELECT CASE WHEN"):
                fetches.append(sql)
            return query(sql)

        monkeypatch.setattr(engine, "query", counted)
        got = reductions.exact_quantiles(
            engine,
            source,
            [
                (exprs[0], 0.5, len(e2e), fine, 1.0005),
                (exprs[1], 0.9, len(prompt), None, reductions.RATIO),
                (exprs[0], 0.99, len(e2e), None, reductions.RATIO),
            ],
        )
    assert got == [
        float(np.quantile(e2e, 0.5)),
        float(np.quantile(prompt, 0.9)),
        float(np.quantile(e2e, 0.99)),
    ]
    assert len(fetches) == 1


@pytest.mark.parametrize(("schemas", "compared"), [(16, 64), (1, 64), (None, 64), (16, 1), (1, 1)])
def test_parquet_files_of_other_schemas_read_alike(
    tmp_path: Path, schemas: int | None, compared: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files written by other versions (a column left out, columns in another order) are each
    read by their own names, whether each layout has its scan (up to ``_MAX_SCHEMAS``) or one
    scan matches names in every file (past it, or when the files' schemas are not told apart:
    neither pyarrow nor DuckDB read them), and whether a file's schema was compared with the
    others' or, past ``footers._COMPARED``, taken as its own."""
    import fleetwatch.records.engine.duck as duck
    import fleetwatch.records.engine.footers as footers

    monkeypatch.setattr(footers, "_COMPARED", compared)
    if schemas is None:
        monkeypatch.setattr(duck, "read_footers", lambda *args: None)
        monkeypatch.setattr(duck.DuckEngine, "_parquet_groups", lambda self, files: None)
    else:
        monkeypatch.setattr(duck, "_MAX_SCHEMAS", schemas)
    base = {
        "request_id": ["a", "b"],
        "replica": ["r1", "r2"],
        "model": ["m", "m"],
        "arrival_s": [1.0, 2.0],
        "scheduled_s": [1.1, 2.1],
        "first_token_s": [1.5, 2.5],
        "finished_s": [2.0, 3.0],
        "prompt_tokens": [10, 20],
        "cached_prompt_tokens": [4, 5],
    }
    frame = pd.DataFrame(base)
    frame.to_parquet(tmp_path / "new.parquet")
    frame.drop(columns=["cached_prompt_tokens"]).to_parquet(tmp_path / "old.parquet")
    frame[list(reversed(frame.columns))].to_parquet(tmp_path / "other.parquet")
    files = sorted(tmp_path.glob("*.parquet"))
    with DuckEngine(files) as engine:
        got = engine.query(
            "SELECT filename, request_id, cached_prompt_tokens, prompt_tokens, arrival_s "
            "FROM everything ORDER BY 1, 2"
        )
    assert len(got) == 6
    by_file = {Path(f).name: g for f, g in got.groupby("filename")}
    assert by_file["old.parquet"]["cached_prompt_tokens"].tolist() == [0, 0]  # the default
    for name in ("new.parquet", "other.parquet"):
        assert by_file[name]["cached_prompt_tokens"].tolist() == [4, 5]
        assert by_file[name]["prompt_tokens"].tolist() == [10, 20]
        assert by_file[name]["arrival_s"].tolist() == [1.0, 2.0]


def _one_replica_a_file(whole: pd.DataFrame, root: Path) -> list[Path]:
    """``whole``'s records written as the project writes them (stamped), a file a replica."""
    compacted(root, whole, parts=1)
    return resolve([root])


def test_each_parquet_footer_is_read_once_for_the_engine_s_life(
    tree: PluginTree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The schemas, the stamps and the statistics (nulls, the replicas a file holds) come from
    one read of each footer when the engine opens, whatever the queries after."""
    import pyarrow as pa

    whole = read_dataset([tree.whole]).frame
    files = _one_replica_a_file(whole, tmp_path / "one-each")
    read = []
    real = pa.OSFile
    monkeypatch.setattr(pa, "OSFile", lambda path, *a: read.append(Path(path)) or real(path, *a))
    with DuckEngine(files) as engine:
        assert engine.check() == (len(whole), len(whole))
        assert engine.vouched() == len(whole)
        name = str(whole["replica"].iloc[0])
        got = pd.concat(list(engine.frames(["request_id"], f"replica = '{name}'", replicas=[name])))
        assert len(got) == int((whole["replica"] == name).sum())
        assert len(engine._holding([name])) == 1
    assert sorted(read) == sorted(files)


def test_labels_pinned_by_the_footers_take_the_categories_a_scan_finds(
    tree: PluginTree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where every Parquet file holds one replica (and one model), their categories come from
    the footers, with no scan: the same categories, in the same order, as the scan's; a file of
    two replicas, a filter or JSON lines leave them to the scan."""
    whole = read_dataset([tree.whole]).frame
    files = _one_replica_a_file(whole, tmp_path / "one-each")

    def categories(engine: DuckEngine) -> dict[str, list[str]]:
        got = pd.concat(list(engine.frames(["replica", "model", "status"], rows=1 << 10)))
        return {c: [str(v) for v in got[c].cat.categories] for c in ("replica", "model", "status")}

    with DuckEngine(files) as engine:
        assert engine.pinned("replica") == sorted(str(r) for r in whole["replica"].unique())
        assert engine.pinned("model") is not None
        pinned = categories(engine)
    with DuckEngine(files, where=RecordFilter(replicas=frozenset({"replica-1"}))) as engine:
        assert engine.pinned("replica") is None
    with DuckEngine(files) as engine:
        monkeypatch.setattr(engine, "pinned", lambda column: None)
        assert categories(engine) == pinned
    shared = tmp_path / "shared"
    shared.mkdir()
    whole.to_parquet(shared / "all.parquet", index=False)
    with DuckEngine([shared / "all.parquet"]) as engine:
        assert engine.pinned("replica") is None
        assert categories(engine)["replica"] == pinned["replica"]


def test_a_parquet_file_pyarrow_cannot_read_is_named_as_ever(tmp_path: Path) -> None:
    """A file whose footer is not Parquet is named by DuckDB's reading, in one line."""
    from fleetwatch.records import write_records
    from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet

    write_records(tmp_path / "a.parquet", synthetic_fleet(2, 10, seed=1))
    (tmp_path / "b.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(RecordError) as info:
        DuckEngine(sorted(tmp_path.glob("*.parquet")))
    assert "b.parquet" in str(info.value) and "\n" not in str(info.value)


def test_a_parquet_file_whose_statistics_are_not_utf8_is_named_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A string column whose values (and so its statistics) are not UTF-8: the footers are left
    to DuckDB, whose reading names the file; one line, exit 2."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fleetwatch.cli import main

    rows = 30
    bad = pa.array([b"\xffr1"] * rows, type=pa.binary()).view(pa.string())
    table = pa.table(
        {
            "request_id": [f"q{i}" for i in range(rows)],
            "replica": bad,
            "model": ["m"] * rows,
            "status": ["ok"] * rows,
            "arrival_s": [float(i) for i in range(rows)],
            "scheduled_s": [i + 0.1 for i in range(rows)],
            "first_token_s": [i + 0.2 for i in range(rows)],
            "finished_s": [i + 0.5 for i in range(rows)],
            "prompt_tokens": [10] * rows,
            "output_tokens": [5] * rows,
        }
    )
    path = tmp_path / "utf.parquet"
    pq.write_table(table, path)
    assert main(["fleet", "outliers", str(path), "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert "utf.parquet" in err and len(err.splitlines()) == 1, err


def test_a_null_in_a_parquet_column_with_a_default_reads_as_the_default(tmp_path: Path) -> None:
    """A column whose statistics count no null in any file is read as it is; one file holding a
    null (or a file without statistics) keeps the default filled in, row by row: every query
    reads the same rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    base = {
        "request_id": ["a", "b"],
        "replica": ["r1", "r2"],
        "model": ["m", "m"],
        "arrival_s": [1.0, 2.0],
        "finished_s": [2.0, 3.0],
        "status": ["error", "ok"],
        "output_tokens": [3, 4],
    }
    clean = tmp_path / "clean.parquet"
    pq.write_table(pa.table(base), clean)
    holey = tmp_path / "holey.parquet"
    pq.write_table(pa.table({**base, "status": ["error", None], "output_tokens": [None, 4]}), holey)
    bare = tmp_path / "bare.parquet"
    pq.write_table(pa.table(base), bare, write_statistics=False)
    filled = [("error", 0), ("error", 3), ("ok", 4), ("ok", 4)]
    for files, full, want in (
        ([clean], True, [("error", 3), ("ok", 4)]),
        ([clean, holey], False, filled),
        ([clean, bare], False, [("error", 3), ("ok", 4)] * 2),
    ):
        with DuckEngine(files) as engine:
            for _ in range(3):
                got = engine.query("SELECT status, output_tokens FROM records")
                assert sorted(zip(got["status"], got["output_tokens"], strict=True)) == sorted(want)
            assert ({"status", "output_tokens"} <= engine._full) is full


def test_each_files_one_replica_is_said_by_its_number_and_batches_hold_the_rows_asked(
    tmp_path: Path,
) -> None:
    """A dataset of files of one replica each, two files a replica: ``by_file`` numbers every
    row's file, and the number's value is the row's own replica, whatever the filter keeps; no
    number where a file holds two replicas or JSON lines are in the dataset. Batches streamed
    in parallel are put together to the rows asked (but the last), every row once."""
    from fleetwatch.records import write_records
    from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet

    whole = synthetic_fleet(4, 300, seed=3)
    files = compacted(tmp_path / "compacted", whole)
    since = float(whole["arrival_s"].median())
    for where in (None, RecordFilter(since_s=since)):
        with DuckEngine(files, where=where, threads=2) as engine:
            coded = engine.by_file("replica")
            assert coded is not None
            source, values = coded
            assert sorted(set(values)) == sorted(whole["replica"].astype(str).unique())
            got = engine.query(f"SELECT replica, fw_file FROM {source}")
            assert len(got) == int(engine.query("SELECT count(*) AS n FROM records")["n"][0])
            named = [values[i] for i in got["fw_file"]]
            assert named == got["replica"].astype(str).tolist()
            batches = list(engine.arrow_batches(f"SELECT fw_file FROM {source}", 500))
            assert sum(b.num_rows for b in batches) == len(got)
            assert all(b.num_rows >= 500 for b in batches[:-1]) and len(batches) > 1
    both = tmp_path / "both.parquet"
    write_records(both, whole)
    with DuckEngine([both]) as engine:
        assert engine.by_file("replica") is None
    tree = plugin_tree(tmp_path / "tree")
    with DuckEngine(sorted(tree.root.rglob("records-*"))) as engine:
        assert engine.by_file("replica") is None  # JSON lines beside the Parquet segments


def test_deferred_ids_are_read_again_from_the_files_of_the_rows_asked_for(
    tree: PluginTree,
) -> None:
    """With the ids deferred, the JSON lines' table holds none: the view has no such column (a
    query naming one fails, never reads NULL), and a frame asking for them reads them again
    from the JSON-lines files holding the rows it keeps (and the Parquet files in place): the
    same rows and ids as an engine holding them."""
    from fleetwatch.records.engine.duck import DEFERRED

    files = resolve([tree.root])
    whole = read_dataset([tree.whole]).frame
    name = str(whole["replica"].iloc[0])
    cond = f"replica = '{name}' AND finished_s >= {float(whole['finished_s'].median())!r}"
    asked = ["request_id", "trace_id", "replica", "finished_s"]
    with DuckEngine(files) as engine:
        want = pd.concat(list(engine.frames(asked, cond, replicas=[name])))
    with DuckEngine(files, defer=DEFERRED) as engine:
        assert engine.deferred == DEFERRED and "request_id" not in engine.columns
        assert engine.check() == (tree.rows, tree.rows)
        with pytest.raises(RecordError, match="request_id"):
            engine.query("SELECT request_id FROM records")
        got = pd.concat(list(engine.frames(asked, cond, replicas=[name])))
        source = engine.with_deferred(cond)
    assert sorted(got["request_id"]) == sorted(want["request_id"]) and len(got) > 0
    key = ["request_id", "finished_s"]
    pairs = got[key].sort_values(key).reset_index(drop=True)
    assert pairs.equals(want[key].sort_values(key).reset_index(drop=True))
    mine = [p for p in files if p.suffix == ".jsonl" and p.parent.name == name]
    theirs = [p for p in files if p.suffix == ".jsonl" and p.parent.name != name]
    assert mine and theirs
    assert all(str(p) not in source for p in theirs)
    since = float(whole["finished_s"].quantile(0.75))  # the engine's filter holds too
    kept = RecordFilter(since_s=since)
    with DuckEngine(files, where=kept) as engine:
        want = pd.concat(list(engine.frames(asked, cond, replicas=[name])))
    with DuckEngine(files, where=kept, defer=DEFERRED) as engine:
        got = pd.concat(list(engine.frames(asked, cond, replicas=[name])))
    assert 0 < len(got) < len(pairs) and (got["finished_s"] >= since).all()
    assert sorted(got["request_id"]) == sorted(want["request_id"])
