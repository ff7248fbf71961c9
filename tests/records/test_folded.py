"""The dataset's check folded into each command's first query: every row is counted and checked
by the scan that reduces it (no scan of its own runs on good records), and a bad row is named by
the same line, exit 2, as when the dataset is checked first; with a filter or ``--skip-bad`` the
dataset is checked first, as before."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.core.records.schema import RecordError
from fleetwatch.records.engine.duck import DuckEngine
from fleetwatch.records.engine.folded import CHECK_COLUMNS, check_columns, checked
from fleetwatch.records.engine.scan import open_scan
from fleetwatch.records.filters import RecordFilter
from fleetwatch.slo.load import load_spec
from fleetwatch.slo.stream import engine_counts
from tests.records.plugin_tree import PluginTree, plugin_tree

SPEC_TEXT = """version: fleetwatch/slo/v1
service: fleet
evaluation_interval: 30s
slos:
  - name: availability
    objective: 99.9
    period: 30d
    selector: {model: m}
    sli: {kind: availability, bad: [error, aborted]}
  - name: ttft
    objective: 99
    period: 30d
    sli: {kind: latency, signal: ttft, threshold: 0.5}
"""
ODD = (
    '{"request_id": "a", "replica": "r", "model": "m", "arrival_s": 1.0, "finished_s": 2.0}\n'
    '{"request_id": "b", "replica": "r", "model": "m", "arrival_s": 1.0, "finished_s": 1e7}\n'
)
FOREIGN = '{"cpu": 0.5}\n{"cpu": 0.7}\n'
COMMANDS = ("backtest", "outliers", "tail", "compare")


def _argv(command: str, spec: Path, *paths: Path) -> list[str]:
    """The command line of ``command`` over the dataset of ``paths``, in JSON; compare's runs
    are the first path and the rest (the first twice when alone)."""
    if command == "backtest":
        return ["slo", "backtest", str(spec), *(f"--records={p}" for p in paths), "--json"]
    if command == "compare":
        before, *after = paths
        return ["fleet", "compare", str(before), *map(str, after or [before]), "--json"]
    return ["fleet", command, *map(str, paths), "--json"]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> PluginTree:
    return plugin_tree(tmp_path_factory.mktemp("folded") / "fleet")


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("spec") / "slo.yaml"
    path.write_text(SPEC_TEXT)
    return path


@pytest.fixture
def no_check_scan(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the engine's own check scans (``DuckEngine.check`` calls)."""
    calls: list[int] = []
    own = DuckEngine.check

    def counting(self: DuckEngine) -> tuple[int, int]:
        calls.append(1)
        return own(self)

    monkeypatch.setattr(DuckEngine, "check", counting)
    return calls


