"""compressed-tensors checkpoints (llm-compressor's format): the weight bytes each
``config_groups`` scheme gives the matrices it targets, scales and zero points counted, the
``ignore`` list kept at the checkpoint's dtype, and one line for a config that cannot be sized.
The W4A16 checkpoint is RedHatAI's Qwen3-30B-A3B (source in ``tests/serve/models/README.md``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from fleetwatch.cli import main
from fleetwatch.core.bound import capacity_report
from fleetwatch.core.model import ModelShape, ModelShapeError, load_shape, shape_from_hf
from fleetwatch.telemetry.gpu.specs import find_gpu

MODELS = Path(__file__).parent / "models"
QWEN3_W4A16 = MODELS / "qwen3-30b-a3b-w4a16.json"


def _config() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(QWEN3_W4A16.read_text())
    return data


def _with_weights(**weights: Any) -> ModelShape:
    data = _config()
    data["quantization_config"]["config_groups"]["group_0"]["weights"].update(weights)
    return shape_from_hf(data)


def _linear_params(shape: ModelShape) -> float:
    """Attention and expert matrices: what targets ``Linear`` less the ignored router and head."""
    return float(sum(w.params for w in shape.weights if w.kind in ("attn", "expert")))


def test_qwen3_30b_a3b_w4a16_counts_int4_weights_and_a_bf16_scale_per_128() -> None:
    shape = load_shape(QWEN3_W4A16)
    assert shape.weight_format.describe() == "compressed-tensors int4 groups of 128 (bfloat16 rest)"
    linear = _linear_params(shape)
    # every attention and expert matrix has a multiple of 128 input columns: half a byte a
    # weight and a 2-byte scale per 128; the router (re:.*gate$), the head (lm_head) and the
    # embedding (not a Linear) stay bf16
    expected = linear * (0.5 + 2 / 128) + (shape.total_params - linear) * 2
    assert shape.weight_bytes() == pytest.approx(expected, rel=1e-12)
    # NVIDIA's Jetson AI Lab model page lists RedHatAI/Qwen3-30B-A3B-quantized.w4a16 at
    # "model_size: 16GB" (jetson-generative-ai-playground, src/content/models/qwen3-30b-a3b.md)
    assert shape.weight_bytes() == pytest.approx(16e9, rel=0.05)
    # the routers are kept: each layer's 128 x 2048 gate at 2 bytes
    routers = [w for w in shape.weights if w.kind == "router"]
    assert len(routers) == 48
    assert all(shape.weight_format.bytes_of(w) == 128 * 2048 * 2 for w in routers)
    # a quarter of the bf16 bytes, and a step reads the experts its batch touches
    assert shape.weight_bytes() / shape.weight_bytes(2) == pytest.approx(0.273, abs=0.001)
    assert shape.bytes_read(1) < shape.bytes_read(64) < shape.weight_bytes()


def test_asymmetric_int8_per_channel_stores_a_zero_point_beside_each_scale() -> None:
    shape = _with_weights(num_bits=8, strategy="channel", group_size=None, symmetric=False)
    q = next(w for w in shape.weights if w.module.endswith("self_attn.q_proj"))
    # one byte a weight, a 2-byte scale and a 1-byte zero point per output row
    assert shape.weight_format.bytes_of(q) == 4096 * 2048 + 4096 * (2 + 1)
    assert shape.weight_format.describe().startswith("compressed-tensors int8 per channel, asym")
    asym4 = _with_weights(symmetric=False)
    sym4 = load_shape(QWEN3_W4A16)
    groups = sum(
        w.count * w.rows * w.cols / 128 for w in sym4.weights if w.kind in ("attn", "expert")
    )
    assert asym4.weight_bytes() - sym4.weight_bytes() == pytest.approx(groups * 0.5)


def test_schemes_target_by_name_then_pattern_then_class_and_experts_match_by_index() -> None:
    data = _config()
    qc = data["quantization_config"]
    attn = copy.deepcopy(qc["config_groups"]["group_0"])
    attn["targets"] = ["re:.*self_attn\\.(q|k|v|o)_proj$"]
    attn["weights"].update(num_bits=8, strategy="channel", group_size=None)
    experts = copy.deepcopy(qc["config_groups"]["group_0"])
    # the checkpoint names every expert: model.layers.<i>.mlp.experts.<j>.down_proj
    experts["targets"] = ["re:.*mlp\\.experts\\.\\d+\\.(gate|up|down)_proj$"]
    experts["weights"].update(group_size=32, symmetric=False, actorder="group")
    qc["config_groups"] = {"group_0": experts, "group_1": attn}
    qc["ignore"] = ["lm_head", *(f"model.layers.{i}.mlp.gate" for i in range(48))]
    shape = shape_from_hf(data)
    fmt = shape.weight_format
    down = next(w for w in shape.weights if w.module == "model.layers.0.mlp.experts.down_proj")
    # 2048 x 768 per expert: 4 bits, per 32 columns a 2-byte scale and a 4-bit zero point, and
    # the int32 group index of each of the 768 input columns (activation ordering by group)
    per_expert = 2048 * 768 / 2 + 2048 * 768 / 32 * (2 + 0.5) + 4 * 768
    assert fmt.bytes_of(down) == pytest.approx(128 * per_expert)
    o = next(w for w in shape.weights if w.module == "model.layers.7.self_attn.o_proj")
    assert fmt.bytes_of(o) == 2048 * 4096 + 2048 * 2
    router = next(w for w in shape.weights if w.module == "model.layers.7.mlp.gate")
    assert not fmt.converts(router) and fmt.bytes_of(router) == router.params * 2
    assert fmt.describe() == (
        "compressed-tensors int4 groups of 32, asymmetric + int8 per channel (bfloat16 rest)"
    )
    # a module named in full beats a pattern, which beats the class
    qc["config_groups"]["group_2"] = {
        "targets": ["model.layers.7.self_attn.o_proj"],
        "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
    }
    named = shape_from_hf(data).weight_format
    assert named.bytes_of(o) == 2048 * 4096 / 2 + 2048 * 32 * 2


def test_nvfp4_and_fp8_blocks_count_their_scales() -> None:
    nvfp4 = _with_weights(type="float", num_bits=4, strategy="tensor_group", group_size=16)
    q = next(w for w in nvfp4.weights if w.module.endswith("self_attn.q_proj"))
    # FP4 weights, an FP8 scale per 16, one float32 global scale a tensor
    assert nvfp4.weight_format.bytes_of(q) == 4096 * 2048 / 2 + 4096 * 2048 / 16 + 4
    fp8 = _with_weights(
        type="float", num_bits=8, strategy="block", group_size=None, block_structure=[128, 128]
    )
    assert fp8.weight_format.bytes_of(q) == 4096 * 2048 + (4096 // 128) * (2048 // 128) * 2
    named = _with_weights(type="float", num_bits=4, group_size=32, scale_dtype="torch.uint8")
    assert named.weight_format.bytes_of(q) == 4096 * 2048 / 2 + 4096 * 2048 / 32


def test_fits_one_h100_and_dtype_still_overrides(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shape = load_shape(QWEN3_W4A16)
    h100 = find_gpu("H100-SXM")
    assert h100 is not None
    rep = capacity_report(shape, h100, context_tokens=32768)
    room = 80e9 * 0.9 - shape.weight_bytes()
    assert rep.max_concurrent_sequences == int(room // (98304 * 32768)) == 17
    rc = main(["probe", "bound", "--config", str(QWEN3_W4A16), "--context", "32768"])
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 0 and "as shipped: compressed-tensors int4 groups of 128 (bfloat16 rest)" in out
    assert "17 sequences of 32768 tokens" in out
    rc = main(["probe", "bound", "--config", str(QWEN3_W4A16), "--dtype", "bfloat16"])
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 0 and "--dtype overrides the checkpoint's compressed-tensors int4" in out


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"config_groups": None}, "'config_groups' must be an object"),
        ({"ignore": "lm_head"}, "'ignore' must be a list of names"),
        ({"ignore": ["re:(unclosed"]}, "'re:(unclosed' is not a pattern"),
        (
            {"config_groups": {"g": {"targets": ["Linear"], "weights": {"num_bits": 16}}}},
            "16 bits",
        ),
        (
            {
                "config_groups": {
                    "g": {"targets": ["Linear"], "weights": {"num_bits": 4, "strategy": "row"}}
                }
            },
            "strategy 'row'",
        ),
        (
            {
                "config_groups": {
                    "g": {"targets": ["Linear"], "weights": {"num_bits": 4, "strategy": "group"}}
                }
            },
            "'group_size' must be a positive integer",
        ),
        (
            {
                "config_groups": {
                    "g": {
                        "targets": ["Linear"],
                        "weights": {"num_bits": 8, "strategy": "tensor", "scale_dtype": "fp6"},
                    }
                }
            },
            "'scale_dtype' 'fp6'",
        ),
    ],
)
def test_a_config_that_cannot_be_sized_is_one_line_naming_the_file(
    change: dict[str, Any],
    needle: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = _config()
    data["quantization_config"].update(change)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(data))
    with pytest.raises(ModelShapeError, match=needle.replace("(", r"\(")):
        load_shape(cfg)
    rc = main(["probe", "bound", "--config", str(cfg)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and str(cfg) in err and needle in err, err
