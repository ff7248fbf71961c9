"""README.md's measured figures are BENCHMARKS.md's headline `fig:` rows, copied by one generator
(``python -m benchmarks readme``): a figure typed into the README by hand fails here."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from benchmarks.__main__ import main as benchmarks_main
from benchmarks.readme import (
    BEGIN,
    END,
    MAX_HEADLINES,
    FiguresError,
    generate,
    headlines,
    main,
    read_figures,
    rewrite,
)

ROOT = Path(__file__).resolve().parents[1]
# A measured quantity as the figures write it: a range, a decimal or a thousands-grouped number
# with its unit ("0.55–0.84 %", "60–130 µs", "6.92×", "4,435 calls/s"); not a setting like "1 s".
_QUANTITY = re.compile(
    r"(?:\d[\d.,]*–\d[\d.,]*|\d+\.\d+|\d{1,3}(?:,\d{3})+)\s?(?:%|µs|×|ms|s\b|calls/s)"
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for name in ("README.md", "BENCHMARKS.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path


def _next_section(text: str) -> str:
    """The heading line that ends the "## Figures" section (rows planted before it land in it)."""
    rest = text.split("\n## Figures", 1)[1]
    return "\n## " + rest.split("\n## ", 1)[1].split("\n", 1)[0]


def _outside_block(readme: str) -> str:
    head, rest = readme.split(BEGIN)
    return head + rest.split(END)[1]


def test_readme_figures_are_generated_from_the_latest_benchmarks_run() -> None:
    current, wanted = generate(ROOT)
    assert current == wanted, "README.md figures differ: run python -m benchmarks readme"
    assert benchmarks_main(["readme", "--check"]) == 0


def test_the_readme_repeats_no_figure_outside_the_generated_block() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    outside = _outside_block(readme)
    figures = read_figures((ROOT / "BENCHMARKS.md").read_text(encoding="utf-8"))
    quoted = {q for f in figures for q in _QUANTITY.findall(f.value)}
    assert quoted, "the figures carry no quantities"
    assert sorted(q for q in quoted if q in outside) == []


def test_a_figure_typed_by_hand_is_caught_and_regenerated(tree: Path) -> None:
    readme = tree / "README.md"
    original = readme.read_text(encoding="utf-8")
    figure = headlines(read_figures((tree / "BENCHMARKS.md").read_text(encoding="utf-8")))[0]
    edited = original.replace(f"| {figure.value} |", "| 0.18–0.34 % |", 1)
    assert edited != original
    readme.write_text(edited, encoding="utf-8")
    assert main(["--check"], root=tree) == 1
    assert readme.read_text(encoding="utf-8") == edited  # --check writes nothing
    assert main([], root=tree) == 0
    assert readme.read_text(encoding="utf-8") == original
    assert main(["--check"], root=tree) == 0


def test_only_headline_rows_of_the_figures_section_feed_the_readme(tree: Path) -> None:
    bench = tree / "BENCHMARKS.md"
    text = bench.read_text(encoding="utf-8")
    before = generate(tree)[1]
    marker = _next_section(text)
    # Another area's subsection at the end of "Figures": an ordinary table changes nothing.
    extra = "\n### Another area\n\n| what | figure |\n|---|---|\n| widgets | 12 µs |\n"
    bench.write_text(text.replace(marker, extra + marker, 1), encoding="utf-8")
    assert generate(tree)[1] == before
    # A `fig:` row outside "Figures" is not read, bold or not.
    bench.write_text(text + "\n| **`fig:old`** | old | 1 % | then |\n", encoding="utf-8")
    assert generate(tree)[1] == before
    # A figure that is not a headline is read but stays out of the README.
    row = "| `fig:widgets` | widget cost | 12 µs | today, `python -m benchmarks widgets` |\n"
    bench.write_text(text.replace(marker, extra + row + marker, 1), encoding="utf-8")
    assert "widgets" in [f.id for f in read_figures(bench.read_text(encoding="utf-8"))]
    assert generate(tree)[1] == before
    # Made a headline (its id in bold), it is appended to the block, in order.
    unhead = [f for f in headlines(read_figures(text))][1:]
    demoted = text
    for figure in unhead:
        demoted = demoted.replace(f"| **`fig:{figure.id}`** |", f"| `fig:{figure.id}` |", 1)
    bold = row.replace("`fig:widgets`", "**`fig:widgets`**")
    bench.write_text(demoted.replace(marker, extra + bold + marker, 1), encoding="utf-8")
    after = generate(tree)[1]
    assert "| widget cost | 12 µs | today, `python -m benchmarks widgets` |\n" + END in after
    block = after.split(BEGIN)[1].split(END)[0]
    assert block.count("\n| ") == 2 + 1  # two headlines and the header row


def test_the_readme_shows_at_most_six_headlines(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = tree / "BENCHMARKS.md"
    text = bench.read_text(encoding="utf-8")
    figures = read_figures(text)
    assert 1 <= len(headlines(figures)) <= MAX_HEADLINES == 6
    promoted = text
    for figure in [f for f in figures if not f.headline][: MAX_HEADLINES + 1]:
        promoted = promoted.replace(f"| `fig:{figure.id}` |", f"| **`fig:{figure.id}`** |", 1)
    bench.write_text(promoted, encoding="utf-8")
    readme_before = (tree / "README.md").read_bytes()
    assert main([], root=tree) == 2
    assert "README.md shows at most 6" in capsys.readouterr().err
    assert (tree / "README.md").read_bytes() == readme_before
    bench.write_text(text.replace("| **`fig:", "| `fig:").replace("`** |", "` |"), encoding="utf-8")
    assert main([], root=tree) == 2
    assert "no headline figure" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("| `fig:breaker-threads` | again | 1 | now |", "already given on line"),
        ("| `fig:short` | two | cells |", "needs 3 non-empty cells"),
        ("| `fig:blank` | what |  | run |", "needs 3 non-empty cells"),
        ("| **`fig:half` | what | 1 % | run |", "half in bold"),
    ],
)
def test_bad_figure_rows_are_refused_with_their_line(
    tree: Path, row: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = tree / "BENCHMARKS.md"
    text = bench.read_text(encoding="utf-8")
    marker = _next_section(text)
    bench.write_text(text.replace(marker, f"\n{row}\n{marker}", 1), encoding="utf-8")
    readme_before = (tree / "README.md").read_bytes()
    assert main([], root=tree) == 2
    err = capsys.readouterr().err
    assert message in err and re.search(r"BENCHMARKS\.md line \d+", err), err
    assert (tree / "README.md").read_bytes() == readme_before


def test_markers_must_appear_once_in_order() -> None:
    with pytest.raises(FiguresError, match="exactly one"):
        rewrite("no markers here\n", f"{BEGIN}\n{END}")
    with pytest.raises(FiguresError, match="exactly one"):
        rewrite(f"{BEGIN}\n{BEGIN}\n{END}\n", f"{BEGIN}\n{END}")
    with pytest.raises(FiguresError, match="comes before"):
        rewrite(f"{END}\n{BEGIN}\n", f"{BEGIN}\n{END}")
    with pytest.raises(FiguresError, match="no section"):
        read_figures("# Benchmarks\n\n| `fig:x` | a | b | c |\n")
    with pytest.raises(FiguresError, match="no `fig:` rows"):
        read_figures("## Figures\n\n| what | figure |\n")
