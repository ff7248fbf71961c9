"""The records benchmark's datasets, generated once into a cache folder and reused.

Sizes (``SIZES``): ``small`` (20 replicas, two minutes: the smoke test's), ``10m`` and ``1h`` (200
replicas at 10 requests a second in the vLLM plugin's JSON-lines files, a file sealed every 10 s:
1.2 M records in ~12,000 files, 7.2 M in ~72,000) and ``100m`` (the same fleet over 13.9 hours,
100 M records, as a compacted hive-partitioned Parquet dataset, one file per hour and replica).

A dataset's folder holds ``fleet/`` (the records), ``halves/before`` and ``halves/after`` (hard
links to the files of its first and second half in time, for ``fleet compare``: a sealed file or
an hour's partition lies wholly in one half) and, written last, ``dataset.json``: what was made
and how long it took. A folder whose ``dataset.json`` is missing, or describes another
generator or size, is removed and made again. Replicas are written in parallel (one process per
CPU), each from its own seeded draws; memory is one replica's records per process.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from benchmarks.records_fleet import LARGE_MODEL, SMALL_MODEL, FleetShape, ModelShape

__all__ = ["SIZES", "Dataset", "Made", "ensure"]

GENERATOR = "fleetwatch-bench-records/5"
"""Changes whenever the generator's output would: a cache made by another is made again."""

DAY_START_S = 1796119200.0  # 2026-12-01T10:00:00Z
NIGHT_START_S = 1796061600.0  # 2026-11-30T18:00:00Z: 13.9 hours cross midnight


@dataclass(frozen=True, slots=True)
class Dataset:
    """One size: the fleet, the stretch of finish times ``[start_s, start_s + duration_s)``, the
    file format."""

    name: str
    shape: FleetShape
    start_s: float
    duration_s: float
    fmt: Literal["jsonl", "parquet"]

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s

    @property
    def mid_s(self) -> float:
        """Where the halves meet: the middle, to a sealed file's edge (JSON lines) or an hour's
        (Parquet)."""
        grain = self.shape.seal_s if self.fmt == "jsonl" else 3600.0
        return round((self.start_s + self.duration_s / 2) / grain) * grain

    def expected_records(self) -> int:
        return round(self.shape.replicas * self.shape.rate_per_s * self.duration_s)


SIZES: dict[str, Dataset] = {
    "small": Dataset(
        "small",
        FleetShape(
            hosts=5,
            per_host=4,
            models=(ModelShape(SMALL_MODEL, 15, 1.0), ModelShape(LARGE_MODEL, 5, 3.0)),
        ),
        DAY_START_S,
        120.0,
        "jsonl",
    ),
    "10m": Dataset("10m", FleetShape(), DAY_START_S, 600.0, "jsonl"),
    "1h": Dataset("1h", FleetShape(), DAY_START_S, 3600.0, "jsonl"),
    "100m": Dataset("100m", FleetShape(), NIGHT_START_S, 50_000.0, "parquet"),
}


@dataclass(frozen=True, slots=True)
class Made:
    """A dataset on disk and what it holds."""

    root: Path
    dataset: Dataset
    records: int
    files: int
    bytes: int
    generate_s: float
    reused: bool
    planted: list[str] = field(default_factory=list)

    @property
    def fleet(self) -> Path:
        return self.root / "fleet"

    @property
    def before(self) -> Path:
        return self.root / "halves" / "before"

    @property
    def after(self) -> Path:
        return self.root / "halves" / "after"


def _spec(d: Dataset) -> dict[str, Any]:
    return {"generator": GENERATOR, "dataset": asdict(d)}


def _write_replica(d: Dataset, i: int, root: Path) -> tuple[int, int, list[tuple[str, float]]]:
    """Write replica ``i``; (records, bytes, [(path under root, the file's first second)])."""
    from benchmarks.records_files import write_jsonl, write_parquet
    from benchmarks.records_fleet import replica_columns

    rep = d.shape.replica(i)
    cols = replica_columns(d.shape, i, d.start_s, d.end_s)
    if d.fmt == "jsonl":
        written = write_jsonl(root, d.shape, rep, cols, d.start_s)
    else:
        written = write_parquet(root, rep, cols)
    return written.records, written.bytes, [(str(p.relative_to(root)), s) for p, s in written.files]


def _link_halves(made_root: Path, files: Iterator[tuple[str, float]], mid_s: float) -> None:
    for rel, first_s in files:
        half = "before" if first_s < mid_s else "after"
        target = made_root / "halves" / half / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(made_root / "fleet" / rel, target)


def ensure(name: str, cache: Path, *, log: Any = print) -> Made:
    """The dataset ``name`` under ``cache/name``: reused when complete, else made again."""
    d = SIZES[name]
    root = cache / name
    marker = root / "dataset.json"
    if marker.exists():
        doc = json.loads(marker.read_text(encoding="utf-8"))
        if doc.get("spec") == json.loads(json.dumps(_spec(d))):
            return Made(root, d, doc["records"], doc["files"], doc["bytes"], doc["generate_s"],
                        True, d.shape.planted())  # fmt: skip
    shutil.rmtree(root, ignore_errors=True)
    (root / "fleet").mkdir(parents=True)
    log(f"generating {name}: {d.expected_records():,} records expected into {root} ...")
    start = time.perf_counter()
    records = size = 0
    files: list[tuple[str, float]] = []
    workers = max(1, min(os.cpu_count() or 1, d.shape.replicas))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        jobs = [pool.submit(_write_replica, d, i, root / "fleet") for i in range(d.shape.replicas)]
        for job in jobs:
            n, b, written = job.result()
            records, size = records + n, size + b
            files += written
    _link_halves(root, iter(files), d.mid_s)
    seconds = time.perf_counter() - start
    doc = {"spec": _spec(d), "records": records, "files": len(files), "bytes": size,
           "generate_s": seconds}  # fmt: skip
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    tmp.replace(marker)
    return Made(root, d, records, len(files), size, seconds, False, d.shape.planted())
