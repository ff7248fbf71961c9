"""The engine's pre-flight checks: the memory estimate matches what an engine allocates, and a
model that does not fit, or a KV cache that cannot hold one request, is refused with the figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fleetwatch.engine_probe.engine import EngineConfig, EngineConfigError, LLMEngine, ModelConfig
from fleetwatch.engine_probe.engine.preflight import (
    HEADROOM,
    available_memory,
    check_fits_memory,
    check_holds_request,
    estimate_memory,
)


def _allocated(engine: LLMEngine) -> tuple[int, int]:
    """(weight + rotary bytes, KV bytes) of a built engine."""
    model = engine.model
    tensors = {
        id(t): t for t in (model.embed, model.final_norm, model.lm_head, model.cos, model.sin)
    }
    for layer in model.layers:
        for name in layer.__slots__:
            t = getattr(layer, name)
            tensors[id(t)] = t
    return sum(t.nbytes for t in tensors.values()), engine.kv_cache.nbytes


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("tied", [False, True])
def test_the_estimate_is_what_an_engine_allocates(
    tiny: ModelConfig, dtype: str, tied: bool
) -> None:
    model = ModelConfig(
        **{**{f: getattr(tiny, f) for f in tiny.__slots__}, "tie_word_embeddings": tied}
    )
    config = EngineConfig(num_blocks=32, block_size=4, dtype=dtype, device="cpu", num_threads=1)  # type: ignore[arg-type]
    est = estimate_memory(model, config)
    weights, kv = _allocated(LLMEngine(model, config))
    assert (est.weights, est.kv_cache) == (weights, kv)
    assert est.total >= (weights + kv) * (1 + HEADROOM)


def test_a_model_that_does_not_fit_is_refused_with_the_figures(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(
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
    model = ModelConfig.from_hf_config(path)
    config = EngineConfig(device="cpu")
    with pytest.raises(EngineConfigError) as caught:
        check_fits_memory(model, config, available=lambda device: (16 << 30, "free here"))
    message = str(caught.value)
    assert "8.03 B params" in message and "weights 30.0 GiB in float32" in message
    assert "only 16.0 GiB is free here" in message
    # the same model fits where enough memory is free
    check_fits_memory(model, config, available=lambda device: (64 << 30, "free here"))
    with pytest.raises(EngineConfigError, match=r"x 2 replicas"):
        check_fits_memory(model, config, replicas=2, available=lambda d: (64 << 30, "free"))


def test_a_kv_cache_that_cannot_hold_one_request_is_refused(tiny: ModelConfig) -> None:
    config = EngineConfig(num_blocks=4, block_size=4)
    check_holds_request(tiny, config, 16, "the request")
    with pytest.raises(EngineConfigError, match=r"holds 16 tokens .* needs 17, .* --num-blocks 5"):
        check_holds_request(tiny, config, 17, "the request")
    with pytest.raises(EngineConfigError, match="512 positions"):
        check_holds_request(tiny, config, 513, "the request")


def test_available_memory_reads_the_device_the_engine_will_use() -> None:
    free, where = available_memory("cpu")
    assert free > 0 and where == "available host memory"
    if torch.cuda.is_available():
        free, where = available_memory("cuda")
        assert 0 < free <= torch.cuda.get_device_properties(0).total_memory
        assert where.startswith("free on ")
    else:
        with pytest.raises(EngineConfigError, match="no CUDA device"):
            available_memory("cuda")
        assert available_memory("auto")[1] == "available host memory"
