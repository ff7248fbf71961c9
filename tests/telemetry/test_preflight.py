"""The checks every command runs before work, and the one name of a generated promtool test."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from fleetwatch.core.preflight import http_url, input_dir, input_file, output_dir, output_file
from fleetwatch.core.rules.files import promtool_test_path


def test_output_paths(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("")
    assert output_file(tmp_path / "new" / "deeper" / "x.yaml") == tmp_path / "new/deeper/x.yaml"
    assert output_file(tmp_path / "f") == tmp_path / "f"  # replaced
    assert output_dir(tmp_path / "d") == tmp_path / "d"
    assert output_dir(tmp_path / "new" / "dir") == tmp_path / "new/dir"
    with pytest.raises(IsADirectoryError) as caught:
        output_file(tmp_path / "d")
    assert caught.value.filename == str(tmp_path / "d")
    with pytest.raises(NotADirectoryError) as caught2:
        output_file(tmp_path / "f" / "sub" / "x.yaml")
    assert caught2.value.filename == str(tmp_path / "f") and caught2.value.errno == errno.ENOTDIR
    with pytest.raises(NotADirectoryError):
        output_dir(tmp_path / "f")
    assert not (tmp_path / "new").exists()  # checking creates nothing


def test_input_paths(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("")
    assert input_file(tmp_path / "f") == tmp_path / "f"
    assert input_dir(tmp_path / "d") == tmp_path / "d"
    with pytest.raises(FileNotFoundError):
        input_file(tmp_path / "nope")
    with pytest.raises(IsADirectoryError):
        input_file(tmp_path / "d")
    with pytest.raises(NotADirectoryError):
        input_dir(tmp_path / "f")


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9090", "https://prom.example.org/", "http://[::1]:8000/x"]
)
def test_well_formed_urls_pass(url: str) -> None:
    assert http_url(url, option="--prometheus", error=ValueError) == url


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("notaurl", "not an http(s) URL"),
        ("ftp://host/x", "not an http(s) URL"),
        ("http://", "not an http(s) URL"),
        ("127.0.0.1:9090", "not an http(s) URL"),
        ("http://host:port", "not a well-formed URL"),
        ("http://host:99999", "not a well-formed URL"),
        ("http://host:0", "port 0"),
    ],
)
def test_malformed_urls_raise_the_callers_error(url: str, needle: str) -> None:
    class Mine(Exception):
        pass

    with pytest.raises(Mine, match="--prometheus") as caught:
        http_url(url, option="--prometheus", error=Mine)
    assert needle in str(caught.value)


@pytest.mark.parametrize(
    ("rules", "test"),
    [
        ("slo.rules.yaml", "slo.rules.test.yaml"),
        ("out/fleet-outliers.yaml", "out/fleet-outliers.test.yaml"),
        ("ops.yml", "ops.test.yaml"),
        ("rules", "rules.test.yaml"),
    ],
)
def test_one_name_for_a_promtool_test_file(rules: str, test: str) -> None:
    assert promtool_test_path(Path(rules)) == Path(test)
