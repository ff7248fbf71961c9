"""Fleet-scale records: ``fleet outliers``, ``fleet tail``, ``fleet compare`` and ``slo backtest`` over
the vLLM plugin's files of 200 replicas (1.2 M and 7.2 M records) and over 100 M records in
hive-partitioned Parquet, each side by side with one hand-written DuckDB SQL script computing the
same per-replica figures (``benchmarks/records_sql.py``).

Each side runs as a whole process (``benchmarks/process_cost.py``): CPU seconds (user + system),
wall seconds and peak resident memory, medians of interleaved runs. A command that fails, runs
past the time limit or passes the memory cap is shown as such with its first error line, and is
not run again. The verdict says whether fleetwatch exited 0 and found what was planted: the 1.5x
slower replica of each model (outliers flag it; the tail names it), no regression between two
halves of one healthy fleet (compare), the availability alerts that 0.5 % errors against a
99.9 % objective fire (backtest).

Environment:

- ``FLEETWATCH_BENCH_RECORDS``: sizes, comma-separated, of ``small``, ``10m``, ``1h``, ``100m``
  (default ``10m,1h,100m``; ``small`` is a 20-replica smoke run);
- ``FLEETWATCH_BENCH_RECORDS_DIR``: the dataset cache (default ``/tmp/fleetwatch-bench-records``);
  datasets are generated once and reused (``benchmarks/records_datasets.py``);
- ``FLEETWATCH_BENCH_RECORDS_COMMANDS``: only these commands, comma-separated, of ``outliers``,
  ``tail``, ``compare``, ``backtest`` (default: all four);
- ``FLEETWATCH_BENCH_REPEAT``: runs per side (default 3; 1 for ``100m``);
- ``FLEETWATCH_BENCH_TIMEOUT_S``: a run's time limit (default 1800);
- ``FLEETWATCH_BENCH_RSS_CAP_MB``: a run's memory cap (default 80 % of the memory available
  when the size's runs begin: a run that would push the machine into swap or the OOM killer is
  stopped instead).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from benchmarks.machine import load, machine
from benchmarks.process_cost import Cost, measure
from benchmarks.records_datasets import SIZES, Made, ensure
from benchmarks.records_fleet import SMALL_MODEL
from benchmarks.records_sql import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
CPU_FLOOR = 1.5
"""Each command's CPU within this many times the baseline's."""
RSS_FLOOR_MB = 1000.0
"""At 100 M records, each command's peak resident memory within 1 GB."""

SPEC = f"""version: fleetwatch/slo/v1
service: llama-8b
evaluation_interval: 5m
slos:
  - name: availability
    objective: 99.9
    period: 30d
    selector: {{model: {SMALL_MODEL}}}
    sli: {{kind: availability, bad: [error, aborted]}}
"""
"""Availability of the small model, evaluated every 5 minutes: the baseline's 5-minute bins."""

Verdict = Callable[[str, Made], str]


@dataclass(frozen=True, slots=True)
class Case:
    """One command: its label, fleetwatch's arguments, the baseline's, and how fleetwatch's
    output is judged."""

    label: str
    ours: list[str]
    baseline: list[str]
    verdict: Verdict

    @property
    def name(self) -> str:
        """The command's last word: outliers, tail, compare, backtest."""
        return self.label.strip("`").split()[1]


def _commands() -> set[str]:
    wanted = os.environ.get("FLEETWATCH_BENCH_RECORDS_COMMANDS", "")
    return {c.strip() for c in wanted.split(",") if c.strip()} or set(COMMANDS)


@dataclass(frozen=True, slots=True)
class Side:
    """The runs of one side of a case: the medians of those that succeeded, else the failure."""

    runs: list[Cost]

    @property
    def failed(self) -> Cost | None:
        return next((c for c in self.runs if not c.ok), None)

    def median(self, attr: str) -> float:
        return float(statistics.median(getattr(c, attr) for c in self.runs))


