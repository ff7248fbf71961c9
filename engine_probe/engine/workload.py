"""Synthetic workloads and an offline driver: what ``fleetwatch engine run`` and the benchmark use.

``synthetic_workload`` draws prompts of random token ids (optionally sharing a prefix) and output
lengths (fixed, or a mixed short/long mix like chat traffic). ``run_offline`` adds them all at
once, steps the engine until done and summarises throughput, TTFT and cache behaviour from the
engine's own observer events.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from fleetwatch.core.stats import percentile
from fleetwatch.engine_probe.engine.config import SamplingParams
from fleetwatch.engine_probe.engine.llm_engine import LLMEngine
from fleetwatch.engine_probe.engine.params import RequestParams
from fleetwatch.telemetry.hooks import NullObserver, RequestInfo, StepStats

__all__ = ["RunSummary", "WorkItem", "run_offline", "synthetic_workload"]


@dataclass(frozen=True, slots=True)
class WorkItem:
    prompt: tuple[int, ...]
    max_tokens: int


def synthetic_workload(
    num_requests: int,
    *,
    prompt_len: int,
    max_tokens: int,
    vocab_size: int,
    seed: int = 0,
    mixed: bool = False,
    long_fraction: float = 0.15,
    shared_prefix: int = 0,
) -> list[WorkItem]:
    """``num_requests`` requests. Prompt lengths are uniform in [prompt_len/2, 3·prompt_len/2].
    With ``mixed``, a ``long_fraction`` of requests ask for ``max_tokens`` and the rest for
    max_tokens/16 (at least 1): the long-tail mix that leaves static batches mostly idle.
    ``shared_prefix`` tokens open every prompt (a system prompt the prefix cache can reuse)."""
    rng = random.Random(seed)
    prefix = [rng.randrange(vocab_size) for _ in range(shared_prefix)]
    items: list[WorkItem] = []
    for _ in range(num_requests):
        n = rng.randint(max(1, prompt_len // 2), max(1, prompt_len * 3 // 2))
        prompt = prefix + [rng.randrange(vocab_size) for _ in range(n)]
        out = max_tokens
        if mixed and rng.random() >= long_fraction:
            out = max(1, max_tokens // 16)
        items.append(WorkItem(tuple(prompt), out))
    return items


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What an offline run did. Times in seconds on the engine's clock."""

    requests: int
    completed: int
    output_tokens: int
    computed_tokens: int
    """Prefill + decode tokens the model computed (recomputation included)."""
    steps: int
    elapsed_s: float
    preemptions: int
    prefix_cache_hit_tokens: int
    ttft_s: tuple[float, ...]

    @property
    def output_tokens_per_s(self) -> float:
        return self.output_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def ttft_p50_s(self) -> float:
        return percentile(self.ttft_s, 50)

    @property
    def ttft_p99_s(self) -> float:
        return percentile(self.ttft_s, 99)

    @property
    def mean_step_s(self) -> float:
        return self.elapsed_s / self.steps if self.steps else 0.0


class _Tally(NullObserver):
    """Minimal observer for the summary (never raises, never blocks)."""

    def __init__(self) -> None:
        self.arrival: dict[str, float] = {}
        self.ttft: list[float] = []
        self.completed = 0
        self.output_tokens = 0
        self.computed = 0
        self.steps = 0
        self.preemptions = 0
        self.hits = 0

    def on_request_arrived(self, t: float, info: RequestInfo) -> None:
        self.arrival[info.request_id] = t

    def on_first_token(self, t: float, request_id: str) -> None:
        self.ttft.append(t - self.arrival[request_id])

    def on_request_finished(
        self,
        t: float,
        request_id: str,
        status: str,
        finish_reason: str | None,
        error_type: str | None,
        output_tokens: int,
        cached_prompt_tokens: int,
    ) -> None:
        if status == "ok":
            self.completed += 1
        self.output_tokens += output_tokens

    def on_step(self, stats: StepStats) -> None:
        if stats.is_state_report:
            return
        self.steps += 1
        self.computed += stats.tokens
        self.preemptions += stats.preemptions
        self.hits += stats.prefix_cache_hits


def run_offline(
    engine: LLMEngine,
    items: Sequence[WorkItem],
    sampling: SamplingParams | None = None,
    max_steps: int | None = None,
) -> RunSummary:
    """Add every item at once, step until all finish (or ``max_steps``), summarise."""
    tally = _Tally()
    detach = engine.attach(tally)
    clock = engine.clock
    try:
        start = clock()
        params = RequestParams(sampling=sampling)
        for item in items:
            engine.add_request(item.prompt, max_tokens=item.max_tokens, params=params)
        while engine.has_unfinished() and (max_steps is None or tally.steps < max_steps):
            engine.step()
        elapsed = clock() - start
    finally:
        detach()
    return RunSummary(
        requests=len(items),
        completed=tally.completed,
        output_tokens=tally.output_tokens,
        computed_tokens=tally.computed,
        steps=tally.steps,
        elapsed_s=elapsed,
        preemptions=tally.preemptions,
        prefix_cache_hit_tokens=tally.hits,
        ttft_s=tuple(tally.ttft),
    )
