"""Configuration: validation names the field; Hugging Face config.json gives the shape."""

from __future__ import annotations

import json

import pytest

from fleetwatch.engine_probe.engine import (
    EngineConfig,
    EngineConfigError,
    FaultConfig,
    ModelConfig,
    RequestParams,
    SamplingParams,
)

LLAMA_LIKE = {
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 1000,
    "hidden_size": 128,
    "intermediate_size": 344,
    "num_hidden_layers": 3,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 2048,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
}


def test_from_hf_config_reads_a_llama_style_file(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_LIKE))
    cfg = ModelConfig.from_hf_config(tmp_path, seed=4)
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads) == (
        1000,
        128,
        3,
        8,
        4,
    )
    assert cfg.rope_theta == 500000.0 and cfg.tie_word_embeddings and cfg.seed == 4
    assert ModelConfig.from_hf_config(LLAMA_LIKE) == ModelConfig.from_hf_config(
        tmp_path / "config.json"
    )


def test_from_hf_config_defaults_kv_heads_to_heads() -> None:
    cfg = ModelConfig.from_hf_config(
        {k: v for k, v in LLAMA_LIKE.items() if k != "num_key_value_heads"}
    )
    assert cfg.num_kv_heads == 8


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_hidden_layers": None}, "missing 'num_hidden_layers'"),
        ({"num_attention_heads": 7}, "multiple of num_heads"),
        ({"hidden_size": "big"}, "'hidden_size' must be an integer"),
        ({"num_key_value_heads": 3}, "multiple of num_kv_heads"),
    ],
)
def test_from_hf_config_rejects_bad_shapes(change, message) -> None:
    with pytest.raises(EngineConfigError, match=message):
        ModelConfig.from_hf_config({**LLAMA_LIKE, **change})


def test_from_hf_config_names_the_file(tmp_path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(EngineConfigError, match=str(bad)):
        ModelConfig.from_hf_config(bad)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: EngineConfig(block_size=0), "EngineConfig.block_size"),
        (lambda: EngineConfig(preemption="swap"), "EngineConfig.preemption"),
        (lambda: EngineConfig(dtype="float16"), "EngineConfig.dtype"),
        (lambda: EngineConfig(watermark=1.0), "EngineConfig.watermark"),
        (lambda: FaultConfig(slowdown=0.5), "FaultConfig.slowdown"),
        (lambda: FaultConfig(error_rate=2), "FaultConfig.error_rate"),
        (lambda: SamplingParams(top_p=0), "SamplingParams.top_p"),
        (lambda: SamplingParams(temperature=-1), "SamplingParams.temperature"),
    ],
)
def test_bad_values_name_the_field(build, message) -> None:
    with pytest.raises(EngineConfigError, match=message):
        build()


def test_bad_requests_are_refused_with_a_reason(make_engine) -> None:
    engine = make_engine()
    for prompt, max_tokens, message in [
        ([], 4, "empty"),
        ([1, 512], 4, "token id 512 outside"),
        ([1], 0, "max_tokens"),
        ([1] * 500, 20, "exceeds the model's 512 positions"),
    ]:
        with pytest.raises(EngineConfigError, match=message):
            engine.add_request(prompt, max_tokens=max_tokens)
    named = RequestParams(request_id="x")
    engine.add_request([1], max_tokens=2, params=named)
    with pytest.raises(EngineConfigError, match="already"):
        engine.add_request([1], max_tokens=2, params=named)


def test_default_model_is_small() -> None:
    cfg = ModelConfig()
    assert 3e6 < cfg.num_params < 5e6


def test_threads_come_from_config_then_environment(make_engine, monkeypatch) -> None:
    import torch

    monkeypatch.setenv("FLEETWATCH_ENGINE_THREADS", "two")
    with pytest.raises(EngineConfigError, match="FLEETWATCH_ENGINE_THREADS"):
        make_engine()
    monkeypatch.setenv("FLEETWATCH_ENGINE_THREADS", "1")
    make_engine(num_threads=2)
    assert torch.get_num_threads() == 2
    make_engine()
    assert torch.get_num_threads() == 1
