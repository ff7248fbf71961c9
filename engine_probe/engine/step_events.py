"""A step as observers see it: preemptions and admissions, prefill chunks, tokens, finishes,
and the step's ``StepStats``. Every event of a step carries the step's start or end time.
"""

from __future__ import annotations

from fleetwatch.engine_probe.engine.request import Request
from fleetwatch.engine_probe.engine.scheduler import Scheduler, SchedulerOutput
from fleetwatch.engine_probe.engine.step_outcome import StepOutcome
from fleetwatch.telemetry.hooks import EngineObserver, StepStats

__all__ = ["report_progress", "report_schedule", "state_stats", "step_stats"]


def report_schedule(obs: EngineObserver, t: float, plan: SchedulerOutput) -> None:
    """Preemptions, then admissions (a first admission is scheduled, a later one resumed)."""
    for req in plan.preempted:
        obs.on_preempted(t, req.request_id)
    for req, batch_size, first in plan.admitted:
        if first:
            obs.on_request_scheduled(t, req.request_id, batch_size)
        else:
            obs.on_resumed(t, req.request_id)


def report_progress(
    obs: EngineObserver | None,
    t: float,
    prefill: list[tuple[Request, int]],
    outcome: StepOutcome,
) -> None:
    """Prefill chunks (with their prefix-cache hits, which are then reset), first tokens, later
    tokens and finished requests, in that order. Without an observer only the reset happens."""
    for req, n in prefill:
        if obs is not None:
            obs.on_prefill_chunk(t, req.request_id, n, req.chunk_cached)
        req.chunk_cached = 0
    if obs is None:
        return
    for req in outcome.first_tokens:
        obs.on_first_token(t, req.request_id)
    if outcome.token_ids:
        obs.on_tokens(t, outcome.token_ids)
    for req, status, reason, error_type in outcome.finished:
        obs.on_request_finished(
            t,
            req.request_id,
            status,
            reason,
            error_type,
            req.num_output,
            req.cached_prompt_tokens,
        )


def step_stats(
    step: int,
    start_s: float,
    end_s: float,
    plan: SchedulerOutput,
    prefill: list[tuple[Request, int]],
    scheduler: Scheduler,
    cost: tuple[float, float],
) -> StepStats:
    """The step's summary; ``cost`` is the estimate (bytes read, FLOPs) of its forward pass."""
    nbytes, flops = cost
    pool = scheduler.pool
    # Positional, in StepStats' field order: a third of the cost of keywords, once per step.
    return StepStats(
        step,
        start_s,
        end_s,
        sum(n for _, n in prefill) if prefill else 0,  # prefill_tokens
        len(plan.decode),  # decode_tokens
        len(scheduler.running),  # num_running
        len(scheduler.waiting),  # num_waiting
        pool.num_used,  # kv_blocks_used
        pool.num_blocks,  # kv_blocks_total
        plan.cache_queries,  # prefix_cache_queries
        plan.cache_hits,  # prefix_cache_hits
        len(plan.preempted),  # preemptions
        nbytes,  # bytes_read
        flops,
    )


def state_stats(step: int, t: float, scheduler: Scheduler) -> StepStats:
    """The engine's state at ``t`` as a ``StepStats`` that computed nothing (``tokens == 0``,
    zero duration): sent when running, waiting or KV use changed without a step."""
    pool = scheduler.pool
    return StepStats(
        step=step,
        start_s=t,
        end_s=t,
        prefill_tokens=0,
        decode_tokens=0,
        num_running=len(scheduler.running),
        num_waiting=len(scheduler.waiting),
        kv_blocks_used=pool.num_used,
        kv_blocks_total=pool.num_blocks,
        prefix_cache_queries=0,
        prefix_cache_hits=0,
        preemptions=0,
        bytes_read=0.0,
        flops=0.0,
    )