def _models(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """A report's per-model parts (a one-model dataset's report is its one part)."""
    models = doc.get("models")
    return models if isinstance(models, list) else [doc]


def outliers_verdict(stdout: str, made: Made) -> str:
    flagged = {
        f["replica"]
        for m in _models(json.loads(stdout))
        for f in m.get("findings", [])
        if f.get("side") == "replica"
    }
    planted = set(made.planted)
    missed = sorted(planted - flagged)
    others = len(flagged - planted)
    found = "flagged both planted replicas" if not missed else f"missed {', '.join(missed)}"
    return found + (f", and {others} others" if others else ", no others")


def tail_verdict(stdout: str, made: Made) -> str:
    named = []
    for m in _models(json.loads(stdout)):
        for s in m.get("suspects", []):
            text = " ".join(s.get("evidence", []))
            hit = [p for p in made.planted if p in text]
            if s.get("name") == "one bad replica" and hit:
                named.append(f"{hit[0]} ({s['share']:.0%} of the excess)")
    if len(named) == len(made.planted):
        return "named the planted replica in each model's tail: " + ", ".join(named)
    return f"named {len(named)} of {len(made.planted)} planted replicas" + (
        ": " + ", ".join(named) if named else ""
    )


def compare_verdict(stdout: str, made: Made) -> str:
    models = _models(json.loads(stdout))
    summaries = [str(m.get("summary")) for m in models]
    regressions = sum(len(m.get("regressions", [])) for m in models)
    if regressions == 0:
        return f"no regression between the halves ({len(summaries)} models)"
    return f"{regressions} regressions listed between halves of one fleet: " + "; ".join(summaries)


def backtest_verdict(stdout: str, made: Made) -> str:
    slos = json.loads(stdout)["slos"]
    fired = sorted({i["severity"] for s in slos for i in s["intervals"]})
    count = sum(len(s["intervals"]) for s in slos)
    return (
        f"{count} firing interval{'' if count == 1 else 's'} ({', '.join(fired) or 'none'}) over "
        f"{slos[0]['evaluations']} evaluations"
    )


def cases(made: Made, spec: Path) -> list[Case]:
    fw = [sys.executable, "-m", "fleetwatch"]
    sql = [sys.executable, "-m", "benchmarks.records_sql"]
    fmt = made.dataset.fmt
    fleet, before, after = str(made.fleet), str(made.before), str(made.after)
    return [
        Case(
            "`fleet outliers DIR --json`",
            [*fw, "fleet", "outliers", fleet, "--json"],
            [*sql, "outliers", fmt, fleet],
            outliers_verdict,
        ),
        Case(
            "`fleet tail DIR --json`",
            [*fw, "fleet", "tail", fleet, "--json"],
            [*sql, "tail", fmt, fleet],
            tail_verdict,
        ),
        Case(
            "`fleet compare BEFORE AFTER --json` (the halves)",
            [*fw, "fleet", "compare", before, after, "--json"],
            [*sql, "compare", fmt, before, after],
            compare_verdict,
        ),
        Case(
            "`slo backtest SPEC --records DIR --json`",
            [*fw, "slo", "backtest", str(spec), "--records", fleet, "--json"],
            [*sql, "backtest", fmt, fleet, "--model", SMALL_MODEL],
            backtest_verdict,
        ),
    ]


@dataclass(frozen=True, slots=True)
class Limits:
    repeat: int
    timeout_s: float
    rss_cap_mb: float


def _available_mb() -> float:
    """Memory available now (``MemAvailable``), MB; the machine's whole memory without it."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except (OSError, ValueError):
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e6


def _limits(size: str) -> Limits:
    env = os.environ
    return Limits(
        repeat=int(env.get("FLEETWATCH_BENCH_REPEAT") or (1 if size == "100m" else 3)),
        timeout_s=float(env.get("FLEETWATCH_BENCH_TIMEOUT_S") or 1800),
        rss_cap_mb=float(env.get("FLEETWATCH_BENCH_RSS_CAP_MB") or 0.8 * _available_mb()),
    )


def run_case(case: Case, limits: Limits, scratch: Path) -> tuple[Side, Side]:
    """Both sides, interleaved; a side that fails is not run again."""
    ours: list[Cost] = []
    base: list[Cost] = []
    for _ in range(limits.repeat):
        for argv, runs in ((case.ours, ours), (case.baseline, base)):
            if runs and not runs[-1].ok:
                continue
            runs.append(
                measure(
                    argv,
                    timeout_s=limits.timeout_s,
                    rss_cap_mb=limits.rss_cap_mb,
                    cwd=ROOT,
                    scratch=scratch,
                )
            )
    return Side(ours), Side(base)


def _cells(side: Side) -> str:
    """CPU s | wall s | peak RSS MB: medians, or the failed run's figures."""
    run = side.failed
    if run is not None:
        return f"{run.cpu_s:.1f} | {run.wall_s:.1f} | {run.rss_mb:,.0f}"
    return (
        f"{side.median('cpu_s'):.1f} | {side.median('wall_s'):.1f} | {side.median('rss_mb'):,.0f}"
    )


def _verdict(case: Case, ours: Side, base: Side, made: Made) -> str:
    failed = ours.failed
    if failed is not None:
        text = f"fleetwatch failed: {failed.first_error().removeprefix('fleetwatch: error: ')}"
    else:
        try:
            text = "exit 0; " + case.verdict(ours.runs[-1].stdout, made)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            text = f"exit 0, but its output was not understood ({type(exc).__name__}: {exc})"
    bad = base.failed
    if bad is not None:
        text += f"; baseline failed: {bad.first_error()}"
    return text.replace(f"{made.root.parent}/", "").replace("|", "/")


def _ratio(ours: Side, base: Side) -> float | None:
    if ours.failed or base.failed:
        return None
    return ours.median("cpu_s") / base.median("cpu_s")


def _describe(made: Made) -> str:
    d = made.dataset
    kind = (
        "JSON lines in the vLLM plugin's files (host/vllm-PID/vllm-PID-NNNNNN.jsonl, sealed every "
        f"{d.shape.seal_s:.0f} s)"
        if d.fmt == "jsonl"
        else "compacted hive-partitioned Parquet (date=/hour=/replica=/part-0.parquet, zstd)"
    )
    models = " + ".join(
        f"{m.replicas} × {m.name.rsplit('/', 1)[-1]} ({m.speed:g}x service time)"
        for m in d.shape.models
    )
    made_how = (
        f"reused (generated in {made.generate_s:.0f} s)"
        if made.reused
        else f"generated in {made.generate_s:.0f} s"
    )
    span = (
        f"{d.duration_s / 60:.0f} minutes"
        if d.duration_s < 3600
        else f"{d.duration_s / 3600:.1f} hours"
    )
    return (
        f"{d.name}: {made.records:,} records over {span}, {made.files:,} files, "
        f"{made.bytes / 1e6:,.0f} MB, {kind}; {d.shape.hosts} hosts × {d.shape.per_host} replicas, "
        f"{models}, {d.shape.rate_per_s:g} requests/s each; planted {d.shape.slowdown:g}x slower: "
        f"{', '.join(made.planted)}; halves meet at {d.mid_s - d.start_s:,.0f} s; {made_how}"
    )


def _warm(made: Made) -> None:
    """Read every file once, so neither side's first run pays for the disk."""
    buf = bytearray(1 << 20)
    for path in made.fleet.rglob("*"):
        if path.is_file():
            with open(path, "rb", buffering=0) as f:
                while f.readinto(buf):
                    pass


def bench_size(size: str, cache: Path) -> None:
    made = ensure(size, cache)
    limits = _limits(size)
    print(f"\n{_describe(made)}")
    print(
        f"runs: median of {limits.repeat} per side, interleaved; limit {limits.timeout_s:.0f} s and "
        f"{limits.rss_cap_mb:,.0f} MB resident per run"
    )
    _warm(made)
    print()
    print(
        "| command | fleetwatch CPU s | wall s | peak RSS MB | baseline CPU s | wall s | "
        "peak RSS MB | CPU fleetwatch/baseline | verdict |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    floors: list[str] = []
    rss_floors: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        spec = scratch / "availability.yaml"
        spec.write_text(SPEC, encoding="utf-8")
        for case in cases(made, spec):
            if case.name not in _commands():
                continue
            ours, base = run_case(case, limits, scratch)
            ratio = _ratio(ours, base)
            print(
                f"| {case.label} | {_cells(ours)} | {_cells(base)} | "
                f"{'—' if ratio is None else f'{ratio:.2f}x'} | {_verdict(case, ours, base, made)} |",
                flush=True,
            )
            name = case.name
            if ratio is None:
                floors.append(f"{name} not measured (a side failed)")
            else:
                floors.append(f"{name} {ratio:.2f}x ({'met' if ratio <= CPU_FLOOR else 'missed'})")
            if size == "100m":
                stopped = ours.failed
                if stopped is not None:
                    rss_floors.append(f"{name} failed ({stopped.rss_mb:,.0f} MB when it stopped)")
                else:
                    rss = ours.median("rss_mb")
                    met = "met" if rss <= RSS_FLOOR_MB else "missed"
                    rss_floors.append(f"{name} {rss:,.0f} MB ({met})")
    print()
    print(f"floor, CPU within {CPU_FLOOR:g}x the baseline's: {'; '.join(floors)}")
    if rss_floors:
        print(f"floor, 100 M records within 1 GB peak RSS: {'; '.join(rss_floors)}")


def main() -> None:
    sizes = [
        s.strip() for s in os.environ.get("FLEETWATCH_BENCH_RECORDS", "10m,1h,100m").split(",")
    ]
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        print(f"unknown size(s) {', '.join(unknown)}; known: {', '.join(SIZES)}")
        return
    cache = Path(os.environ.get("FLEETWATCH_BENCH_RECORDS_DIR") or "/tmp/fleetwatch-bench-records")
    print(f"machine: {machine()}")
    print(
        f"Python {sys.version.split()[0]}, duckdb {version('duckdb')}, pyarrow "
        f"{version('pyarrow')}; the baseline: one DuckDB SQL script per command "
        "(benchmarks/records_sql.py), SET threads=2"
    )
    print(
        f"floors: each command within {CPU_FLOOR:g}x the baseline's CPU; 100 M records within "
        "1 GB peak RSS"
    )
    for size in sizes:
        bench_size(size, cache)
    print(f"\n{load()} at the end")


if __name__ == "__main__":
    main()
