"""The files the bad-input table (``test_bad_input.py``) points its commands at."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetwatch.records import RequestRecord, write_records

_LEVEL = {"rate": 2, "request_throughput": 2, "ttft": {"p99": 0.1}, "tpot": {"p99": 0.01}}
_PROBE = {"plan": {"mode": "open"}, "levels": [_LEVEL]}
_SPEC_TEXT = "service: s\nslos:\n- {name: a, objective: %s, sli: {kind: %s}}\n"


@pytest.fixture(name="tree")
def bad_input_tree(tmp_path: Path) -> Path:
    (tmp_path / "dir").mkdir()
    (tmp_path / "x.test.yaml").mkdir()
    (tmp_path / "file.txt").write_text("a plain file\n")
    for name in ("empty.jsonl", "empty.yaml", "empty.json"):
        (tmp_path / name).write_text("")
    (tmp_path / "garbage.jsonl").write_bytes(b"\x00\x01{{not json\n")
    (tmp_path / "garbage.yaml").write_text("{{{: - [\n")
    (tmp_path / "garbage.json").write_text("{not json")
    (tmp_path / "garbage.parquet").write_bytes(b"PAR1 not really")
    (tmp_path / "probe.json").write_text(json.dumps(_PROBE))
    (tmp_path / "objective.yaml").write_text(_SPEC_TEXT % (150, "availability"))
    (tmp_path / "threshold.yaml").write_text(
        "service: s\nslos:\n- {name: a, objective: 99, sli: {kind: latency, signal: ttft,"
        " threshold: 0.37}}\n"
    )
    write_records(
        tmp_path / "good.jsonl",
        [
            RequestRecord(f"r{i}", f"rep{i % 3}", "m", i, i + 1.0, i + 0.1, i + 0.2, 10, 3)
            for i in range(30)
        ],
    )
    (tmp_path / "llama8b.json").write_text(
        json.dumps(
            {
                "vocab_size": 128256,
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "max_position_embeddings": 131072,
            }
        )
    )
    return tmp_path