def test_the_backtests_first_scan_counts_and_checks_every_row(
    tree: PluginTree, no_check_scan: list[int]
) -> None:
    spec = load_spec(SPEC_TEXT)
    with open_scan([tree.root], fold_check=True) as scan:
        assert scan.engine.counted is None
        counts = engine_counts(spec, scan.engine)
        assert counts.records == scan.rows == tree.rows
        assert scan.engine.counted == (tree.rows, tree.rows)
        assert check_columns(scan.engine) == ""  # checked once: later queries add nothing
    assert not no_check_scan


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_on_good_records_runs_no_check_scan_of_its_own(
    tree: PluginTree,
    spec: Path,
    command: str,
    no_check_scan: list[int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(_argv(command, spec, tree.root)) == 0, capsys.readouterr().err
    assert not no_check_scan


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("bad", "said"),
    [
        (ODD, r"odd\.jsonl, row 2, field 'finished_s': is 1e\+07 s after arrival_s"),
        (FOREIGN, r"odd\.jsonl: 2 row\(s\) lack one of replica, arrival_s, finished_s"),
    ],
    ids=["implausible", "not-records"],
)
def test_a_bad_row_is_named_as_when_the_dataset_is_checked_first(
    tree: PluginTree,
    spec: Path,
    tmp_path: Path,
    command: str,
    bad: str,
    said: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    odd = tmp_path / "odd.jsonl"
    odd.write_text(bad)
    with pytest.raises(RecordError) as first:
        open_scan([tree.root, odd])
    assert re.search(said, str(first.value))
    assert main(_argv(command, spec, tree.root, odd)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and re.search(said, lines[0]), captured.err
    assert str(first.value) in lines[0]


@pytest.mark.parametrize(
    "kwargs",
    [{"where": RecordFilter(replicas=frozenset({"replica-1"}))}, {"skip_bad": True}],
    ids=["filter", "skip-bad"],
)
def test_a_filter_or_skip_bad_checks_the_dataset_first(
    tree: PluginTree, kwargs: dict[str, object]
) -> None:
    with open_scan([tree.root], fold_check=True, **kwargs) as scan:  # type: ignore[arg-type]
        assert scan.engine.counted is not None
        assert check_columns(scan.engine) == ""
        got = scan.engine.query("SELECT count(*) AS n FROM records")
        assert checked(scan.engine, got).equals(got)


def test_the_check_columns_leave_the_result(tree: PluginTree) -> None:
    with open_scan([tree.root], fold_check=True) as scan:
        got = scan.engine.query(
            f"SELECT replica, count(*) AS n{check_columns(scan.engine)} FROM records GROUP BY 1"
        )
        assert set(CHECK_COLUMNS) <= set(got.columns)
        kept = checked(scan.engine, got)
    assert list(kept.columns) == ["replica", "n"] and int(kept["n"].sum()) == tree.rows


def test_models_are_listed_as_model_counts_them_with_the_rows_checked(tmp_path: Path) -> None:
    """The models from the stored column, a record naming none (or naming the unnamed model)
    under ``UNNAMED`` once, sorted; the same query counts the rows."""
    from fleetwatch.records.engine.folded import models
    from fleetwatch.records.engine.reductions import MODEL, UNNAMED

    path = tmp_path / "m.jsonl"
    rows = [("b", "x"), ("a", "y"), (None, "z"), (UNNAMED, "w"), ("b", "v")]
    path.write_text(
        "".join(
            f'{{"request_id": "{rid}", "replica": "r", '
            + ("" if m is None else f'"model": "{m}", ')
            + '"arrival_s": 1.0, "finished_s": 2.0}\n'
            for m, rid in rows
        )
    )
    with open_scan([path], fold_check=True) as scan:
        assert scan.engine.counted is None
        got = models(scan.engine)
        assert scan.engine.counted == (len(rows), len(rows))
        direct = scan.engine.query(f"SELECT DISTINCT {MODEL} AS m FROM records")
    assert got == sorted(str(m) for m in direct["m"]) == sorted(["a", "b", UNNAMED])


def test_models_of_files_of_one_model_each_are_their_footers_with_no_query(
    tree: PluginTree, tmp_path: Path
) -> None:
    """Files that vouch for their rows, one model and one replica each (a compacted dataset):
    the models come from the footers, no query read, the same list a query gives; with a
    filter, or files of two models, a query lists them."""
    from fleetwatch.records.dataset import read_dataset
    from fleetwatch.records.engine.folded import models
    from tests.records.plugin_tree import compacted

    whole = read_dataset([tree.whole]).frame
    whole["model"] = ["big" if int(str(r)[-1]) % 2 else "small" for r in whole["replica"]]
    files = compacted(tmp_path / "compacted", whole)
    queries: list[str] = []
    with DuckEngine(files) as engine:
        real = engine.query
        engine.query = lambda sql: queries.append(sql) or real(sql)  # type: ignore[method-assign]
        got = models(engine)
        assert queries == []
        direct = real("SELECT DISTINCT model FROM records")
    assert got == sorted(direct["model"]) == ["big", "small"]
    with DuckEngine(files, where=RecordFilter(models=frozenset({"big"}))) as engine:
        real = engine.query
        engine.query = lambda sql: queries.append(sql) or real(sql)  # type: ignore[method-assign]
        assert models(engine) == ["big"] and len(queries) == 1
    shared = tmp_path / "shared"
    shared.mkdir()
    whole.to_parquet(shared / "all.parquet", index=False)
    with DuckEngine([shared / "all.parquet"]) as engine:
        assert engine.pinned("model") is None
        assert models(engine) == ["big", "small"]
    plain = tmp_path / "plain"  # one model a file, but not stamped checked: the query checks
    plain.mkdir()
    for i, (_, rows) in enumerate(whole.groupby("replica", observed=True)):
        rows.to_parquet(plain / f"part-{i}.parquet", index=False)
    with DuckEngine(sorted(plain.glob("*.parquet"))) as engine:
        assert engine.pinned("model") == ["big", "small"] and engine.vouched() is None
        real = engine.query
        engine.query = lambda sql: queries.append(sql) or real(sql)  # type: ignore[method-assign]
        assert models(engine) == ["big", "small"] and len(queries) == 2
        assert engine.counted == (len(whole), len(whole))
