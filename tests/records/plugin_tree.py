"""Records in the shape the vLLM plugin leaves them: a folder per replica of sealed JSON-lines
segments (and one Parquet file), a half-written temporary segment and a file that is not records;
with the same rows written as one file, for comparing a dataset with its single-file reading."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pandas as pd

from fleetwatch.records import write_records
from fleetwatch.scenarios.synthetic_fleet import synthetic_fleet

SEGMENTS = 3
"""Segments per replica: the first ones JSON lines, the last Parquet."""


class PluginTree(NamedTuple):
    root: Path  # the dataset: root/<replica>/records-NNNNNN.{jsonl,parquet}
    whole: Path  # the same rows, in the order the dataset resolves, as one JSON-lines file
    rows: int
    files: int


def write_tree(
    root: Path, frame: pd.DataFrame, *, whole: Path | None = None, segments: int = SEGMENTS
) -> PluginTree:
    """Split ``frame`` into per-replica segments under ``root``; ``whole`` gets the concatenation
    in dataset order (sorted paths)."""
    parts: list[tuple[Path, pd.DataFrame]] = []
    for replica, rows in frame.groupby("replica", observed=True, sort=True):
        folder = root / str(replica)
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(segments):
            fmt = "parquet" if i == segments - 1 else "jsonl"
            path = folder / f"records-{i:06d}.{fmt}"
            piece = rows.iloc[i::segments]
            write_records(path, piece)
            parts.append((path, piece))
        # what a killed sink leaves beside its segments, and what an operator leaves
        (folder / f".records-{segments:06d}.jsonl.9f3a1c.tmp").write_text('{"request_id": "ha')
        (folder / "notes.txt").write_text("replica notes, not records\n")
    parts.sort(key=lambda p: p[0])
    whole = whole or root.parent / f"{root.name}-whole.jsonl"
    write_records(whole, pd.concat([p for _, p in parts], ignore_index=True))
    return PluginTree(root, whole, len(frame), len(parts))


def plugin_tree(root: Path, *, slow: int | None = 2, seed: int = 7) -> PluginTree:
    """Six replicas of 240 requests; replica ``slow`` 1.6x slower (None: all healthy)."""
    slowdown = {slow: 1.6} if slow is not None else None
    return write_tree(root, synthetic_fleet(6, 240, seed=seed, slowdown=slowdown))


def compacted(root: Path, frame: pd.DataFrame, *, parts: int = 2) -> list[Path]:
    """``frame`` as ``records compact`` leaves a replica's rows: Parquet files of one replica
    each, ``parts`` a replica (its rows in order, split evenly); the files, sorted."""
    root.mkdir(parents=True)
    for i, (_, rows) in enumerate(frame.groupby("replica", observed=True)):
        cut = [len(rows) * k // parts for k in range(parts + 1)]
        for k in range(parts):
            part = rows.iloc[cut[k] : cut[k + 1]].reset_index(drop=True)
            write_records(root / f"part-{i}-{k}.parquet", part)
    return sorted(root.glob("*.parquet"))
