"""The bandwidth bound from a model's config.json and the GPU table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.core.model import load_shape, shape_from_hf
from fleetwatch.engine_probe.probe.bound import bound_at, capacity_report
from fleetwatch.engine_probe.probe.errors import ProbeError
from fleetwatch.engine_probe.probe.gpus import GPUS, get_gpu

LLAMA3_8B = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
}


def test_llama3_8b_parameters_and_gqa_kv_bytes() -> None:
    shape = shape_from_hf(LLAMA3_8B)
    assert shape.total_params == pytest.approx(8.03e9, rel=0.005)
    # 2 x 32 layers x 8 KV heads x 128 head_dim x 2 bytes = 128 KiB, not the 512 KiB of 32 heads
    assert shape.kv_bytes_per_token(2) == 131072


def test_h100_decode_bound_batch_1_is_weights_over_bandwidth() -> None:
    shape = shape_from_hf(LLAMA3_8B)
    h100 = get_gpu("h100 sxm")
    p = bound_at(shape, h100, batch=1, context_tokens=1)
    assert p.bound_by == "memory"
    assert p.step_time_s == pytest.approx((shape.total_params * 2 + 131072) / 3.35e12)
    assert 200 < p.tokens_per_s < 215
    assert h100.ridge_flops_per_byte == pytest.approx(295, rel=0.01)


def test_large_batches_cross_the_ridge_and_become_compute_bound() -> None:
    shape = shape_from_hf(LLAMA3_8B)
    p = bound_at(shape, get_gpu("H100-SXM"), batch=4096, context_tokens=1)
    assert p.bound_by == "compute"
    assert p.arithmetic_intensity > get_gpu("H100-SXM").ridge_flops_per_byte


def test_sequences_that_fit_and_cost_per_million_tokens() -> None:
    shape = shape_from_hf(LLAMA3_8B)
    rep = capacity_report(
        shape,
        get_gpu("H200"),
        context_tokens=8192,
        memory_fraction=0.9,
        price_per_gpu_hour=3.6,
        utilisation=0.5,
    )
    budget = 141e9 * 0.9 - shape.total_params * 2
    assert rep.max_concurrent_sequences == int(budget // (131072 * 8192))
    assert rep.points[-1].batch == rep.max_concurrent_sequences
    p1 = rep.points[0]
    assert p1.cost_per_million_tokens == pytest.approx(3.6 / (p1.tokens_per_s * 0.5 * 3600) * 1e6)


def test_moe_reads_only_the_experts_its_batch_touches() -> None:
    mixtral = {**LLAMA3_8B, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000}
    shape = shape_from_hf(mixtral)
    assert shape.params_read(1) < shape.params_read(64) <= shape.total_params
    # batch 1 reads the experts its token computes with, plus the embedding table it only looks up
    assert shape.params_read(1) == pytest.approx(shape.params_active() + shape.embed_params)


def test_every_gpu_in_the_table_is_found_and_sane() -> None:
    for name, spec in GPUS.items():
        assert get_gpu(name.lower()) is spec
        assert 50 < spec.ridge_flops_per_byte < 500
    with pytest.raises(ProbeError, match="unknown GPU"):
        get_gpu("V100")


def test_bound_cli_prints_and_writes_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA3_8B))
    out = tmp_path / "bound.json"
    rc = main(
        [
            "probe",
            "bound",
            "--config",
            str(cfg),
            "--gpu",
            "H100-SXM",
            "--context",
            "4096",
            "--price",
            "2.5",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["kv_bytes_per_token"] == 131072
    assert "tokens/s" in capsys.readouterr().out


def test_bound_cli_bad_config_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 64}))
    assert main(["probe", "bound", "--config", str(cfg), "--gpu", "H100"]) == 2
    err = capsys.readouterr().err
    assert "config.json" in err and "missing" in err and err.count("\n") == 1
    assert load_shape  # imported API


LLAMA31_70B = {
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "tie_word_embeddings": False,
}


def test_a_model_that_does_not_fit_is_refused_with_the_shortfall(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA31_70B))
    out = tmp_path / "bound.json"
    argv = ["probe", "bound", "--config", str(cfg), "--gpu", "H100-SXM", "--price", "2.5"]
    assert main([*argv, "--json", str(out)]) == 2
    captured = capsys.readouterr()
    assert "tokens/s" not in captured.out and "$/M" not in captured.out
    assert not out.exists()
    err = captured.err
    assert err.count("\n") == 1, err
    assert "does not fit on 1x H100-SXM" in err
    assert "weights 141.1 GB + KV 1.3 GB for one 4096-token sequence > 72.0 GB HBM" in err
    assert "--gpus 2" in err
    # two GPUs hold it (ideal tensor parallelism), and the table comes back
    assert main([*argv, "--gpus", "2"]) == 0
    assert "tokens/s" in capsys.readouterr().out


def test_capacity_report_refuses_when_not_one_sequence_fits() -> None:
    shape = shape_from_hf(LLAMA3_8B)
    with pytest.raises(ProbeError, match=r"weights 16\.1 GB \+ KV 17\.2 GB .* > 21\.6 GB HBM"):
        capacity_report(shape, get_gpu("L40S"), context_tokens=131072, memory_fraction=0.45)
    rep = capacity_report(shape, get_gpu("L40S"), context_tokens=4096, memory_fraction=0.45)
    assert rep.max_concurrent_sequences >= 1
    assert all(p.batch <= rep.max_concurrent_sequences for p in rep.points)
