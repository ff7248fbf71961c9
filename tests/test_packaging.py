"""What installs: one import name, two wheels that share no file, a serving side that needs none of
the analysis stack, and a command that starts without loading it.

The wheels are built from a copy of the checkout (the files git would commit), exactly as ``pip
install`` builds them, so a folder left out of a package list, a file in both distributions or a
top-level name other than ``fleetwatch`` fails here rather than in a user's site-packages.
"""

from __future__ import annotations

import ast
import email
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The folders of the repository that are packages, each installed as fleetwatch.<folder>.
FOLDERS = (
    "core",
    "telemetry",
    "records",
    "slo",
    "resilience",
    "fleet",
    "dashboards",
    "engine_probe",
)
ANALYSIS = ("pandas", "scipy", "pyarrow", "duckdb", "matplotlib")
# Neither a dependency of fleetwatch-telemetry nor needed to import it.
NOT_SERVING = (*ANALYSIS, "typer", "rich", "yaml", "aiohttp", "grafana_foundation_sdk", "tenacity")
HEAVY_FOR_THE_COMMAND = (
    "pandas",
    "pyarrow",
    "aiohttp",
    "scipy",
    "torch",
    "opentelemetry.sdk",
    "pyspark",
)
SERVING, TOOLKIT = "fleetwatch_telemetry", "fleetwatch"


def _tracked() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    return [Path(p.decode()) for p in out.split(b"\0") if p and (ROOT / p.decode()).exists()]


def test_no_module_imports_a_folder_by_its_bare_name() -> None:
    bad = []
    for rel in _tracked():
        if rel.suffix != ".py" or (ROOT / rel).is_symlink():
            continue
        tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"), filename=str(rel))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            bad += [f"{rel}:{node.lineno} {n}" for n in names if n.split(".")[0] in FOLDERS]
    assert bad == [], "import these as fleetwatch.<folder>"


def test_the_folders_are_not_importable_by_their_bare_names(tmp_path: Path) -> None:
    code = (
        "import importlib.util, sys\n"
        f"found = [n for n in {FOLDERS!r} if importlib.util.find_spec(n) is not None]\n"
        f"assert all(importlib.util.find_spec('fleetwatch.' + n) for n in {FOLDERS!r})\n"
        "print(found)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_every_folder_is_linked_into_the_namespace() -> None:
    for folder in FOLDERS:
        link = ROOT / "fleetwatch" / folder
        assert link.is_symlink() and link.resolve() == (ROOT / folder).resolve(), link
    assert not (ROOT / "fleetwatch" / "__init__.py").exists(), "fleetwatch is a namespace"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, zipfile.ZipFile]:
    """Both wheels, built from a copy of the checkout as pip builds them."""
    src = tmp_path_factory.mktemp("src")
    for rel in _tracked():
        target = src / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / rel).is_symlink():
            target.symlink_to((ROOT / rel).readlink())
        elif (ROOT / rel).is_file():
            shutil.copy2(ROOT / rel, target)
    out = tmp_path_factory.mktemp("wheels")
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
    subprocess.run(
        [*pip, "--disable-pip-version-check", "-w", str(out), str(src), str(src / "telemetry")],
        check=True,
        capture_output=True,
    )
    built = {p.name.split("-")[0]: zipfile.ZipFile(p) for p in out.glob("*.whl")}
    assert sorted(built) == [TOOLKIT, SERVING]
    return built


def _files(wheel: zipfile.ZipFile) -> set[str]:
    return {n for n in wheel.namelist() if ".dist-info/" not in n}


def _metadata(wheel: zipfile.ZipFile, name: str) -> str:
    [path] = [n for n in wheel.namelist() if n.endswith(f".dist-info/{name}")]
    return wheel.read(path).decode()


def test_the_wheels_install_under_fleetwatch_alone(wheels: dict[str, zipfile.ZipFile]) -> None:
    for name, wheel in wheels.items():
        top = {n.split("/")[0] for n in wheel.namelist()}
        assert top == {"fleetwatch", *(t for t in top if t.endswith(".dist-info"))}, name
        assert all(t.startswith(f"{name}-") for t in top - {"fleetwatch"}), name


def test_the_two_wheels_share_no_file_and_miss_none(wheels: dict[str, zipfile.ZipFile]) -> None:
    serving, toolkit = _files(wheels[SERVING]), _files(wheels[TOOLKIT])
    assert serving & toolkit == set()
    assert all(n.startswith(("fleetwatch/telemetry/", "fleetwatch/core/")) for n in serving)
    # every module, and the data files beside them (dashboards' JSON, example specs, py.typed)
    sources = set()
    for rel in _tracked():
        shipped_kind = rel.suffix in (".py", ".json", ".yaml") or rel.name == "py.typed"
        if shipped_kind and rel.parts[0] in (*FOLDERS, "fleetwatch"):
            sources.add("fleetwatch/" + str(rel) if rel.parts[0] != "fleetwatch" else str(rel))
    assert sources - (serving | toolkit) == set(), "a file no wheel installs"
    assert "fleetwatch/__init__.py" not in serving | toolkit
    assert {"fleetwatch/telemetry/py.typed", "fleetwatch/py.typed"} <= serving | toolkit


