"""A capacity curve from the model arithmetic, for a plan before any probe has run.

``fleetwatch.core.bound`` gives, for a model on its GPUs, how many sequences of the context fit
and the decode step's lower bound at each batch. A replica at batch B then emits B tokens a step,
so it finishes at most ``B / (output_tokens x step)`` requests a second, each waiting ``step``
between tokens: the curve is those rates with the step as TPOT, one point a batch up to the most
that fit. It is an upper bound (what the bound leaves out, prefill and queueing are not in it),
and TTFT is not bounded at all: a level is taken to hold any TTFT target, so a plan from it says
so and a probe run (``fleetwatch probe run``) is what measures it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetwatch.core.bound import CapacityReport, capacity_report
from fleetwatch.core.model import ModelShapeError, load_shape
from fleetwatch.fleet.capacity.plan import CurvePoint
from fleetwatch.fleet.errors import AnalysisError

__all__ = ["ModelBound", "model_bound"]


@dataclass(frozen=True, slots=True)
class ModelBound:
    """The model's report on its GPUs and the curve it gives at ``output_tokens`` a request."""

    report: CapacityReport
    output_tokens: float
    curve: tuple[CurvePoint, ...]

    def to_dict(self) -> dict[str, Any]:
        r = self.report
        return {
            "model": r.model,
            "gpu": r.gpu,
            "num_gpus": r.num_gpus,
            "tensor_parallel": r.tensor_parallel,
            "pipeline_parallel": r.pipeline_parallel,
            "expert_parallel": r.expert_parallel,
            "data_parallel_attention": r.data_parallel_attention,
            "weight_bytes_per_gpu": r.weight_bytes_per_gpu,
            "context_tokens": r.context_tokens,
            "output_tokens": self.output_tokens,
            "weight_bytes": r.weight_bytes,
            "kv_bytes_per_token_per_gpu": r.kv_bytes_per_token_per_gpu,
            "max_concurrent_sequences": r.max_concurrent_sequences,
            "curve": [
                {"batch": int(p.load), "requests_per_s": p.rate_per_s, "tpot_s": p.tpot_s}
                for p in self.curve
            ],
            "leaves_out": [*r.leaves_out, "prefill", "queueing"],
        }

    def render(self) -> str:
        r = self.report
        top = self.curve[-1]
        return "\n".join(
            [
                f"model arithmetic: {r.model} on {r.num_gpus}x {r.gpu} ({r.split}), "
                f"{r.max_concurrent_sequences} sequences of "
                f"{r.context_tokens} tokens fit; at that batch a replica emits a token every "
                f"{top.tpot_s * 1e3:.3g} ms, {top.rate_per_s:.3g} requests/s of "
                f"{self.output_tokens:g} output tokens at most",
                "an upper bound: "
                + ", ".join([*r.leaves_out, "prefill", "queueing"])
                + " not counted; TTFT is not bounded: measure with `fleetwatch probe run`",
            ]
        )


def _batches(fit: int) -> list[int]:
    out, b = [], 1
    while b < fit:
        out.append(b)
        b *= 2
    return [*out, fit]


def model_bound(
    config: Path,
    gpu: str,
    *,
    gpus: int | None = None,
    dp_attention: int = 1,
    tp: int | None = None,
    pp: int = 1,
    ep: int = 1,
    context: int = 4096,
    output_tokens: float = 256.0,
    memory_fraction: float = 0.9,
) -> ModelBound:
    """The bound of the model ``config`` (a config.json or its folder) on ``gpus`` of ``gpu``,
    split as ``fleetwatch.core.split`` checks it (the degrees ``tp``, ``pp``, ``ep`` and
    ``dp_attention``; ``gpus`` alone is one tensor-parallel group, as in ``probe bound``)."""
    from fleetwatch.telemetry.gpu.specs import GPUS, find_gpu

    spec = find_gpu(gpu)
    if spec is None:
        raise AnalysisError(f"--gpu {gpu!r}: unknown GPU; known are {', '.join(GPUS)}")
    if not output_tokens >= 1:
        raise AnalysisError(f"--output-tokens must be >= 1, got {output_tokens:g}")
    try:
        shape = load_shape(config)
        fit = capacity_report(
            shape,
            spec,
            context_tokens=context,
            memory_fraction=memory_fraction,
            batches=(1,),
            num_gpus=gpus,
            data_parallel_attention=dp_attention,
            tensor_parallel=tp,
            pipeline_parallel=pp,
            expert_parallel=ep,
        ).max_concurrent_sequences
        report = capacity_report(
            shape,
            spec,
            context_tokens=context,
            memory_fraction=memory_fraction,
            batches=_batches(fit),
            num_gpus=gpus,
            data_parallel_attention=dp_attention,
            tensor_parallel=tp,
            pipeline_parallel=pp,
            expert_parallel=ep,
        )
    except ModelShapeError as exc:
        raise AnalysisError(str(exc)) from None
    curve = tuple(
        CurvePoint(
            load=float(p.batch),
            rate_per_s=p.batch / (output_tokens * p.step_time_s),
            ttft_s=0.0,
            tpot_s=p.step_time_s,
        )
        for p in report.points
    )
    return ModelBound(report, float(output_tokens), curve)
