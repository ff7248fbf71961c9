"""The front door: help lists every package's sub-command; bad input is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fleetwatch.cli import main
from fleetwatch.records import RequestRecord, write_records
from fleetwatch.version import __version__


def test_help_lists_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in ("records", "slo", "fleet", "resilience", "engine", "probe", "telemetry", "demo"):
        assert name in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert __version__ in capsys.readouterr().out


def test_bad_flag_exits_2() -> None:
    assert main(["records", "validate", "--no-such-flag"]) == 2


def test_validate_summarises_a_good_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "r.jsonl"
    write_records(
        path,
        [
            RequestRecord("a", "rep1", "m", 0.0, 1.0, 0.1, 0.2, 10, 3),
            RequestRecord("b", "rep2", "m", 0.5, 3.0, status="error", error_type="X"),  # type: ignore[arg-type]
        ],
    )
    assert main(["records", "validate", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == 2
    assert summary["replicas"] == ["rep1", "rep2"]
    assert summary["status"] == {"error": 1, "ok": 1}
    assert summary["span_s"] == 3.0


def test_validate_bad_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"request_id": "a"}\n')
    assert main(["records", "validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert str(path) in err and "row 1" in err and "field 'replica'" in err


def test_a_file_error_names_the_path_in_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = Path(__file__).resolve().parents[1] / "slo" / "examples" / "chat.yaml"
    out_dir = tmp_path / "rules"
    out_dir.mkdir()
    status = main(
        [
            "slo",
            "rules",
            str(spec),
            "--profile",
            "fleetwatch",
            "--goodput",
            "0.5,0.05",
            "-o",
            str(out_dir),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1
    assert err.startswith("fleetwatch: error: ") and str(out_dir) in err
    assert list(out_dir.iterdir()) == []


def test_a_missing_extra_names_the_install_command() -> None:
    from fleetwatch.cli import one_line

    message, status = one_line(ModuleNotFoundError("No module named 'torch'", name="torch"))
    assert status == 2
    assert message == "this command needs torch: pip install 'fleetwatch[engine]'"


def test_an_unexpected_error_is_one_line_exit_1_and_debug_shows_the_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import fleetwatch.records.io as records_io

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the\ncause")

    monkeypatch.setattr(records_io, "read_columns", broken)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.jsonl").write_text("{}\n")
    assert main(["records", "validate", "x.jsonl"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        "fleetwatch: error: unexpected RuntimeError: the cause (run with --debug for the traceback)"
    )
    with pytest.raises(RuntimeError):
        main(["--debug", "records", "validate", "x.jsonl"])


def test_a_command_line_that_does_not_parse_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["telemetry", "gpu", "--interval", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fleetwatch: error: Invalid value for '--interval'")
    assert err.count("\n") == 1 and "(see 'fleetwatch telemetry gpu --help')" in err
    assert main(["slo", "rules", "spec.yaml"]) == 2
    assert "Missing option '-o' / '--output'" in capsys.readouterr().err


def test_a_group_without_a_command_shows_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["slo"]) == 2
    captured = capsys.readouterr()
    assert "backtest" in captured.out + captured.err and "fleetwatch: error" not in captured.err


def _eager_root() -> Any:
    """The root composed as before sub-apps loaded on demand: every one through add_typer."""
    import importlib

    import typer

    from fleetwatch.cli import SUB_APPS

    eager = typer.Typer(pretty_exceptions_enable=False, rich_markup_mode=None, add_completion=False)
    eager.callback(help="SRE observability and reliability for LLM inference fleets.")(lambda: None)
    for name, module in SUB_APPS.items():
        eager.add_typer(importlib.import_module(module).app, name=name)
    return eager


def test_each_sub_app_loaded_on_demand_is_composed_as_add_typer_composes_it() -> None:
    """The root imports a package's command line only when its name is typed; what it builds
    then is what ``add_typer`` builds, so every help page reads as it would composed eagerly."""
    import typer
    from typer.testing import CliRunner

    from fleetwatch.cli import SUB_APPS, app

    eager = _eager_root()
    expected = typer.main.get_command(eager)
    runner = CliRunner()
    for name in SUB_APPS:
        for sub in [None, *expected.commands[name].commands]:  # type: ignore[attr-defined]
            args = [name] if sub is None else [name, sub]
            lazy = runner.invoke(app, [*args, "--help"], prog_name="fleetwatch")
            eager_out = runner.invoke(eager, [*args, "--help"], prog_name="fleetwatch")
            assert lazy.exit_code == 0 and lazy.output == eager_out.output, args
    listed = runner.invoke(app, ["--help"], prog_name="fleetwatch").output
    assert [ln.split()[0] for ln in listed.split("Commands:")[1].splitlines() if ln.strip()] == [
        "demo",
        *SUB_APPS,
    ]
    root = typer.main.get_command(app)
    root.get_command(None, "slo")  # type: ignore[attr-defined]  # one loaded: listed once, in place
    assert root.list_commands(None) == ["demo", *SUB_APPS]  # type: ignore[attr-defined]


@pytest.mark.parametrize("typo", ["sl", "record", "flet"])
def test_a_mistyped_command_is_answered_as_before_sub_apps_loaded_on_demand(typo: str) -> None:
    """Typer suggests the nearest command names it holds (from 0.20 on: "Did you mean 'slo'?");
    the root holds them all when a name matches none, so the answer is the eager root's."""
    from typer.testing import CliRunner

    from fleetwatch.cli import app

    runner = CliRunner()
    lazy = runner.invoke(app, [typo], prog_name="fleetwatch")
    eager = runner.invoke(_eager_root(), [typo], prog_name="fleetwatch")
    assert lazy.exit_code == eager.exit_code == 2
    assert f"No such command '{typo}'" in lazy.output and lazy.output == eager.output


def test_the_ground_floors_errors_are_bad_input() -> None:
    """core's refusals (a model config that is not a shape, a rule file with no rules) are
    answered as bad input, one line and exit 2, like every package's own error type."""
    from fleetwatch.cli import user_errors
    from fleetwatch.core.model import ModelShapeError
    from fleetwatch.core.profiles.types import ProfileError
    from fleetwatch.core.records.schema import RecordError
    from fleetwatch.core.rules.render import RulesError

    assert {ModelShapeError, ProfileError, RecordError, RulesError} <= set(user_errors())
