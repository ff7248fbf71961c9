"""The ``vllm`` profile: vLLM 0.33 (v1 engine) ``/metrics``, from ``vllm/v1/metrics/loggers.py``."""

from __future__ import annotations

from typing import Final

from fleetwatch.core.profiles.buckets import (
    FLEETWATCH_STEP_TOKEN_BUCKETS,
    VLLM_PHASE_BUCKETS,
    VLLM_REQUEST_TOKEN_BUCKETS,
    VLLM_TPOT_BUCKETS,
    VLLM_TTFT_BUCKETS,
)
from fleetwatch.core.profiles.types import OutcomeCounter, Profile, Signal
from fleetwatch.core.profiles.types import counter as _c
from fleetwatch.core.profiles.types import gauge as _g
from fleetwatch.core.profiles.types import histogram as _h

__all__ = ["VLLM"]

_VLLM_SUCCESS: Final = "vllm:request_success_total"
VLLM: Final = Profile(
    name="vllm",
    description="vLLM 0.33 (v1 engine) /metrics",
    replica_label="instance",
    model_label="model_name",
    class_label=None,
    signals={
        Signal.TTFT: _h("vllm:time_to_first_token_seconds", VLLM_TTFT_BUCKETS),
        Signal.TPOT: _h("vllm:request_time_per_output_token_seconds", VLLM_TPOT_BUCKETS),
        Signal.ITL: _h("vllm:inter_token_latency_seconds", VLLM_TPOT_BUCKETS),
        Signal.E2E: _h("vllm:e2e_request_latency_seconds", VLLM_PHASE_BUCKETS),
        Signal.QUEUE: _h("vllm:request_queue_time_seconds", VLLM_PHASE_BUCKETS),
        Signal.PREFILL: _h("vllm:request_prefill_time_seconds", VLLM_PHASE_BUCKETS),
        Signal.DECODE: _h("vllm:request_decode_time_seconds", VLLM_PHASE_BUCKETS),
        Signal.PROMPT_TOKENS: _c("vllm:prompt_tokens_total", "tokens"),
        Signal.GENERATION_TOKENS: _c("vllm:generation_tokens_total", "tokens"),
        Signal.OUTPUT_LENGTH: _h(
            "vllm:request_generation_tokens", VLLM_REQUEST_TOKEN_BUCKETS, "tokens"
        ),
        Signal.CACHED_TOKENS: _c("vllm:prefix_cache_hits_total", "tokens"),
        Signal.PREFIX_CACHE_QUERIES: _c("vllm:prefix_cache_queries_total", "tokens"),
        Signal.PREEMPTIONS: _c("vllm:num_preemptions_total"),
        Signal.RUNNING: _g("vllm:num_requests_running"),
        Signal.WAITING: _g("vllm:num_requests_waiting"),
        Signal.KV_USAGE: _g("vllm:kv_cache_usage_perc", "ratio"),
        Signal.STEP_TOKENS: _h(
            "vllm:iteration_tokens_total", FLEETWATCH_STEP_TOKEN_BUCKETS, "tokens"
        ),
        # Not vLLM's own: fleetwatch's stat-logger plugin exports it in the serving process
        # (zero per stage from the start), so its alert and panel see it.
        Signal.TELEMETRY_DROPS: _c("fleetwatch_telemetry_dropped_total"),
    },
    outcomes=OutcomeCounter(
        total=_c(_VLLM_SUCCESS),
        bad={
            "error": _c(_VLLM_SUCCESS, matchers='finished_reason="error"'),
            "aborted": _c(_VLLM_SUCCESS, matchers='finished_reason="abort"'),
        },
        truncated=_c(_VLLM_SUCCESS, matchers='finished_reason="length"'),
    ),
)
