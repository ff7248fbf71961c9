"""A single-value option of a command that reads records, given twice, is refused in one line
with exit 2 (never last-wins); options meant to repeat (--records) and flags still do."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.records import write_records
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet

SPEC = str(Path(__file__).resolve().parents[2] / "slo" / "examples" / "chat.yaml")


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("options") / "r.jsonl"
    write_records(path, synthetic_fleet(4, 60, seed=1))
    return str(path)


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        ("fleet tail {R} --percentile 90 --percentile 99", "--percentile"),
        ("fleet tail {R} --target e2e --target=ttft", "--target"),
        ("fleet tail --max-rows 10 {R} --max-rows 20", "--max-rows"),
        ("fleet outliers {R} --quantile 0.5 --quantile 0.9", "--quantile"),
        ("fleet outliers {R} --min-requests 5 --min-requests 5", "--min-requests"),
        ("fleet compare {R} {R} --alpha 0.01 --alpha 0.05", "--alpha"),
        ("fleet compare {R} {R} --max-rows 5 --max-rows 6", "--max-rows"),
        ("slo report {S} --records {R} --at 1 --at 2", "--at"),
    ],
)
def test_a_repeated_single_value_option_is_refused(
    records: str, argv: str, option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv.format(R=records, S=SPEC).split()) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert f"'{option}'" in lines[0] and "given 2 times; give it once" in lines[0]
    assert "--help" in lines[0]


def test_a_repeated_flag_and_a_repeatable_option_are_accepted(
    records: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fleet", "tail", records, "--json", "--json"]) == 0
    capsys.readouterr()
    argv = ["slo", "report", SPEC, "--records", records, "--records", records]
    assert main(argv) == 2  # read (once: one file named twice), then the spec's selector refused
    err = capsys.readouterr().err
    assert "given 2 times" not in err and "matches none of the 240 records" in err


def test_a_value_that_looks_like_the_option_is_a_value(
    records: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--target --target`` gives --target the value "--target" once: refused for its value."""
    assert main(["fleet", "tail", records, "--target", "--target"]) == 2
    err = capsys.readouterr().err
    assert "given 2 times" not in err and "--target must be e2e or ttft" in err
