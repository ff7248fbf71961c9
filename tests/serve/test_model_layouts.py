"""The model arithmetic on the models that break the dense formula: MLA and sliding-window caches,
quantized checkpoints, mixture-of-experts active parameters, and tensor-parallel splits an engine
accepts. Configs are the public config.json files in ``tests/serve/models`` (sources in its
README); each published figure names its source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.core.model import ModelShapeError, load_shape, shape_from_hf
from fleetwatch.engine_probe.probe.bound import bound_at, capacity_report
from fleetwatch.engine_probe.probe.errors import ProbeError
from fleetwatch.engine_probe.probe.gpus import get_gpu

MODELS = Path(__file__).parent / "models"
DEEPSEEK_V3 = MODELS / "deepseek-v3.json"
GPT_OSS_120B = MODELS / "gpt-oss-120b.json"
MIXTRAL = MODELS / "mixtral-8x7b.json"
LLAMA_70B = MODELS / "llama-3.1-70b.json"
LLAMA_4_SCOUT = MODELS / "llama-4-scout.json"
QWEN3_30B_A3B = MODELS / "qwen3-30b-a3b.json"


def _bound(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["probe", "bound", *argv])
    out = capsys.readouterr()
    return rc, " ".join(out.out.split()), out.err


# --- attention layouts -------------------------------------------------------------------------


def test_deepseek_v3_caches_one_mla_latent_per_layer() -> None:
    shape = load_shape(DEEPSEEK_V3)
    # (kv_lora_rank 512 + qk_rope_head_dim 64) x 61 layers x 2 bytes, as vLLM stores MLA
    assert shape.kv_bytes_per_token(2) == (512 + 64) * 61 * 2 == 70272
    assert shape.kv_bytes_per_token(2, 8192) == 70272
    # the latent has no head axis: every tensor-parallel GPU holds all of it
    assert shape.kv_bytes_per_sequence(8192, 2, tensor_parallel=8) == 70272 * 8192


def test_gpt_oss_sliding_layers_keep_only_their_window() -> None:
    shape = load_shape(GPT_OSS_120B)
    full_layer = 2 * 8 * 64 * 2  # K and V, 8 KV heads of 64, bf16: 2 KiB a token per layer
    # 18 full-attention layers grow; the 18 sliding ones keep 128 tokens
    assert shape.kv_bytes_per_token(2) == 18 * full_layer == 36864
    assert shape.kv_bytes_per_sequence(8192, 2) == full_layer * (18 * 8192 + 18 * 128)
    assert shape.kv_bytes_per_token(2, 8192) == pytest.approx(37440)
    assert shape.sliding_saving(8192) == pytest.approx(1 - (8192 + 128) / (2 * 8192))
    # below the window, a sliding layer caches every token: nothing saved
    assert shape.sliding_saving(100) == 0.0


def test_mistral_style_window_on_every_layer_and_qwen_style_switched_off() -> None:
    base = {
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 32000,
        "intermediate_size": 14336,
    }
    mistral = shape_from_hf({**base, "sliding_window": 4096})
    assert mistral.kv_bytes_per_sequence(8192, 2) == mistral.kv_bytes_per_sequence(4096, 2)
    qwen = shape_from_hf({**base, "sliding_window": 4096, "use_sliding_window": False})
    assert qwen.kv_bytes_per_sequence(8192, 2) == 2 * qwen.kv_bytes_per_sequence(4096, 2)


def test_dense_llama_70b_figures_are_unchanged() -> None:
    shape = load_shape(LLAMA_70B)
    assert shape.total_params == 70_553_706_496
    assert shape.weight_bytes() == shape.total_params * 2
    assert shape.kv_bytes_per_token(2) == shape.kv_bytes_per_token(2, 4096) == 327680
    rep = capacity_report(shape, get_gpu("H100-SXM"), num_gpus=2)
    assert rep.weight_bytes == shape.total_params * 2
    assert rep.kv_replicas == 1 and rep.sliding_saving == 0.0


# --- weights as shipped, MoE active parameters -------------------------------------------------


def test_deepseek_v3_671b_total_37b_active_fp8_with_block_scales() -> None:
    shape = load_shape(DEEPSEEK_V3)
    # DeepSeek-V3 README_WEIGHTS.md: "Total parameters: 671B", "Activation parameters: 36.6B
    # (including 0.9B for the output Head)"; the paper rounds to 37B. The MTP module (11.5B,
    # num_nextn_predict_layers) is loaded only for speculative decoding and not counted there.
    # Norms and the router's bias are left out here: under 0.1%.
    assert shape.total_params == pytest.approx(671e9, rel=0.002)
    assert shape.params_active() == pytest.approx(36.6e9, rel=0.005)
    # fp8 e4m3 linear layers, a float32 scale per 128x128 block; embeddings, head, router and
    # norms at bf16: ~673 GB (the hub's 688 GB of safetensors also hold the 11.5B MTP layer)
    assert shape.weight_format.method == "fp8" and shape.weight_format.block == (128, 128)
    assert shape.weight_bytes() == pytest.approx(673e9, rel=0.005)
    assert shape.weight_bytes(2) == shape.total_params * 2
    # README_WEIGHTS.md: the MTP module has "11.5B unique parameters" besides the shared
    # embedding and head; one decoder layer plus eh_proj here comes to 11.6B
    assert shape.mtp_params == pytest.approx(11.5e9, rel=0.01)


def test_mixtral_8x7b_467b_total_129b_active() -> None:
    shape = load_shape(MIXTRAL)
    # Mistral AI, "Mixtral of experts" (2023-12-11): "46.7B total parameters but only uses
    # 12.9B parameters per token". Mistral's 12.9B counts the input embedding table too; a token
    # only looks that up, so the active figure here (the FLOPs numerator) is 1% lower.
    assert shape.total_params == pytest.approx(46.7e9, rel=0.001)
    assert shape.params_active() + shape.embed_params == pytest.approx(12.9e9, rel=0.002)
    assert shape.params_active() == pytest.approx(12.9e9, rel=0.015)


def test_llama_4_scout_chunked_layers_and_its_shared_expert() -> None:
    """A multimodal config's text_config is the language model; three layers in four keep only
    the current 8,192-token chunk (chunked local attention), every fourth grows (full); every
    layer routes to one of 16 experts beside one shared expert."""
    shape = load_shape(LLAMA_4_SCOUT)
    # Meta, "The Llama 4 herd" (2025-04-05): Scout is "a 17 billion active parameter model with
    # 16 experts", 109B total, and "fits on a single NVIDIA H100 GPU" with Int4 weights. The
    # 109B includes the vision encoder, which the text arithmetic leaves out (about 1%), and the
    # 17B active counts the input embedding table as Mistral's figure does.
    assert shape.total_params == pytest.approx(109e9, rel=0.015)
    assert shape.params_active() + shape.embed_params == pytest.approx(17e9, rel=0.015)
    limits = shape.layer_kv_limit
    assert len(limits) == 48 and limits[3] is None and limits[0] == 8192
    assert sum(limit is None for limit in limits) == 12
    # 12 full layers x 2 x 8 KV heads x 128 x 2 B, and 36 chunked ones of 8,192 tokens
    full = 12 * 2 * 8 * 128 * 2
    chunked = 36 * 2 * 8 * 128 * 2
    assert shape.kv_bytes_per_token(2.0, 131072) == full + chunked * 8192 / 131072
    assert shape.kv_bytes_per_token(2.0, 4096) == full + chunked  # below a chunk: every token
    assert shape.sliding_saving(131072) == pytest.approx(1 - 58368 / (full + chunked))
    h100 = get_gpu("H100-SXM")
    assert capacity_report(shape, h100, context_tokens=8192, weight_bytes_per_param=0.5)
    with pytest.raises(ProbeError, match="does not fit"):
        capacity_report(shape, h100, context_tokens=8192)


def test_qwen3_30b_a3b_305b_total_33b_active_and_its_gqa_cache(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every layer routes to 8 of 128 experts (no shared expert, no dense layer); 4 KV heads of
    an explicit head_dim of 128 (not hidden_size / heads = 64)."""
    shape = load_shape(QWEN3_30B_A3B)
    # Qwen3-30B-A3B model card (Qwen, 2025-04-29): "Number of Parameters: 30.5B in total and
    # 3.3B activated", "Number of Paramaters (Non-Embedding): 29.9B". The 3.3B counts the input
    # embedding table, as Mistral's figure does; q_norm and k_norm (128 each a layer) are left
    # out here.
    assert shape.total_params == pytest.approx(30.5e9, rel=0.002)
    assert shape.total_params - 2 * shape.embed_params == pytest.approx(29.9e9, rel=0.002)
    assert shape.params_active() + shape.embed_params == pytest.approx(3.3e9, rel=0.02)
    assert shape.num_experts == 128 and shape.experts_per_token == 8
    # K and V, 4 KV heads x 128, 48 layers, bf16: 96 KiB a token at any context
    assert shape.kv_bytes_per_token(2) == shape.kv_bytes_per_token(2, 32768) == 2 * 4 * 128 * 48 * 2
    rep = capacity_report(shape, get_gpu("H100-SXM"), context_tokens=32768)
    assert rep.weight_bytes == shape.total_params * 2
    per_gpu = 80e9 * 0.9 - shape.total_params * 2
    assert rep.max_concurrent_sequences == int(per_gpu // (98304 * 32768)) == 3
    # 4 KV heads over tensor parallel 8: each is held by two GPUs
    rc, out, _ = _bound(capsys, "--config", str(QWEN3_30B_A3B), "--gpus", "8")
    assert rc == 0 and "30.53 B params (3.04 B active)" in out and "96.0 KiB/token" in out
    assert "GQA 4 KV heads x 128, each replicated on 2 GPUs" in out


def test_gpt_oss_120b_mxfp4_experts_fit_one_80gb_gpu() -> None:
    shape = load_shape(GPT_OSS_120B)
    # gpt-oss model card (OpenAI, 2025-08-05), table 1: 116.83B total, 5.13B active; "fits on a
    # single 80GB GPU" with MXFP4 MoE weights, the rest in bf16; the hub's checkpoint is 65 GB.
    # Left out here: expert and attention biases and sinks (under 0.05%).
    assert shape.total_params == pytest.approx(116.83e9, rel=0.001)
    assert shape.params_active() == pytest.approx(5.13e9, rel=0.005)
    assert shape.weight_bytes() == pytest.approx(65e9, rel=0.01)
    rep = capacity_report(shape, get_gpu("H100-SXM"), context_tokens=8192)
    assert rep.max_concurrent_sequences >= 20
    # the same checkpoint read as bf16 does not fit: four GPUs' worth
    with pytest.raises(ProbeError, match=r"weights 233\.6 GB .* use --gpus 4 or more"):
        capacity_report(shape, get_gpu("H100-SXM"), weight_bytes_per_param=2.0)


def test_modules_to_not_convert_keep_their_dtype() -> None:
    data = json.loads(GPT_OSS_120B.read_text())
    everything = {**data, "quantization_config": {"quant_method": "mxfp4"}}
    kept = {
        **data,
        "quantization_config": {
            "quant_method": "mxfp4",
            "modules_to_not_convert": ["model.layers.*.mlp.experts"],
        },
    }
    assert shape_from_hf(everything).weight_bytes() == load_shape(GPT_OSS_120B).weight_bytes()
    assert shape_from_hf(kept).weight_bytes() == shape_from_hf(kept).total_params * 2


def test_awq_int4_groups_count_their_scales_and_zeros() -> None:
    data = json.loads(LLAMA_70B.read_text())
    awq = {**data, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}
    shape = shape_from_hf(awq)
    linear = shape.total_params - 2 * 128256 * 8192 - (2 * 80 + 1) * 8192
    # 0.5 byte a weight, plus a 16-bit scale and a 4-bit zero per 128 weights
    expected = linear * (0.5 + 2.5 / 128) + (shape.total_params - linear) * 2
    assert shape.weight_bytes() == pytest.approx(expected, rel=1e-9)


def test_moe_step_reads_only_the_experts_its_batch_touches_in_their_format() -> None:
    shape = load_shape(GPT_OSS_120B)
    one = shape.bytes_read(1)
    assert one < shape.bytes_read(64) <= shape.weight_bytes()
    experts = shape.expert_bytes()
    assert one == pytest.approx(shape.weight_bytes() - experts * (1 - 4 / 128))


# --- tensor parallelism an engine accepts ------------------------------------------------------


def test_tensor_parallel_degree_must_divide_the_heads(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "bound.json"
    rc, _, err = _bound(capsys, "--config", str(LLAMA_70B), "--gpus", "3", "--json", str(out))
    assert rc == 2 and err.count("\n") == 1, err
    assert "tensor-parallel degree 3 does not divide the 64 attention heads" in err
    assert not out.exists()
    # 48 heads split 8 ways is fine, but 8 GPUs cannot share 12 KV heads evenly
    odd = shape_from_hf(
        {
            **json.loads(LLAMA_70B.read_text()),
            "num_attention_heads": 48,
            "num_key_value_heads": 12,
            "head_dim": 128,
        }
    )
    odd.check_tensor_parallel(4)
    with pytest.raises(ModelShapeError, match="must divide the KV heads or be a multiple"):
        odd.check_tensor_parallel(8)


def test_kv_heads_fewer_than_the_degree_are_replicated() -> None:
    shape = load_shape(LLAMA_70B)
    h100 = get_gpu("H100-SXM")
    at8 = capacity_report(shape, h100, num_gpus=8)
    at16 = capacity_report(shape, h100, num_gpus=16)
    # 8 KV heads over 16 GPUs: each GPU holds one, so its cache per token stops shrinking
    assert at16.kv_bytes_per_token_per_gpu == at8.kv_bytes_per_token_per_gpu == 327680 / 8
    assert at16.kv_replicas == 2 and at8.kv_replicas == 1
    per_gpu = h100.memory_bytes * 0.9 - shape.total_params * 2 / 16
    assert at16.max_concurrent_sequences == int(per_gpu // (327680 / 8 * 4096))
    # the step reads the replicated heads too
    p8 = bound_at(shape, h100, batch=64, context_tokens=4096, num_gpus=8)
    p16 = bound_at(shape, h100, batch=64, context_tokens=4096, num_gpus=16)
    assert p16.memory_time_s > p8.memory_time_s / 2


def test_deepseek_v3_on_8_h200_at_8k_fits_with_the_latent_on_every_gpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shape = load_shape(DEEPSEEK_V3)
    h200 = get_gpu("H200")
    rep = capacity_report(shape, h200, context_tokens=8192, num_gpus=8)
    # each GPU: 141 GB x 0.9 less an eighth of ~673 GB leaves ~42.8 GB for latents of
    # 70,272 B x 8192 tokens = 576 MB a sequence: ~74 sequences (issue 32: "~70 sequences of 8k")
    per_gpu = 141e9 * 0.9 - shape.weight_bytes() / 8
    assert rep.max_concurrent_sequences == int(per_gpu // (70272 * 8192)) == 74
    assert rep.kv_replicas == 8 and rep.weights_as_shipped
    rc, out, _ = _bound(
        capsys, "--config", str(DEEPSEEK_V3), "--gpu", "H200", "--gpus", "8", "--context", "8192"
    )
    assert rc == 0
    assert "671.03 B params (36.63 B active)" in out and "74 sequences of 8192 tokens" in out
    assert "as shipped: fp8 with 128x128 block scales" in out
    assert "MLA latent of 576 per layer, on every GPU" in out and "68.6 KiB/token" in out
    assert "MTP layers: 11.6 B params more, not counted" in out
    assert "leave out kernel launches" in out and "expert-load imbalance" in out


def test_dtype_override_says_so_and_bad_configs_are_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rc, out, _ = _bound(capsys, "--config", str(GPT_OSS_120B), "--dtype", "fp8", "--gpus", "2")
    assert rc == 0 and "at fp8: --dtype overrides the checkpoint's MXFP4 experts" in out
    data = json.loads(GPT_OSS_120B.read_text())
    for bad, needle in (
        ({**data, "layer_types": ["full_attention"] * 3}, "one type per layer (36)"),
        ({**data, "layer_types": ["sliding_attention", "sparkly"] * 18}, "layer_types[1]"),
        ({**data, "quantization_config": {"quant_method": "hqq"}}, "'hqq' is not modelled"),
        (
            {**data, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}},
            "weight_block_size",
        ),
    ):
        cfg = tmp_path / "config.json"
        cfg.write_text(json.dumps(bad))
        rc, _, err = _bound(capsys, "--config", str(cfg))
        assert rc == 2 and err.count("\n") == 1 and str(cfg) in err and needle in err, err
    # a format not modelled can still be sized at a dtype the user names
    cfg.write_text(json.dumps({**data, "quantization_config": {"quant_method": "hqq"}}))
    rc, out, _ = _bound(capsys, "--config", str(cfg), "--dtype", "int4")
    assert rc == 0 and "at int4: --dtype overrides" in out


def test_deepseek_v3_with_data_parallel_attention_holds_different_sequences_on_each_gpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shape = load_shape(DEEPSEEK_V3)
    h200 = get_gpu("H200")
    rep = capacity_report(shape, h200, context_tokens=8192, num_gpus=8, data_parallel_attention=8)
    # each GPU holds the dense weights (attention, dense and shared MLPs, embeddings: ~19 GB)
    # and an eighth of the routed experts, and its own sequences' latents. Issue 32 estimated
    # ~560 with every weight split eight ways; replicated dense weights leave room for 360.
    dense = shape.weight_bytes() - shape.expert_bytes()
    held = dense + shape.expert_bytes() / 8
    assert 18e9 < dense < 20e9
    assert rep.max_concurrent_sequences == 8 * int((141e9 * 0.9 - held) // (70272 * 8192)) == 360
    assert rep.tensor_parallel == 1 and rep.data_parallel_attention == 8 and rep.kv_replicas == 1
    # a step at batch 8 reads one sequence's latent per GPU, not eight
    p = bound_at(shape, h200, batch=8, context_tokens=8192, num_gpus=8, data_parallel_attention=8)
    touched = 1 - (1 - 8 / 256) ** 8
    expected = dense + shape.expert_bytes() * touched / 8 + 70272 * 8192
    assert p.memory_time_s == pytest.approx(expected / h200.bandwidth_bps)
    rc, out, _ = _bound(
        capsys,
        "--config",
        str(DEEPSEEK_V3),
        "--gpu",
        "H200",
        "--gpus",
        "8",
        "--context",
        "8192",
        "--dp-attention",
        "8",
    )
    assert rc == 0 and "360 sequences of 8192 tokens" in out
    assert "8 attention replicas, each with its own sequences, experts split over all 8" in out
    rc, _, err = _bound(capsys, "--config", str(DEEPSEEK_V3), "--gpus", "8", "--dp-attention", "3")
    assert rc == 2 and err.count("\n") == 1
    assert "data-parallel attention degree 3 must divide the 8 GPUs" in err