def test_the_serving_wheel_requires_none_of_the_analysis_stack(
    wheels: dict[str, zipfile.ZipFile],
) -> None:
    meta = email.message_from_string(_metadata(wheels[SERVING], "METADATA"))
    plain = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    names = {r.split(";")[0].split("[")[0].split(">")[0].split("=")[0].strip() for r in plain}
    assert names and not names & {
        *ANALYSIS,
        "typer",
        "rich",
        "fleetwatch",
        "grafana-foundation-sdk",
    }
    parquet = [r for r in meta.get_all("Requires-Dist") or [] if 'extra == "parquet"' in r]
    assert [r.split(";")[0].split(">")[0].strip() for r in parquet] == ["pyarrow"]
    toolkit = email.message_from_string(_metadata(wheels[TOOLKIT], "METADATA"))
    assert any(r.startswith("fleetwatch-telemetry") for r in toolkit.get_all("Requires-Dist"))


def test_the_vllm_plugin_comes_with_the_serving_wheel(wheels: dict[str, zipfile.ZipFile]) -> None:
    entry = _metadata(wheels[SERVING], "entry_points.txt")
    assert "[vllm.stat_logger_plugins]" in entry
    assert "fleetwatch.telemetry.adapters.vllm.plugin:FleetwatchStatLogger" in entry
    assert "vllm" not in _metadata(wheels[TOOLKIT], "entry_points.txt")


_BLOCKED_IMPORT = """
import importlib, importlib.abc, json, pathlib, sys
blocked = set(sys.argv[1].split(","))
for name in blocked:
    sys.modules[name] = None  # as if not installed: import fails, find_spec says None

class Refuse(importlib.abc.MetaPathFinder):
    # the toolkit's packages are not there either
    def find_spec(self, name, path=None, target=None):
        if name.startswith("fleetwatch.") and name.split(".")[1] not in SERVING:
            raise ModuleNotFoundError(f"blocked: {name}", name=name)
        return None

SERVING = ("telemetry", "core")
sys.meta_path.insert(0, Refuse())
for package in SERVING:
    root = pathlib.Path(sys.argv[2]) / package
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        if parts[-2:] == ["vllm", "plugin"]:
            continue  # needs vLLM itself: the vLLM lane loads it from the light package alone
        importlib.import_module(".".join(["fleetwatch", package, *parts]))
from fleetwatch.core.records import RecordError, RequestRecord
from fleetwatch.telemetry.sink import RotatingRecordSink
sink = RotatingRecordSink(sys.argv[3], max_records=2)
for i in range(3):
    sink.write([RequestRecord(request_id=f"r{i}", replica="a", model="m", arrival_s=1.0 + i,
                              finished_s=2.0 + i, prompt_tokens=3, output_tokens=1)])
sink.close()
try:
    RotatingRecordSink(sys.argv[3], fmt="parquet")
except RecordError as exc:
    refused = str(exc)
loaded = [m for m, mod in sys.modules.items() if mod is not None and m.split(".")[0] in blocked]
loaded += [m for m in sys.modules if m.startswith("fleetwatch.") and m.split(".")[1] not in SERVING]
print(json.dumps({"loaded": sorted(loaded),
                  "files": sorted(p.name for p in pathlib.Path(sys.argv[3]).iterdir()),
                  "parquet": refused}))
"""


def test_every_serving_module_imports_and_writes_without_the_analysis_stack(
    tmp_path: Path,
) -> None:
    blocked = ",".join((*NOT_SERVING, "torch", "vllm"))
    out = subprocess.run(
        [sys.executable, "-c", _BLOCKED_IMPORT, blocked, str(ROOT), str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout)
    assert result["loaded"] == []
    assert result["files"] == ["records-000001.jsonl", "records-000002.jsonl"]
    assert "pip install 'fleetwatch-telemetry[parquet]'" in result["parquet"]


_COMMAND = """
import contextlib, io, sys
from fleetwatch.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    for argv in sys.argv[3:]:
        assert main(argv.split()) == 0, argv
print(",".join(sorted(m for m in sys.argv[2].split(",") if m in sys.modules)))
"""


@pytest.mark.parametrize(
    ("commands", "not_loaded"),
    [
        (["--help", "slo validate {spec}"], HEAVY_FOR_THE_COMMAND),
        # one command loads its own package's command line, no other's
        (["slo validate {spec}"], ("fleetwatch.fleet.cli", "fleetwatch.engine_probe.cli")),
    ],
)
def test_the_command_starts_without_the_heavy_stack(
    tmp_path: Path, commands: list[str], not_loaded: tuple[str, ...]
) -> None:
    spec = ROOT / "slo" / "examples" / "tgi.yaml"
    argv = [c.format(spec=spec) for c in commands]
    out = subprocess.run(
        [sys.executable, "-c", _COMMAND, "", ",".join(not_loaded), *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == ""


def test_mypy_checks_the_namespace_through_its_links_and_misses_no_module() -> None:
    """mypy reads fleetwatch/ and the folders through its links (no import hook it cannot run),
    and a fleetwatch module it cannot find is an error, not a silent Any: a planted type error
    across packages fails `make lint`."""
    import tomllib

    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy["packages"] == ["fleetwatch"] and mypy["strict"] is True
    [override] = [o for o in mypy["overrides"] if "fleetwatch.*" in o["module"]]
    assert override["ignore_missing_imports"] is False
