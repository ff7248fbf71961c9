"""Splits an engine accepts beyond one tensor-parallel group: pipeline stages that hold their
layers' weights and cache, expert-parallel groups that hold whole routed experts, and the one
line an impossible split gets. Configs are the public config.json files in
``tests/serve/models`` (sources in its README)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from fleetwatch.cli import main
from fleetwatch.core.bound import bound_at, capacity_report
from fleetwatch.core.model import ModelShapeError, load_shape, shape_from_hf
from fleetwatch.core.split import pipeline_layers, plan_split
from fleetwatch.telemetry.gpu.specs import find_gpu

MODELS = Path(__file__).parent / "models"
DEEPSEEK_V3 = MODELS / "deepseek-v3.json"
LLAMA_70B = MODELS / "llama-3.1-70b.json"
MIXTRAL = MODELS / "mixtral-8x7b.json"
QWEN3_30B_A3B = MODELS / "qwen3-30b-a3b.json"


def _gpu(name: str):  # type: ignore[no-untyped-def]
    spec = find_gpu(name)
    assert spec is not None
    return spec


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, " ".join(out.out.split()), out.err


# --- pipeline parallel -------------------------------------------------------------------------


def test_uneven_pipeline_splits_put_the_remainder_before_the_last_stage_as_vllm_does() -> None:
    # vllm/distributed/utils.py get_pp_indices: layers // degree each, the remainder one each
    # to the stages before the last, from the second-to-last backwards (the last holds the head)
    assert pipeline_layers(61, 4) == ((0, 15), (15, 30), (30, 46), (46, 61))
    assert [b - a for a, b in pipeline_layers(61, 2)] == [31, 30]
    assert [b - a for a, b in pipeline_layers(22, 4)] == [5, 6, 6, 5]
    assert [b - a for a, b in pipeline_layers(5, 3)] == [2, 2, 1]
    assert [b - a for a, b in pipeline_layers(80, 4)] == [20] * 4
    assert pipeline_layers(3, 3) == ((0, 1), (1, 2), (2, 3))


def test_pipeline_stages_hold_their_layers_the_embedding_first_and_the_head_last() -> None:
    shape = load_shape(LLAMA_70B)
    first, last = plan_split(shape, tensor=4, pipeline=2).parts(shape)
    table = 128256 * 8192
    layer = (shape.total_params - 2 * table - 8192) / 80
    assert first.total_params == pytest.approx(40 * layer + table, rel=1e-12)
    assert last.total_params == pytest.approx(40 * layer + table + 8192, rel=1e-12)
    assert first.embed_params == table and last.embed_params == 0
    assert first.num_layers == last.num_layers == 40
    assert first.total_params + last.total_params == shape.total_params
    # each stage's cache is its 40 layers'
    assert first.kv_bytes_per_sequence(4096, 2) == shape.kv_bytes_per_sequence(4096, 2) / 2


def test_llama_70b_tp4_pp2_holds_what_tp8_holds_but_takes_two_stage_steps_a_token(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shape = load_shape(LLAMA_70B)
    h100 = _gpu("H100-SXM")
    tp8 = capacity_report(shape, h100, num_gpus=8, context_tokens=8192)
    pp = capacity_report(shape, h100, tensor_parallel=4, pipeline_parallel=2, context_tokens=8192)
    assert pp.num_gpus == 8 and pp.stage_layers == (40, 40) and tp8.stage_layers == (80,)
    # half the layers split half as many ways: the same bytes a GPU, so as many sequences fit
    assert pp.weight_bytes_per_gpu == pytest.approx(tp8.weight_bytes_per_gpu, rel=1e-6)
    assert pp.kv_bytes_per_token_per_gpu == tp8.kv_bytes_per_token_per_gpu == 80 * 2 * 128 * 2
    assert pp.max_concurrent_sequences == tp8.max_concurrent_sequences
    # a token passes both stages: at batch 1 the step reads a quarter of the weights twice
    one_pp = bound_at(
        shape, h100, batch=1, context_tokens=8192, tensor_parallel=4, pipeline_parallel=2
    )
    one_tp = bound_at(shape, h100, batch=1, context_tokens=8192, num_gpus=8)
    assert one_pp.step_time_s == pytest.approx(2 * one_tp.step_time_s, rel=1e-6)
    # at batch 64 each stage works on a micro-batch of 32 while the other works on the rest
    part = plan_split(shape, tensor=4, pipeline=2).parts(shape)[1]
    read = part.weight_bytes() / 4 + 32 * part.kv_bytes_per_sequence(8192, 2, tensor_parallel=4)
    p64 = bound_at(
        shape, h100, batch=64, context_tokens=8192, tensor_parallel=4, pipeline_parallel=2
    )
    assert p64.memory_time_s == pytest.approx(2 * read / h100.bandwidth_bps, rel=1e-9)
    rc, out, _ = _run(
        capsys,
        *("probe", "bound", "--config", str(LLAMA_70B), "--tp", "4", "--pp", "2"),
        *("--context", "8192"),
    )
    assert rc == 0 and "on 8x H100-SXM" in out
    assert "pipeline 2 stages of 40/40 layers" in out
    assert "(tensor parallel 4 x pipeline 2 (layers 40/40))" in out
    assert f"{pp.max_concurrent_sequences} sequences of 8192 tokens" in out


def test_deepseek_v3_over_four_uneven_stages_is_sized_by_its_heaviest_stage() -> None:
    shape = load_shape(DEEPSEEK_V3)
    h200 = _gpu("H200")
    rep = capacity_report(shape, h200, tensor_parallel=2, pipeline_parallel=4, context_tokens=8192)
    assert rep.stage_layers == (15, 15, 16, 15) and rep.num_gpus == 8
    parts = plan_split(shape, tensor=2, pipeline=4).parts(shape)
    assert sum(p.total_params for p in parts) == pytest.approx(shape.total_params, rel=1e-12)
    # the 16 MoE layers of the third stage, halved: the most any GPU holds
    held = [p.weight_bytes() / 2 for p in parts]
    assert rep.weight_bytes_per_gpu == max(held) == held[2]
    # the MLA latent is on both GPUs of a stage, for that stage's layers only
    room = [
        (141e9 * 0.9 - h) // (p.kv_bytes_per_sequence(8192, 2, tensor_parallel=2))
        for p, h in zip(parts, held, strict=True)
    ]
    assert rep.max_concurrent_sequences == int(min(room)) == 230
    assert "pipeline 4 stages of 15/15/16/15 layers" in rep.kv_layout


# --- expert parallel ---------------------------------------------------------------------------


def test_expert_parallel_even_split_holds_what_sliced_experts_hold() -> None:
    shape = load_shape(DEEPSEEK_V3)
    h200 = _gpu("H200")
    sliced = capacity_report(
        shape, h200, context_tokens=8192, num_gpus=8, data_parallel_attention=8
    )
    whole = capacity_report(
        shape, h200, context_tokens=8192, num_gpus=8, data_parallel_attention=8, expert_parallel=8
    )
    # 256 experts in 8 groups of 32 whole experts: the same bytes as every expert in eighths
    assert whole.weight_bytes_per_gpu == pytest.approx(sliced.weight_bytes_per_gpu, rel=1e-12)
    assert whole.max_concurrent_sequences == sliced.max_concurrent_sequences == 360
    assert "expert parallel 8: whole experts, at most 32 of 256 a group" in whole.kv_layout


def test_experts_that_do_not_divide_load_the_first_groups_one_more_as_vllm_places_them() -> None:
    shape = load_shape(QWEN3_30B_A3B)
    h100 = _gpu("H100-SXM")
    even = capacity_report(shape, h100, context_tokens=8192, num_gpus=6, data_parallel_attention=6)
    ep = capacity_report(
        shape, h100, context_tokens=8192, num_gpus=6, data_parallel_attention=6, expert_parallel=6
    )
    # vLLM's determine_expert_map: 128 experts over 6 ranks are 22, 22, 21, 21, 21, 21
    dense = shape.weight_bytes() - shape.expert_bytes()
    assert ep.weight_bytes_per_gpu == pytest.approx(dense + shape.expert_bytes() * 22 / 128)
    assert even.weight_bytes_per_gpu == pytest.approx(dense + shape.expert_bytes() / 6)
    assert "at most 22 of 128 a group" in ep.kv_layout
    # the heaviest GPU reads its 22 experts' touched share at each step
    p = bound_at(
        shape,
        h100,
        batch=6,
        context_tokens=8192,
        num_gpus=6,
        data_parallel_attention=6,
        expert_parallel=6,
    )
    touched = 1 - (1 - 8 / 128) ** 6
    kv = shape.kv_bytes_per_sequence(8192, 2)
    expected = dense + shape.expert_bytes() * touched * 22 / 128 + kv
    assert p.memory_time_s == pytest.approx(expected / h100.bandwidth_bps)
    # groups within a tensor-parallel stage slice their experts over the rest of its GPUs
    mixed = plan_split(shape, gpus=8, expert=2)
    assert mixed.tensor == 8 and mixed.expert_share(128) == pytest.approx(64 / 128 / 4)


# --- splits no engine accepts ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "kwargs", "needle"),
    [
        (LLAMA_70B, {"pipeline": 81}, "pipeline-parallel degree 81 exceeds the 80 layers"),
        (LLAMA_70B, {"pipeline": 0}, "pipeline-parallel degree must be >= 1"),
        (LLAMA_70B, {"expert": 2}, "has no routed experts"),
        (LLAMA_70B, {"gpus": 8, "tensor": 4}, "8 GPUs is not tensor 4 x pipeline 1"),
        (LLAMA_70B, {"gpus": 8, "pipeline": 3}, "pipeline degree 3 x data-parallel attention"),
        (DEEPSEEK_V3, {"gpus": 8, "expert": 3}, "must divide the 8 GPUs of a pipeline stage"),
        (MIXTRAL, {"gpus": 16, "data_attention": 16, "expert": 16}, "exceeds the 8 routed"),
        (LLAMA_70B, {"tensor": 3, "pipeline": 2}, "tensor-parallel degree 3 does not divide"),
    ],
)
def test_an_impossible_split_names_its_rule(
    config: Path, kwargs: dict[str, int], needle: str
) -> None:
    with pytest.raises(ModelShapeError, match=needle):
        plan_split(load_shape(config), **kwargs)  # type: ignore[arg-type]


def test_both_commands_take_the_degrees_through_the_one_split(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    shape = load_shape(QWEN3_30B_A3B)
    core = capacity_report(
        shape,
        _gpu("H100-SXM"),
        context_tokens=8192,
        tensor_parallel=2,
        pipeline_parallel=2,
        expert_parallel=2,
    )
    out = tmp_path / "bound.json"
    degrees = ("--tp", "2", "--pp", "2", "--ep", "2", "--context", "8192")
    rc, _, _ = _run(
        capsys, "probe", "bound", "--config", str(QWEN3_30B_A3B), *degrees, "--json", str(out)
    )
    probe = json.loads(out.read_text())
    assert rc == 0 and probe["max_concurrent_sequences"] == core.max_concurrent_sequences
    assert probe["pipeline_parallel"] == probe["expert_parallel"] == 2 and probe["num_gpus"] == 4
    rc, text, _ = _run(
        capsys, "fleet", "capacity", "--model-config", str(QWEN3_30B_A3B), *degrees, "--json"
    )
    fleet = json.loads(text)["bound"]
    assert rc == 0 and fleet["max_concurrent_sequences"] == core.max_concurrent_sequences
    assert (fleet["tensor_parallel"], fleet["pipeline_parallel"], fleet["num_gpus"]) == (2, 2, 4)
    assert fleet["weight_bytes_per_gpu"] == core.weight_bytes_per_gpu
    # an impossible split is one line and exit 2 from either command, nothing written
    gone = tmp_path / "never.json"
    rc, _, err = _run(
        capsys, "probe", "bound", "--config", str(QWEN3_30B_A3B), "--pp", "49", "--json", str(gone)
    )
    assert rc == 2 and err.count("\n") == 1 and "exceeds the 48 layers" in err
    assert not gone.exists()
    rc, _, err = _run(
        capsys,
        "fleet",
        "capacity",
        "--model-config",
        str(QWEN3_30B_A3B),
        "--gpus",
        "4",
        "--ep",
        "3",
    )
    assert rc == 2 and err.count("\n") == 1 and "must divide the 4 GPUs" in err


def test_a_split_too_small_advises_a_larger_tensor_degree_at_the_same_pipeline() -> None:
    shape = load_shape(LLAMA_70B)
    h100 = _gpu("H100-SXM")
    # half the weights fit a GPU of each stage, but not with a 32k sequence's cache beside them
    with pytest.raises(ModelShapeError, match=r"on 2x H100-SXM: weights 141\.1 GB \+ KV 10\.7"):
        capacity_report(shape, h100, pipeline_parallel=2, context_tokens=32768)
    with pytest.raises(ModelShapeError, match=r"use --tp 2 --pp 2 \(4 GPUs\)"):
        capacity_report(shape, h100, pipeline_parallel=2, context_tokens=32768)
    assert math.isclose(
        capacity_report(shape, h100, tensor_parallel=2, pipeline_parallel=2).weight_bytes_per_gpu,
        shape.weight_bytes() / 4,
        rel_tol=1e-4,
    )


def test_a_tied_head_is_held_again_by_the_last_stage_and_only_looked_up_on_the_first() -> None:
    data = {
        **json.loads(LLAMA_70B.read_text()),
        "tie_word_embeddings": True,
        "num_hidden_layers": 4,
    }
    shape = shape_from_hf(data)
    first, last = plan_split(shape, pipeline=2).parts(shape)
    table = 128256 * 8192
    assert shape.embed_params == 0  # one table, used as the head too
    assert first.embed_params == table and last.embed_params == 0
    # both stages load it: the first to look tokens up, the last to compute logits
    assert first.total_params + last.total_params == shape.total_params + table
    assert first.params_active() == first.total_params - table
