"""The DuckDB engine's temporary folder (``records.engine.scratch``): removed when its engine
closes, and where its process was killed, by the next engine that opens; a live engine's kept,
in another process or in its own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleetwatch.records.dataset import resolve
from fleetwatch.records.engine.duck import DuckEngine
from tests.records.plugin_tree import PluginTree, plugin_tree


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> PluginTree:
    return plugin_tree(tmp_path_factory.mktemp("scratch") / "fleet")


_HOLDER = """
import os, signal, sys
from pathlib import Path
from fleetwatch.records.dataset import resolve
from fleetwatch.records.engine.duck import DuckEngine
engine = DuckEngine(resolve([Path(sys.argv[1])]))
print(engine._tmp.name, flush=True)
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
sys.stdin.readline()
engine.close()
"""


def test_a_killed_engine_s_folder_is_removed_by_the_next_and_a_live_one_s_is_not(
    tree: PluginTree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine whose process is SIGKILLed leaves its folder (its database file of the JSON
    lines' columns in it); an engine opening after it removes it. The folder of an engine alive
    in another process, or in this one, stays until that engine closes, and a folder holding no
    lock file (being made, or not an engine's) is left alone."""
    import subprocess
    import sys
    import tempfile

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    env = {**os.environ, "TMPDIR": str(temporary)}
    command = [sys.executable, "-c", _HOLDER, str(tree.root)]
    killed = subprocess.run([*command, "kill"], env=env, capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    left = Path(killed.stdout.strip())
    assert left.parent == temporary and (left / "scanned.duckdb").is_file()
    foreign = temporary / "fleetwatch-duckdb-foreign"
    foreign.mkdir()
    (foreign / "kept").write_text("")
    live = subprocess.Popen(
        [*command, "hold"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert live.stdout is not None
        held = Path(live.stdout.readline().strip())
        with DuckEngine(resolve([tree.root])) as engine:
            assert engine.check() == (tree.rows, tree.rows)
            assert not left.exists()
            assert (held / "scanned.duckdb").is_file() and (foreign / "kept").is_file()
            with DuckEngine(resolve([tree.root])) as second:
                assert (Path(engine._tmp.name) / "scanned.duckdb").is_file()
                assert second.check() == (tree.rows, tree.rows)
    finally:
        live.communicate("\n")
    assert live.returncode == 0
    assert sorted(p.name for p in temporary.iterdir()) == ["fleetwatch-duckdb-foreign"]


def test_an_engine_s_folder_is_kept_by_another_engine_of_its_process_whatever_its_lock_says(
    tree: PluginTree, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over NFS ``flock`` is a lock per process: a second descriptor of the same process takes
    it. An engine's folder is still not swept by another engine of its own process (here every
    ``flock`` succeeds, as NFS would let it)."""
    import tempfile

    from fleetwatch.records.engine import scratch

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    with DuckEngine(resolve([tree.root])) as first:
        folder = Path(first._tmp.name)

        class Granted:  # every lock granted at once
            LOCK_EX, LOCK_NB = scratch.fcntl.LOCK_EX, scratch.fcntl.LOCK_NB

            @staticmethod
            def flock(fd: int, operation: int) -> None:
                return None

        monkeypatch.setattr(scratch, "fcntl", Granted)
        with DuckEngine(resolve([tree.root])) as second:
            assert (folder / "scanned.duckdb").is_file()
            assert second.check() == first.check() == (tree.rows, tree.rows)
    assert not list(temporary.iterdir())
