"""Atomic writes leave files with the mode an ordinary write would: readable by other users
(Prometheus's own user reads the rules fleetwatch writes) unless the umask or the file replaced
says otherwise."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetwatch.core.atomic import atomic_path, atomic_write_text


@pytest.fixture
def umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("umask")
@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664)])
def test_a_new_file_gets_0666_less_the_umask(tmp_path: Path, mask: int, expected: int) -> None:
    os.umask(mask)
    path = tmp_path / "slo.rules.yaml"
    atomic_write_text(path, "groups: []\n")
    assert _mode(path) == expected
    assert path.read_text() == "groups: []\n"


@pytest.mark.usefixtures("umask")
@pytest.mark.parametrize("kept", [0o600, 0o640, 0o664])
def test_a_replaced_file_keeps_its_mode(tmp_path: Path, kept: int) -> None:
    path = tmp_path / "slo.rules.yaml"
    path.write_text("old\n")
    path.chmod(kept)
    atomic_write_text(path, "new\n")
    assert _mode(path) == kept and path.read_text() == "new\n"


@pytest.mark.usefixtures("umask")
def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    path.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_path(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("boom")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
