"""README.md's headline figures, generated from BENCHMARKS.md: ``python -m benchmarks readme``.

BENCHMARKS.md's "## Figures" section holds every figure as a table row whose first cell is an id in
backticks (`` `fig:telemetry-cost` ``), with three more cells: what was measured, the figure, and
the run and command that measured it. A row whose id is in bold (`` **`fig:slo-engine`** ``) is a
headline: the headline rows, at most ``MAX_HEADLINES`` of them, are copied in their order into
README.md between ``<!-- figures:begin -->`` and ``<!-- figures:end -->`` (temporary file +
rename). Every other row and table is ignored, so rows and subsections added beside them do not
change the README. ``--check`` writes nothing and exits 1 when README.md differs.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from fleetwatch.core.atomic import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Figures"
MAX_HEADLINES = 6
BEGIN = "<!-- figures:begin -->"
END = "<!-- figures:end -->"
_ROW = re.compile(r"^\|\s*(\*\*)?`fig:([a-z0-9][a-z0-9-]*)`(\*\*)?\s*\|(.*)\|\s*$")


class FiguresError(ValueError):
    """BENCHMARKS.md or README.md cannot be read as this generator expects (one line, located)."""


@dataclass(frozen=True)
class Figure:
    id: str
    what: str
    value: str
    run: str
    headline: bool = False


def _section(text: str) -> tuple[int, list[str]]:
    """The first line number (1-based) and the lines of the "## Figures" section."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(SECTION)), None)
    if start is None:
        raise FiguresError(f"BENCHMARKS.md: no section starting '{SECTION}'")
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")),
        len(lines),
    )
    return start + 1, lines[start:end]


def read_figures(benchmarks_md: str) -> list[Figure]:
    """Every ``fig:`` row of BENCHMARKS.md's "Figures" section, in order; ids are unique."""
    first, lines = _section(benchmarks_md)
    figures: list[Figure] = []
    seen: dict[str, int] = {}
    for offset, line in enumerate(lines):
        match = _ROW.match(line)
        if match is None:
            continue
        number = first + offset
        bold_open, fig_id, bold_close, rest = match.groups()
        if bool(bold_open) != bool(bold_close):
            raise FiguresError(
                f"BENCHMARKS.md line {number}: figure `fig:{fig_id}` is half in bold; a headline's"
                f" id is written **`fig:{fig_id}`**"
            )
        cells = [cell.strip() for cell in rest.split("|")]
        if len(cells) != 3 or not all(cells):
            raise FiguresError(
                f"BENCHMARKS.md line {number}: figure `fig:{fig_id}` needs 3 non-empty cells after "
                f"its id (what | measured | run), found {len(cells)}"
            )
        if fig_id in seen:
            raise FiguresError(
                f"BENCHMARKS.md line {number}: figure `fig:{fig_id}` already given on line "
                f"{seen[fig_id]}; keep only the latest run's row"
            )
        seen[fig_id] = number
        what, value, run = cells
        figures.append(Figure(fig_id, what, value, run, headline=bool(bold_open)))
    if not figures:
        raise FiguresError(f"BENCHMARKS.md: no `fig:` rows in the '{SECTION}' section")
    return figures


def headlines(figures: list[Figure]) -> list[Figure]:
    """The figures README.md shows: the bold rows, one to ``MAX_HEADLINES`` of them."""
    chosen = [f for f in figures if f.headline]
    if not chosen:
        raise FiguresError(
            f"BENCHMARKS.md: no headline figure in '{SECTION}' (write a row's id as **`fig:id`**)"
        )
    if len(chosen) > MAX_HEADLINES:
        ids = ", ".join(f.id for f in chosen)
        raise FiguresError(
            f"BENCHMARKS.md: {len(chosen)} headline figures ({ids}); README.md shows at most "
            f"{MAX_HEADLINES}"
        )
    return chosen


def render_block(figures: list[Figure]) -> str:
    """The README block of ``figures`` (the headlines), markers included."""
    rows = [f"| {f.what} | {f.value} | {f.run} |" for f in figures]
    return "\n".join(
        [
            BEGIN,
            "<!-- generated from BENCHMARKS.md by `python -m benchmarks readme`; edit the bold"
            " `fig:` rows there, not this table -->",
            "| measured | figure | run |",
            "|---|---|---|",
            *rows,
            END,
        ]
    )


def rewrite(readme_md: str, block: str) -> str:
    """``readme_md`` with the text between (and including) the markers replaced by ``block``."""
    begin, end = readme_md.count(BEGIN), readme_md.count(END)
    if begin != 1 or end != 1:
        raise FiguresError(
            f"README.md: needs exactly one '{BEGIN}' and one '{END}' (found {begin} and {end})"
        )
    head, rest = readme_md.split(BEGIN)
    if END not in rest:
        raise FiguresError(f"README.md: '{END}' comes before '{BEGIN}'")
    _, tail = rest.split(END)
    return head + block + tail


def generate(root: Path = ROOT) -> tuple[str, str]:
    """README.md's current text and the text it should have."""
    benchmarks_md = (root / "BENCHMARKS.md").read_text(encoding="utf-8")
    readme_md = (root / "README.md").read_text(encoding="utf-8")
    return readme_md, rewrite(readme_md, render_block(headlines(read_figures(benchmarks_md))))


def main(argv: list[str], root: Path = ROOT) -> int:
    if argv not in ([], ["--check"]):
        print(f"benchmarks readme: unknown arguments {' '.join(argv)}; usage: readme [--check]")
        return 2
    try:
        current, wanted = generate(root)
    except (FiguresError, OSError) as err:
        print(f"benchmarks readme: {err}", file=sys.stderr)
        return 2
    if current == wanted:
        print("README.md figures match BENCHMARKS.md")
        return 0
    if argv == ["--check"]:
        print("README.md figures differ from BENCHMARKS.md: run python -m benchmarks readme")
        return 1
    atomic_write_text(root / "README.md", wanted)
    print("README.md figures rewritten from BENCHMARKS.md")
    return 0
