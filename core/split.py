"""How a model is split over GPUs, as engines split it: tensor, pipeline, expert and
data-parallel-attention degrees, checked against the model, and what each GPU holds and reads.

- **Tensor parallel** (``tensor``) splits each layer's heads: the degree must divide the attention
  heads (and the KV heads, or be a multiple of them: replicated).
- **Data-parallel attention** (``data_attention``) runs that many attention replicas inside a
  pipeline stage, each tensor parallel over ``tensor`` GPUs and holding its own sequences; the
  dense weights are held by every replica, the routed experts split over all the stage's GPUs.
- **Pipeline parallel** (``pipeline``) splits the layers into stages of ``tensor ×
  data_attention`` GPUs each, in order: the degree must not exceed the layers. An uneven split is
  made as vLLM's ``get_pp_indices`` makes it: every stage holds ``layers // pipeline`` layers and
  the remainder go one each to the stages before the last, from the second-to-last backwards (the
  last also holds the output head). The first stage holds the input embedding. A decode step
  passes through every stage in turn; with ``pipeline`` micro-batches in flight, each stage works
  on one while the others work on theirs, so a sequence's next token comes ``pipeline`` stage
  times later and the slowest stage sets that time.
- **Expert parallel** (``expert``) places whole routed experts on groups of GPUs instead of
  slicing each expert over all of them: the degree must divide the stage's GPUs (each group
  slices its experts tensor parallel over the rest, as SGLang's MoE TP does; vLLM's expert
  parallel is the degree equal to the stage's GPUs) and may not exceed the experts. Experts that
  do not divide evenly are placed as vLLM's ``determine_expert_map`` places them, one more on each
  of the first ``experts mod degree`` groups, and that heaviest GPU sets memory and step time.

``gpus`` is the product ``tensor × pipeline × data_attention``; given alone, ``tensor`` is what is
left of it (the meaning ``--gpus`` has always had). Pure; raises ``ModelShapeError`` naming the
rule an impossible split breaks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleetwatch.core.model import ModelShape, ModelShapeError

__all__ = ["Split", "pipeline_layers", "plan_split"]


def pipeline_layers(num_layers: int, pipeline: int) -> tuple[tuple[int, int], ...]:
    """Each stage's layers as ``(start, end)``, split as vLLM's ``get_pp_indices`` does."""
    counts = [num_layers // pipeline] * pipeline
    for i in range(2, num_layers % pipeline + 2):
        counts[-i] += 1
    out, start = [], 0
    for c in counts:
        out.append((start, start + c))
        start += c
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Split:
    """A split an engine accepts: degrees, each stage's layers, and the GPUs they make."""

    tensor: int = 1
    pipeline: int = 1
    data_attention: int = 1
    expert: int = 1
    stages: tuple[tuple[int, int], ...] = ()
    """Each pipeline stage's layers, ``(start, end)``."""

    @property
    def gpus(self) -> int:
        return self.tensor * self.pipeline * self.data_attention

    @property
    def stage_gpus(self) -> int:
        """GPUs of one pipeline stage (its attention replicas times their tensor degree)."""
        return self.tensor * self.data_attention

    def parts(self, shape: ModelShape) -> tuple[ModelShape, ...]:
        """The part of ``shape`` each stage holds."""
        last = len(self.stages) - 1
        return tuple(
            shape.stage(a, b, first=i == 0, last=i == last) for i, (a, b) in enumerate(self.stages)
        )

    def expert_share(self, num_experts: int) -> float:
        """Share of a stage's routed-expert bytes the heaviest GPU holds: its group's experts
        (``ceil(experts / expert)`` of them) sliced over the group's GPUs."""
        if not num_experts:
            return 0.0
        per_group = math.ceil(num_experts / self.expert) / num_experts
        return per_group / (self.stage_gpus // self.expert)

    def describe(self) -> str:
        """One phrase for a report, e.g. ``tensor parallel 4 x pipeline 2 (layers 31/30)``."""
        text = f"tensor parallel {self.tensor}"
        if self.data_attention > 1:
            text += f" x {self.data_attention} attention replicas"
        if self.pipeline > 1:
            layers = "/".join(str(b - a) for a, b in self.stages)
            text += f" x pipeline {self.pipeline} (layers {layers})"
        if self.expert > 1:
            text += f", expert parallel {self.expert}"
        return text


def _degree(name: str, value: int) -> None:
    if value < 1:
        raise ModelShapeError(f"{name} degree must be >= 1, got {value}")


def plan_split(
    shape: ModelShape,
    *,
    gpus: int | None = None,
    tensor: int | None = None,
    pipeline: int = 1,
    data_attention: int = 1,
    expert: int = 1,
) -> Split:
    """The split of ``shape`` these degrees make, checked as an engine checks it.

    ``gpus`` alone is ``pipeline`` stages of ``data_attention`` replicas, each tensor parallel
    over what is left; without it, ``gpus`` is the product (``tensor`` 1 unless given); both
    given must agree. ``ModelShapeError`` names the rule a split breaks."""
    if gpus is not None and gpus < 1:
        raise ModelShapeError(f"number of GPUs must be >= 1, got {gpus}")
    _degree("pipeline-parallel", pipeline)
    _degree("data-parallel attention", data_attention)
    _degree("expert-parallel", expert)
    if tensor is None and gpus is None:
        tensor = 1
    elif tensor is None and gpus is not None:
        groups = pipeline * data_attention
        if gpus % groups:
            what = (
                f"data-parallel attention degree {data_attention}"
                if pipeline == 1
                else f"pipeline degree {pipeline} x data-parallel attention degree {data_attention}"
            )
            raise ModelShapeError(
                f"{what} must divide the {gpus} GPUs (each replica is tensor parallel over the "
                f"GPUs / the degree)"
            )
        tensor = gpus // groups
    elif tensor is not None and gpus is not None and gpus != tensor * pipeline * data_attention:
        raise ModelShapeError(
            f"{gpus} GPUs is not tensor {tensor} x pipeline {pipeline} x data-parallel "
            f"attention {data_attention} = {tensor * pipeline * data_attention}: give "
            f"--gpus as their product, or leave it out"
        )
    assert tensor is not None
    _degree("tensor-parallel", tensor)
    shape.check_tensor_parallel(tensor)
    if pipeline > shape.num_layers:
        raise ModelShapeError(
            f"pipeline-parallel degree {pipeline} exceeds the {shape.num_layers} layers of "
            f"{shape.name}: every stage holds at least one layer"
        )
    if expert > 1:
        stage_gpus = tensor * data_attention
        if not shape.num_experts:
            raise ModelShapeError(
                f"expert-parallel degree {expert}: {shape.name} has no routed experts"
            )
        if stage_gpus % expert:
            raise ModelShapeError(
                f"expert-parallel degree {expert} must divide the {stage_gpus} GPUs of a "
                f"pipeline stage (tensor {tensor} x data-parallel attention {data_attention}): "
                f"each group of GPUs holds whole experts"
            )
        if expert > shape.num_experts:
            raise ModelShapeError(
                f"expert-parallel degree {expert} exceeds the {shape.num_experts} routed experts "
                f"of {shape.name}: a GPU group would hold none"
            )
    return Split(
        tensor=tensor,
        pipeline=pipeline,
        data_attention=data_attention,
        expert=expert,
        stages=pipeline_layers(shape.num_layers, pipeline),
    )
