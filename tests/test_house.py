"""The shape of the house: imports run one way, and no two modules import each other in a circle.

Everything imports as ``fleetwatch.<folder>``; the folder is the package. Floors, ground up:
``core`` (the shared vocabulary); ``telemetry``, ``resilience`` and ``records`` (the analysis
side's readers) on it; then ``engine_probe``, ``slo``, ``dashboards`` and ``fleet``; then
``fleetwatch`` itself (the command and the demo). A package imports only from its own floor or
below, and packages on one floor do not import each other. Every module's
imports are read with ``ast``, including imports inside functions and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# What each package may import besides itself.
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "telemetry": frozenset({"core"}),
    "resilience": frozenset({"core"}),
    "records": frozenset({"core"}),
    "engine_probe": frozenset({"core", "telemetry", "resilience", "records"}),
    "slo": frozenset({"core", "telemetry", "resilience", "records"}),
    "dashboards": frozenset({"core", "telemetry", "resilience", "records"}),
    "fleet": frozenset({"core", "telemetry", "resilience", "records"}),
    "fleetwatch": frozenset(
        {"core", "telemetry", "resilience", "records", "engine_probe", "slo", "dashboards", "fleet"}
    ),
}


def _modules() -> Iterator[tuple[str, Path]]:
    """Each package's own files: fleetwatch/'s links to the other folders are not followed."""
    for package in ALLOWED:
        for path in sorted((ROOT / package).rglob("*.py")):
            if not any(p.is_symlink() for p in path.relative_to(ROOT).parents if p != Path(".")):
                yield package, path


def _package_of(module: str) -> str:
    """The folder a module name belongs to: ``fleetwatch.slo.cli`` -> ``slo``, ``fleetwatch.cli``
    -> ``fleetwatch``; a bare name (``fleetwatch.slo.cli``) is returned as it is, and refused elsewhere."""
    parts = module.split(".")
    if parts[0] == "fleetwatch" and len(parts) > 1 and parts[1] in ALLOWED:
        return parts[1]
    return parts[0]


def _imported_packages(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, _package_of(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, _package_of(node.module)


def upward_imports(package: str, path: Path) -> list[str]:
    """``file:line imports X`` for each import of a package this one may not import."""
    bad = []
    for lineno, target in _imported_packages(path):
        if target in ALLOWED and target != package and target not in ALLOWED[package]:
            bad.append(f"{path.relative_to(ROOT)}:{lineno} imports {target}")
    return bad


def test_imports_run_one_way() -> None:
    bad = [line for package, path in _modules() for line in upward_imports(package, path)]
    assert bad == []


def test_the_direction_check_catches_an_upward_import(tmp_path: Path) -> None:
    module = ROOT / "telemetry" / "_probe_for_the_house_test.py"
    module.write_text("def f() -> None:\n    from fleetwatch.fleet.tail import attribute_tail\n")
    try:
        assert upward_imports("telemetry", module) == [
            "telemetry/_probe_for_the_house_test.py:2 imports fleet"
        ]
    finally:
        module.unlink()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts if parts[0] == "fleetwatch" else ["fleetwatch", *parts])


def _internal_imports(path: Path, known: set[str]) -> set[str]:
    """Modules of the project this one imports, deferred imports inside functions and imports
    under ``if TYPE_CHECKING:`` included: a circle hidden in a function or behind a type-only
    import is still a circle a reader must hold in mind."""
    found: set[str] = set()

    def walk(node: ast.AST) -> None:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        found.update(name for name in names if name in known)
        for child in ast.iter_child_nodes(node):
            walk(child)

    walk(ast.parse(path.read_text(encoding="utf-8")))
    return found


def _benchmark_modules() -> dict[str, Path]:
    return {
        "benchmarks" if p.stem == "__init__" else f"benchmarks.{p.stem}": p
        for p in sorted((ROOT / "benchmarks").glob("*.py"))
    }


def import_cycles(paths: dict[str, Path]) -> list[list[str]]:
    """Every circle among ``paths`` (module name -> file), each as the names around it."""
    known = set(paths)
    graph = {name: _internal_imports(path, known) - {name} for name, path in paths.items()}
    # a package's __init__ re-exporting its own modules is not a circle
    for name, targets in graph.items():
        graph[name] = {t for t in targets if not name.startswith(f"{t}.")}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycles.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    return cycles


def test_no_import_circles() -> None:
    paths = {_module_name(path): path for _, path in _modules()} | _benchmark_modules()
    assert import_cycles(paths) == []


def test_the_circle_check_counts_type_checking_imports(tmp_path: Path) -> None:
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from fleetwatch.b import g\n")
    b.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fleetwatch.a import f\n"
    )
    assert import_cycles({"fleetwatch.a": a, "fleetwatch.b": b}) == [
        ["fleetwatch.a", "fleetwatch.b", "fleetwatch.a"]
    ]
