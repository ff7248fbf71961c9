"""The tail's values as SQL over the ``records`` view: the target latency and its adjusted
components (as ``cohorts.decompose``), a completed request, and the per-token seconds the
body's medians are taken of."""

from __future__ import annotations

from fleetwatch.fleet.tail.cohorts import Target
from fleetwatch.records.engine.reductions import model_is

__all__ = ["FINE", "OK", "UNCACHED", "base", "exprs", "per_token"]

UNCACHED = "(prompt_tokens - coalesce(cached_prompt_tokens, 0))"

OK = "status = 'ok' AND scheduled_s IS NOT NULL AND first_token_s IS NOT NULL"
"""SQL true of a completed request (``cohorts.ok_index``)."""

FINE = 1.0005
"""The first pass's histograms of the body's per-token medians: buckets 0.05 % wide, so the
bucket holding a median of tens of millions of requests is fetched whole (no narrowing)."""


def exprs(target: Target) -> dict[str, str]:
    """SQL for the target latency and the adjusted components, as ``cohorts.decompose``."""
    stall = "coalesce(preemption_stall_s, 0.0)"
    prefill = "(first_token_s - scheduled_s)"
    decode = "(finished_s - first_token_s)"
    if target == "e2e":
        stall_decode = f"least({stall}, {decode})"
        stall_prefill = f"least({stall} - {stall_decode}, {prefill})"
        return {
            "y": "(finished_s - arrival_s)",
            "prefill": f"({prefill} - {stall_prefill})",
            "decode": f"({decode} - {stall_decode})",
        }
    stall_prefill = f"least({stall}, {prefill})"
    return {"y": "(first_token_s - arrival_s)", "prefill": f"({prefill} - {stall_prefill})"}


def per_token(target: Target) -> dict[str, str]:
    """SQL for the body's per-token seconds: ``pp`` a prompt token's prefill, and for e2e ``po``
    an output token's decode after the first (``sums.plan_from_requests``)."""
    ex = exprs(target)
    out = {"pp": f"({ex['prefill']} / greatest(CAST({UNCACHED} AS DOUBLE), 1.0))"}
    if target == "e2e":
        out["po"] = f"({ex['decode']} / greatest(CAST(output_tokens - 1 AS DOUBLE), 1.0))"
    return out


def base(model: str, source: str = "records") -> str:
    """``FROM … WHERE …``: the completed requests of ``model`` in ``source``."""
    return f"FROM {source} WHERE {model_is(model)} AND {OK}"
