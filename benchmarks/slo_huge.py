"""Out of core at scale: a Parquet record file far larger than memory, backtested streamed.

Run with ``FLEETWATCH_SLO_HUGE=200000000 .venv/bin/python -m benchmarks slo`` (the number of
records; not part of ``make bench``). Needs about 13 bytes of free disk per record in the
temporary folder (``TMPDIR``); the file is deleted afterwards.

The file is generated a chunk at a time with a seeded generator (finish times of a Poisson
process over 30 days, in finish order, with the three incidents of ``bench_slo``), row groups of
1 M rows. While each chunk is written, plain pandas counts its events per 30 s bin
(``ceil(t / 30)``, ``groupby().agg(size, sum)``), and the per-bin counts of all chunks are added
up; fixed-width ``rolling`` sums over them give the baseline's firing intervals, as in
``bench_slo``.

Then ``fleetwatch slo backtest --json`` runs on the file in a fresh process (the CLI streams
Parquet in row batches): its CPU time and its own peak resident memory (VmHWM) are reported, and
its firing intervals must equal the baseline's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

DAYS = 30
STEP = 30
CHUNK = 4_000_000
BYTES_PER_RECORD = 13  # measured: 2.6 GB for 200 M records (two float columns, snappy)
SPEC = (
    "service: bench\nevaluation_interval: 30s\n"
    "slos: [{name: availability, objective: 99.9, period: 30d, sli: {kind: availability}}]\n"
)
_INCIDENTS = ((5, 0.5, 0.3), (12, 8, 0.004), (20, 0.2, 1.0))

_CHILD = """
import io, json, sys, time
from contextlib import redirect_stdout
from fleetwatch.cli import main
out = io.StringIO()
start = time.process_time()
with redirect_stdout(out):
    code = main(["slo", "backtest", sys.argv[1], "--records", sys.argv[2], "--json"])
cpu = time.process_time() - start
peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) / 1024
print(json.dumps({"code": code, "cpu": cpu, "peak_mb": peak, "out": json.loads(out.getvalue())}))
"""


def _write(path: Path, n: int, seed: int) -> tuple[pd.DataFrame, float]:
    """Write ``n`` records in chunks; the plain-pandas per-bin counts and the CPU seconds those
    counts took."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    start = 1_700_000_000.0
    mean_gap = DAYS * 86400.0 / n
    clock = start
    per_bin: pd.DataFrame | None = None
    pandas_cpu = 0.0
    schema = pa.schema(
        [
            ("request_id", pa.dictionary(pa.int32(), pa.string())),
            ("replica", pa.dictionary(pa.int32(), pa.string())),
            ("model", pa.dictionary(pa.int32(), pa.string())),
            ("arrival_s", pa.float64()),
            ("finished_s", pa.float64()),
            ("status", pa.dictionary(pa.int8(), pa.string())),
        ]
    )
    with pq.ParquetWriter(path, schema) as writer:
        for done in range(0, n, CHUNK):
            m = min(CHUNK, n - done)
            finish = clock + np.cumsum(rng.exponential(mean_gap, m))
            clock = float(finish[-1])
            p = np.full(m, 0.0003)
            for day, hours, ratio in _INCIDENTS:
                t0 = start + day * 86400
                p[(finish >= t0) & (finish < t0 + hours * 3600)] = ratio
            error = rng.random(m) < p
            zeros = np.zeros(m, np.int32)
            table = pa.table(
                {
                    "request_id": pa.DictionaryArray.from_arrays(zeros, ["r"]),
                    "replica": pa.DictionaryArray.from_arrays(zeros, ["r0"]),
                    "model": pa.DictionaryArray.from_arrays(zeros, ["m"]),
                    "arrival_s": finish - 1.0,
                    "finished_s": finish,
                    "status": pa.DictionaryArray.from_arrays(
                        error.astype(np.int8), ["ok", "error"]
                    ),
                },
                schema=schema,
            )
            writer.write_table(table, row_group_size=1 << 20)
            cpu = time.process_time()
            k = np.ceil(finish / STEP).astype(np.int64)
            counts = (
                pd.DataFrame({"k": k, "bad": error})
                .groupby("k")["bad"]
                .agg(["size", "sum"])
                .set_axis(["total", "bad"], axis=1)
            )
            per_bin = counts if per_bin is None else per_bin.add(counts, fill_value=0)
            pandas_cpu += time.process_time() - cpu
    assert per_bin is not None
    return per_bin.astype(np.int64), pandas_cpu


def main(n: int) -> None:
    from benchmarks.machine import machine
    from benchmarks.slo_firing import availability_slo, firing_intervals

    tmp = tempfile.gettempdir()
    need = n * BYTES_PER_RECORD * 1.5
    free = shutil.disk_usage(tmp).free
    if free < need:
        print(
            f"out of core at scale: skipped, {free / 1e9:.1f} GB free in {tmp}, need {need / 1e9:.1f}"
        )
        return
    print(f"machine at start: {machine()}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "records.parquet"
        spec = Path(folder) / "spec.yaml"
        spec.write_text(SPEC)
        t0 = time.perf_counter()
        per_bin, pandas_cpu = _write(path, n, seed=42)
        size_gb = path.stat().st_size / 1e9
        print(f"{n:,} records written to a {size_gb:.2f} GB Parquet file in "
              f"{time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip
        cpu = time.process_time()
        grid = np.arange(per_bin.index.min(), per_bin.index.max() + 1)
        expected = firing_intervals(
            availability_slo(STEP), per_bin.reindex(grid, fill_value=0), grid, STEP
        )
        pandas_cpu += time.process_time() - cpu
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(spec), str(path)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        run: dict[str, Any] = json.loads(done.stdout)
    assert run["code"] == 0, run
    found = sorted(
        ((i["severity"], i["start_s"], i["end_s"]) for i in run["out"]["slos"][0]["intervals"]),
        key=lambda i: (i[1], i[0]),
    )
    assert found == expected, (found, expected)
    print()
    print(
        f"out of core at scale: {n:,} records ({size_gb:.2f} GB Parquet, 30 days), availability "
        f"99.9 % at a 30 s step, `fleetwatch slo backtest --json` in a fresh process"
    )
    print()
    print("| records | file | CPU s | wall s | peak resident MiB (whole process) | intervals |")
    print("|---:|---:|---:|---:|---:|---|")
    print(
        f"| {n:,} | {size_gb:.2f} GB | {run['cpu']:.1f} | {wall:.1f} | {run['peak_mb']:.0f} | "
        f"{len(found)}, identical to plain pandas counted chunk by chunk ({pandas_cpu:.1f} s CPU) |"
    )
    print()
    print(f"machine at the end: {machine()}; the file was deleted")
