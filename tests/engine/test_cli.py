"""`fleetwatch engine run`: a synthetic workload end to end; bad input exits 2 with one line."""

from __future__ import annotations

import json

from fleetwatch.cli import main


def test_run_prints_throughput_and_ttft(capsys, tmp_path) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "vocab_size": 256,
                "hidden_size": 32,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "intermediate_size": 64,
                "max_position_embeddings": 256,
            }
        )
    )
    args = [
        "engine",
        "run",
        "-n",
        "6",
        "--prompt-len",
        "8",
        "--max-tokens",
        "4",
        "--num-blocks",
        "64",
        "--model-config",
        str(config),
        "--shared-prefix",
        "16",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "6/6 completed" in out and "output tokens/s" in out and "TTFT p50/p99" in out


def test_run_rejects_bad_values(capsys) -> None:
    assert main(["engine", "run", "--scheduling", "fifo"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "EngineConfig.scheduling" in err
    assert main(["engine", "run", "--requests", "0"]) == 2
