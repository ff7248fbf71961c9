"""The docs a person reads hold together: every relative link and ``#anchor`` resolves, every guide
is reachable from README.md, the generated reference (docs/reference/) is what the code renders now
(so the command reference is what ``--help`` prints), and README.md and BENCHMARKS.md stay short
enough to read, BENCHMARKS.md with each section once."""

from __future__ import annotations

import re
import shutil
import unicodedata
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

from fleetwatch import reference
from fleetwatch.cli import main as fleetwatch_main

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 200
BENCHMARKS_MAX_LINES = 500

_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
_CODE_SPAN = re.compile(r"(`+)(?:.+?)\1")
_HTML_ANCHOR = re.compile(r"<a\s+(?:[^>]*\s)?(?:id|name)\s*=\s*[\"']?([^\"'\s>]+)", re.IGNORECASE)
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, …


def doc_files(root: Path) -> list[Path]:
    """The Markdown a person reads: README.md, BENCHMARKS.md, docs/**/*.md, runbooks/*.md."""
    files = [root / name for name in ("README.md", "BENCHMARKS.md") if (root / name).is_file()]
    files += sorted((root / "docs").rglob("*.md")) + sorted((root / "runbooks").glob("*.md"))
    return files


def _prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text lowercased, every character but
    letters, digits, marks, ``_``, ``-`` and spaces dropped, spaces made ``-`` (before the
    ``-1``, ``-2`` … that repeated headings get)."""
    text = re.sub(r"!?\[((?:[^\]\\]|\\.)*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    kept = (
        ch
        for ch in text
        if ch in "-_ " or ch.isalpha() or unicodedata.category(ch) in ("Nd", "Mn", "Mc", "Me")
    )
    return "".join(kept).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a Markdown page defines: its headings' slugs (repeats numbered as GitHub
    numbers them) and explicit ``<a id=…>`` / ``<a name=…>`` anchors."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in _prose_lines(text):
        found.update(_HTML_ANCHOR.findall(line))
        match = _HEADING.match(line)
        if match is None:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(text: str) -> Iterator[tuple[int, str]]:
    """(line number, target) of every inline link, image and link definition outside code."""
    for number, line in _prose_lines(text):
        definition = _DEFINITION.match(line)
        if definition is not None:
            yield number, definition.group(1)
            continue
        for match in _LINK.finditer(_CODE_SPAN.sub("", line)):
            yield number, match.group(1)


def broken_links(root: Path) -> list[str]:
    """``file:line: target (why)`` for each relative link under ``root``'s docs that points at no
    file inside ``root``, or at an anchor its target page does not define."""
    root = root.resolve()
    pages: dict[Path, set[str]] = {}

    def anchors_of(page: Path) -> set[str]:
        if page not in pages:
            pages[page] = anchors(page.read_text(encoding="utf-8"))
        return pages[page]

    bad: list[str] = []
    for doc in doc_files(root):
        for number, target in links(doc.read_text(encoding="utf-8")):
            if _EXTERNAL.match(target):
                continue
            path_part, _, anchor = target.partition("#")
            where = f"{doc.relative_to(root)}:{number}: {target}"
            resolved = (doc.parent / path_part).resolve() if path_part else doc.resolve()
            if not resolved.is_relative_to(root):
                bad.append(f"{where} (outside the repository)")
            elif not resolved.exists():
                bad.append(f"{where} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors_of(resolved):
                bad.append(f"{where} (no heading or anchor '{anchor}' in {resolved.name})")
    return bad


_NAMED_PATH = re.compile(r"`([A-Za-z_][\w.-]*(?:/[\w.-]+)+/?)`")


def missing_paths(root: Path) -> list[str]:
    """``file:line: path`` for each repository path the docs name in code (`` `slo/spec.py` ``)
    that does not exist: a module moved or renamed leaves no stale name behind. Only paths whose
    first part is a top-level entry of ``root`` count (``autoscaling/v2`` is not one)."""
    root = root.resolve()
    top = {p.name for p in root.iterdir()}
    bad = []
    for doc in doc_files(root):
        for number, line in _prose_lines(doc.read_text(encoding="utf-8")):
            for match in _NAMED_PATH.finditer(line):
                path = match.group(1)
                if path.split("/")[0] in top and not (root / path).exists():
                    bad.append(f"{doc.relative_to(root)}:{number}: {path}")
    return bad


def reachable_from_readme(root: Path) -> set[Path]:
    """The Markdown pages under ``root`` that links lead to from README.md."""
    root = root.resolve()
    todo, seen = [root / "README.md"], {root / "README.md"}
    while todo:
        page = todo.pop()
        for _, target in links(page.read_text(encoding="utf-8")):
            path_part = target.partition("#")[0]
            if _EXTERNAL.match(target) or not path_part:
                continue
            resolved = (page.parent / path_part).resolve()
            if resolved.suffix == ".md" and resolved.is_file() and resolved not in seen:
                seen.add(resolved)
                todo.append(resolved)
    return seen


def repeated_headings(text: str, level: int = 2) -> list[str]:
    """Headings of ``level`` that appear more than once, in order."""
    seen: dict[str, int] = {}
    for _, line in _prose_lines(text):
        match = _HEADING.match(line)
        if match is not None and len(match.group(1)) == level:
            seen[match.group(2)] = seen.get(match.group(2), 0) + 1
    return [heading for heading, count in seen.items() if count > 1]


@pytest.fixture
def docs_tree(tmp_path: Path) -> Path:
    """A copy of the docs (and what they link to that is not Markdown, as empty files)."""
    for doc in doc_files(ROOT):
        copy = tmp_path / doc.relative_to(ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(doc, copy)
    for doc in doc_files(ROOT):
        for _, target in links(doc.read_text(encoding="utf-8")):
            path_part = target.partition("#")[0]
            if _EXTERNAL.match(target) or not path_part:
                continue
            original = (doc.parent / path_part).resolve()
            if original.is_relative_to(ROOT) and original.exists():
                copy = tmp_path / original.relative_to(ROOT)
                if original.is_dir():
                    copy.mkdir(parents=True, exist_ok=True)
                elif not copy.exists():
                    copy.parent.mkdir(parents=True, exist_ok=True)
                    copy.touch()
    return tmp_path


# --- links and anchors -------------------------------------------------------------------------


def test_every_link_and_anchor_in_the_docs_resolves() -> None:
    assert len(doc_files(ROOT)) > 20
    assert broken_links(ROOT) == []


def test_a_planted_broken_link_or_anchor_is_caught_with_its_line(docs_tree: Path) -> None:
    assert broken_links(docs_tree) == []
    guide = docs_tree / "docs" / "slo-alerts.md"
    lines = guide.read_text(encoding="utf-8").splitlines()
    lines[2:2] = [
        "See [the runbook](../runbooks/no-such-page.md), [alerts](#no-such-heading),",
        "[figures](../BENCHMARKS.md#not-a-section) and [outside](../../elsewhere.md).",
        "`[in code](missing.md)` is not a link.",
        "```",
        "[in a fence](missing.md) is not one either",
        "```",
    ]
    guide.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert broken_links(docs_tree) == [
        "docs/slo-alerts.md:3: ../runbooks/no-such-page.md (no such file)",
        "docs/slo-alerts.md:3: #no-such-heading (no heading or anchor 'no-such-heading' in "
        "slo-alerts.md)",
        "docs/slo-alerts.md:4: ../BENCHMARKS.md#not-a-section (no heading or anchor "
        "'not-a-section' in BENCHMARKS.md)",
        "docs/slo-alerts.md:4: ../../elsewhere.md (outside the repository)",
    ]


def test_every_path_the_docs_name_exists() -> None:
    assert missing_paths(ROOT) == []


def test_a_moved_module_named_in_the_docs_is_caught(tmp_path: Path) -> None:
    (tmp_path / "slo").mkdir()
    (tmp_path / "slo" / "spec.py").touch()
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(
        "The spec is `slo/spec.py`, the rules `slo/rules.py`; see `autoscaling/v2`.\n"
        "```\n`slo/in_a_fence.py`\n```\n",
        encoding="utf-8",
    )
    assert missing_paths(tmp_path) == ["docs/guide.md:1: slo/rules.py"]


def test_a_renamed_heading_breaks_the_links_to_it(docs_tree: Path) -> None:
    bench = docs_tree / "BENCHMARKS.md"
    text = bench.read_text(encoding="utf-8")
    assert "\n## Packaging\n" in text
    bench.write_text(text.replace("\n## Packaging\n", "\n## Packages\n"), encoding="utf-8")
    broken = broken_links(docs_tree)
    assert any(line.startswith("docs/vllm.md:") and "#packaging" in line for line in broken)


def test_anchors_follow_githubs_slugs() -> None:
    page = "\n".join(
        [
            "# Serve and probe",
            "## Cold start, `/health` and `/ready`",
            "## `make demo`",
            "## Several models in one server: a byte-accounted cache",
            "### VLLM_TTFT_BUCKETS",
            "## Tenants",
            "## Tenants",
            "## Tenants",
            "## The [probe](probe.md) — what users feel",
            '<a id="kept"></a> and <a name=also-kept></a>',
            "```",
            "## not a heading",
            "```",
        ]
    )
    assert anchors(page) == {
        "serve-and-probe",
        "cold-start-health-and-ready",
        "make-demo",
        "several-models-in-one-server-a-byte-accounted-cache",
        "vllm_ttft_buckets",
        "tenants",
        "tenants-1",
        "tenants-2",
        "the-probe--what-users-feel",
        "kept",
        "also-kept",
    }


def test_every_guide_is_reachable_from_the_readme() -> None:
    reached = reachable_from_readme(ROOT)
    guides = sorted((ROOT / "docs").rglob("*.md"))
    assert len(guides) >= 12
    assert [str(p.relative_to(ROOT)) for p in guides if p.resolve() not in reached] == []


def test_an_unlinked_guide_is_found(docs_tree: Path) -> None:
    orphan = docs_tree / "docs" / "orphan.md"
    orphan.write_text("# Nobody links here\n", encoding="utf-8")
    assert orphan.resolve() not in reachable_from_readme(docs_tree)
    assert (docs_tree / "docs" / "tracing.md").resolve() in reachable_from_readme(docs_tree)


# --- the generated reference -------------------------------------------------------------------


def _rendered_by_this_typer() -> bool:
    cli_md = (ROOT / reference.REFERENCE / "cli.md").read_text(encoding="utf-8")
    return reference.typer_version_of(cli_md) == version("typer")


def test_the_reference_pages_are_what_the_code_renders_now() -> None:
    stale = reference.stale(ROOT)
    cli_md = ROOT / reference.REFERENCE / "cli.md"
    if not _rendered_by_this_typer():
        stale.pop(cli_md, None)  # another typer lays help out its own way; the rest must match
    names = [str(p.relative_to(ROOT)) for p in stale]
    assert names == [], "stale reference pages: run python -m fleetwatch.reference (make docs)"
    assert reference.main(["--check"]) == (0 if _rendered_by_this_typer() else 1)


def test_the_command_reference_is_what_help_prints(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if not _rendered_by_this_typer():
        pytest.skip(f"docs/reference/cli.md was rendered by another typer than {version('typer')}")
    monkeypatch.setenv("COLUMNS", "120")  # any terminal of 80 columns or more prints the same
    cli_md = (ROOT / reference.REFERENCE / "cli.md").read_text(encoding="utf-8")
    sections = re.findall(r"^## (fleetwatch[^\n]*)\n\n```text\n(.*?)\n```$", cli_md, re.M | re.S)
    paths = [path for path, _ in reference.command_help()]
    assert [path for path, _ in sections] == paths
    assert {"fleetwatch", "fleetwatch slo rules", "fleetwatch fleet outliers"} <= set(paths)
    for path, documented in sections:
        capsys.readouterr()
        assert fleetwatch_main([*path.split()[1:], "--help"]) == 0
        assert capsys.readouterr().out.rstrip("\n") == documented, path


def test_a_stale_reference_page_is_named_and_rewritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / reference.REFERENCE
    folder.mkdir(parents=True)
    for name, render in reference.PAGES.items():
        (folder / name).write_text(render(), encoding="utf-8")
    assert reference.main(["--check"], root=tmp_path) == 0
    metrics = folder / "metrics.md"
    metrics.write_text(metrics.read_text(encoding="utf-8").replace("vllm:", "vlm:"), "utf-8")
    (folder / "records.md").unlink()
    capsys.readouterr()
    assert reference.main(["--check"], root=tmp_path) == 1
    out = capsys.readouterr().out
    assert "docs/reference/records.md" in out and "docs/reference/metrics.md" in out
    assert "docs/reference/cli.md" not in out
    assert "vlm:" in metrics.read_text(encoding="utf-8")  # --check writes nothing
    assert reference.main([], root=tmp_path) == 0
    assert reference.main(["--check"], root=tmp_path) == 0
    assert reference.main(["--bogus"], root=tmp_path) == 2


def test_the_reference_pages_cover_the_schema_and_every_profile() -> None:
    records_md = reference.render_records()
    for spec in reference.record_schema.FIELDS:
        assert f"| `{spec.name}` |" in records_md
    metrics_md = reference.render_metrics()
    for profile in reference.profile_package.PROFILES.values():
        assert f"\n## {profile.name}\n" in metrics_md
        for ref in profile.signals.values():
            assert f"`{ref.name}" in metrics_md


# --- length and shape --------------------------------------------------------------------------


def test_the_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES


def test_benchmarks_holds_each_section_once_and_stays_short() -> None:
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= BENCHMARKS_MAX_LINES
    assert repeated_headings(text) == []


def test_a_repeated_section_is_found() -> None:
    text = "# B\n## Telemetry\n### Run\n## SLO\n### Run\n```\n## Telemetry\n```\n## Telemetry\n"
    assert repeated_headings(text) == ["Telemetry"]
    assert repeated_headings(text, level=3) == ["Run"]
