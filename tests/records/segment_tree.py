"""Many small sealed segments in the shape a fleet's sinks leave them, for compaction tests: a
folder per replica of ``vllm-<pid>-NNNNNN.jsonl`` files (every ``parquet_every``-th one Parquet),
records finishing over a span of hours, every file's mtime set in the past, and beside them what a
killed sink leaves (a temporary file) and what an operator leaves (notes). Also: every request id
a set of paths holds, counted, read without the dataset reader's checks (fast, for kill loops)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from fleetwatch.core.records import RequestRecord, write_records

if TYPE_CHECKING:
    import pandas as pd

START_S = 1_764_583_200.0
"""2025-12-01T10:00:00Z: where the records' clock starts."""


class SegmentTree(NamedTuple):
    root: Path
    ids: frozenset[str]
    files: tuple[Path, ...]
    records: tuple[RequestRecord, ...]


def replica_name(k: int) -> str:
    """A replica as the plugin names it by default: the scrape address, with a ``:``."""
    return f"10.0.0.{k}:8000"


def segment_tree(
    root: Path,
    *,
    replicas: int = 6,
    segments: int = 40,
    per_segment: int = 3,
    span_s: float = 3 * 3600.0,
    start_s: float = START_S,
    parquet_every: int = 10,
    mtime_s: float | None = None,
) -> SegmentTree:
    """Write the tree; records finish evenly over ``span_s`` from ``start_s``; file mtimes are
    ``mtime_s`` (default: an hour after the last record finished)."""
    per_replica = segments * per_segment
    records: list[RequestRecord] = []
    files: list[Path] = []
    when = mtime_s if mtime_s is not None else start_s + span_s + 3600.0
    for k in range(replicas):
        folder = root / f"replica-{k}"
        folder.mkdir(parents=True, exist_ok=True)
        for s in range(segments):
            batch = []
            for i in range(per_segment):
                n = s * per_segment + i
                finished = start_s + span_s * (n + 0.5) / per_replica
                batch.append(
                    RequestRecord(
                        request_id=f"req-{k}-{n:05d}",
                        replica=replica_name(k),
                        model="m",
                        arrival_s=finished - 1.5,
                        scheduled_s=finished - 1.4,
                        first_token_s=finished - 1.0,
                        finished_s=finished,
                        prompt_tokens=100 + n % 37,
                        output_tokens=20 + k,
                    )
                )
            fmt = "parquet" if parquet_every and s % parquet_every == parquet_every - 1 else "jsonl"
            path = folder / f"vllm-{4000 + k}-{s + 1:06d}.{fmt}"
            write_records(path, batch)
            os.utime(path, (when, when))
            files.append(path)
            records.extend(batch)
        (folder / f".vllm-{4000 + k}-{segments + 1:06d}.jsonl.5e1f0a.tmp").write_text(
            '{"request_id": "half'
        )
        (folder / "notes.txt").write_text("not records\n")
    return SegmentTree(root, frozenset(r.request_id for r in records), tuple(files), tuple(records))


def count_ids(*roots: Path) -> Counter[str]:
    """Every request id in the record files under ``roots`` (as a dataset resolves them:
    dotfiles, ``*.tmp`` and hidden folders left out), counted."""
    import pyarrow.parquet as pq

    from fleetwatch.records.dataset import resolve

    ids: Counter[str] = Counter()
    existing = [r for r in roots if r.exists()]
    for path in resolve(existing, allow_empty=True) if existing else []:
        if path.suffix == ".parquet":
            ids.update(pq.read_table(path, columns=["request_id"]).column(0).to_pylist())
        else:
            with open(path, encoding="utf-8") as fh:
                ids.update(json.loads(line)["request_id"] for line in fh if line.strip())
    return ids


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its bytes, the compaction state folder left out."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".compact" not in p.parts
    }


def compact_argv(src: Path, dest: Path, *extra: str) -> list[str]:
    """``fleetwatch records compact SRC --out DEST …``'s arguments."""
    return ["records", "compact", str(src), "--out", str(dest), *extra]


def partition_files(dest: Path) -> dict[str, list[str]]:
    """Each partition folder's files (hidden ones too), by folder."""
    return {
        d.relative_to(dest).as_posix(): sorted(p.name for p in d.iterdir())
        for d in sorted(dest.glob("date=*/hour=*/replica=*"))
    }


STORED = [
    "request_id",
    "replica",
    "model",
    "arrival_s",
    "scheduled_s",
    "first_token_s",
    "finished_s",
    "prompt_tokens",
    "output_tokens",
    "status",
]
"""The stored columns a tree's records set, compared before and after compaction."""


def by_request(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame``'s ``STORED`` columns in request id order, for comparing two readings."""
    return frame[STORED].sort_values("request_id").reset_index(drop=True)
