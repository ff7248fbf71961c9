"""The ``fleetwatch`` profile: fleetwatch's own instrumentation and GPU sampler.

The GenAI server metric conventions of OpenTelemetry where they exist, ``fleetwatch_*`` elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from fleetwatch.core.profiles.buckets import (
    FLEETWATCH_E2E_BUCKETS,
    FLEETWATCH_MODEL_LOAD_BUCKETS,
    FLEETWATCH_PHASE_BUCKETS,
    FLEETWATCH_STEP_BUCKETS,
    FLEETWATCH_STEP_TOKEN_BUCKETS,
    FLEETWATCH_TPOT_BUCKETS,
    FLEETWATCH_TTFT_BUCKETS,
)
from fleetwatch.core.profiles.types import MetricRef, OutcomeCounter, Profile, Signal
from fleetwatch.core.profiles.types import counter as _c
from fleetwatch.core.profiles.types import gauge as _g
from fleetwatch.core.profiles.types import histogram as _h

__all__ = ["FLEETWATCH", "FLEETWATCH_REQUESTS"]

FLEETWATCH_REQUESTS: Final = "fleetwatch_requests_total"

_GPU_SIGNALS: Final[Mapping[Signal, MetricRef]] = {
    Signal.GPU_AVAILABLE: _g("fleetwatch_gpu_available"),
    Signal.GPU_UTILIZATION: _g("fleetwatch_gpu_utilization_ratio", "ratio"),
    Signal.GPU_SM_ACTIVE: _g("fleetwatch_gpu_sm_active_ratio", "ratio"),
    Signal.GPU_SM_OCCUPANCY: _g("fleetwatch_gpu_sm_occupancy_ratio", "ratio"),
    Signal.GPU_TENSOR_ACTIVE: _g("fleetwatch_gpu_tensor_active_ratio", "ratio"),
    Signal.GPU_DRAM_ACTIVE: _g("fleetwatch_gpu_dram_bandwidth_ratio", "ratio"),
    Signal.GPU_SM_CLOCK: _g("fleetwatch_gpu_sm_clock_hertz", "hertz"),
    Signal.GPU_SM_CLOCK_MAX: _g("fleetwatch_gpu_sm_clock_max_hertz", "hertz"),
    Signal.GPU_MEM_CLOCK: _g("fleetwatch_gpu_memory_clock_hertz", "hertz"),
    Signal.GPU_CLOCK_EVENT: _g("fleetwatch_gpu_clock_event_active"),
    Signal.GPU_POWER: _g("fleetwatch_gpu_power_watts", "watts"),
    Signal.GPU_ENERGY: _c("fleetwatch_gpu_energy_joules_total", "joules"),
    Signal.GPU_TEMPERATURE: _g("fleetwatch_gpu_temperature_celsius", "celsius"),
    Signal.GPU_INFO: _g("fleetwatch_gpu_info"),
    Signal.GPU_GPM_AVAILABLE: _g("fleetwatch_gpu_gpm_available"),
    Signal.GPU_MEM_CLOCK_MAX: _g("fleetwatch_gpu_memory_clock_max_hertz", "hertz"),
    Signal.GPU_MEMORY_USED: _g("fleetwatch_gpu_memory_used_bytes", "bytes"),
    Signal.GPU_MEMORY_TOTAL: _g("fleetwatch_gpu_memory_total_bytes", "bytes"),
    Signal.GPU_ECC_ERRORS: _c("fleetwatch_gpu_ecc_errors_total"),
    Signal.GPU_REMAPPED_ROWS: _g("fleetwatch_gpu_remapped_rows"),
    Signal.GPU_SAMPLE_ERRORS: _c("fleetwatch_gpu_sample_errors_total"),
}

# Cold starts (``fleetwatch.telemetry.startup``) and the several-model cache of ``engine serve --model``.
_STARTUP_SIGNALS: Final[Mapping[Signal, MetricRef]] = {
    Signal.ENGINE_STARTUP: _g("fleetwatch_engine_startup_seconds", "seconds"),
    Signal.ENGINE_READY: _g("fleetwatch_engine_ready"),
    Signal.MODEL_CACHE_BUDGET: _g("fleetwatch_model_cache_budget_bytes", "bytes"),
    Signal.MODEL_CACHE_BYTES: _g("fleetwatch_model_cache_resident_bytes", "bytes"),
    Signal.MODEL_CACHE_RESIDENT: _g("fleetwatch_model_cache_resident"),
    Signal.MODEL_CACHE_PINNED: _g("fleetwatch_model_cache_pinned_requests"),
    Signal.MODEL_CACHE_LOADS: _c("fleetwatch_model_cache_loads_total"),
    Signal.MODEL_CACHE_EVICTIONS: _c("fleetwatch_model_cache_evictions_total"),
    Signal.MODEL_CACHE_REFUSALS: _c("fleetwatch_model_cache_refusals_total"),
    Signal.MODEL_CACHE_LOAD_TIME: _h(
        "fleetwatch_model_cache_load_seconds", FLEETWATCH_MODEL_LOAD_BUCKETS
    ),
}

FLEETWATCH: Final = Profile(
    name="fleetwatch",
    description="fleetwatch's own instrumentation (GenAI server conventions where they exist)",
    replica_label="replica",
    model_label="model",
    class_label="traffic_class",
    signals={
        Signal.TTFT: _h("gen_ai_server_time_to_first_token_seconds", FLEETWATCH_TTFT_BUCKETS),
        Signal.TPOT: _h("gen_ai_server_time_per_output_token_seconds", FLEETWATCH_TPOT_BUCKETS),
        Signal.E2E: _h("gen_ai_server_request_duration_seconds", FLEETWATCH_E2E_BUCKETS),
        Signal.ITL: _h("fleetwatch_inter_token_latency_seconds", FLEETWATCH_TPOT_BUCKETS),
        Signal.QUEUE: _h("fleetwatch_request_queue_seconds", FLEETWATCH_PHASE_BUCKETS),
        Signal.PREFILL: _h("fleetwatch_request_prefill_seconds", FLEETWATCH_PHASE_BUCKETS),
        Signal.DECODE: _h("fleetwatch_request_decode_seconds", FLEETWATCH_PHASE_BUCKETS),
        Signal.PROMPT_TOKENS: _c("fleetwatch_prompt_tokens_total", "tokens"),
        Signal.GENERATION_TOKENS: _c("fleetwatch_generation_tokens_total", "tokens"),
        Signal.CACHED_TOKENS: _c("fleetwatch_cached_prompt_tokens_total", "tokens"),
        Signal.PREFIX_CACHE_QUERIES: _c("fleetwatch_prefix_cache_queries_total", "tokens"),
        Signal.PREEMPTIONS: _c("fleetwatch_preemptions_total"),
        Signal.GOODPUT: _c("fleetwatch_goodput_requests_total"),
        Signal.RUNNING: _g("fleetwatch_num_requests_running"),
        Signal.WAITING: _g("fleetwatch_num_requests_waiting"),
        Signal.KV_USAGE: _g("fleetwatch_kv_cache_usage_ratio", "ratio"),
        Signal.STEP_DURATION: _h("fleetwatch_step_duration_seconds", FLEETWATCH_STEP_BUCKETS),
        Signal.STEP_TOKENS: _h("fleetwatch_step_tokens", FLEETWATCH_STEP_TOKEN_BUCKETS, "tokens"),
        Signal.MBU: _g("fleetwatch_memory_bandwidth_utilization_ratio", "ratio"),
        Signal.MFU: _g("fleetwatch_flops_utilization_ratio", "ratio"),
        Signal.TELEMETRY_DROPS: _c("fleetwatch_telemetry_dropped_total"),
        Signal.PREFIX_CACHE_HITS: _c("fleetwatch_prefix_cache_hits_total", "tokens"),
        Signal.ACHIEVED_BANDWIDTH: _g(
            "fleetwatch_achieved_memory_bandwidth_bytes_per_second", "bytes_per_second"
        ),
        Signal.ACHIEVED_FLOPS: _g("fleetwatch_achieved_flops_per_second", "flops_per_second"),
        Signal.STEP_BYTES: _c("fleetwatch_step_bytes_read_total", "bytes"),
        Signal.STEP_FLOPS: _c("fleetwatch_step_flops_total", "flops"),
        Signal.STEP_BUSY: _c("fleetwatch_step_busy_seconds_total", "seconds"),
        Signal.LABEL_OVERFLOW: _c("fleetwatch_telemetry_label_overflow_total"),
        Signal.LABEL_TRUNCATED: _c("fleetwatch_telemetry_label_truncated_total"),
        **_GPU_SIGNALS,
        **_STARTUP_SIGNALS,
    },
    outcomes=OutcomeCounter(
        total=_c(FLEETWATCH_REQUESTS),
        bad={
            "error": _c(FLEETWATCH_REQUESTS, matchers='status="error"'),
            "aborted": _c(FLEETWATCH_REQUESTS, matchers='status="aborted"'),
            "rejected": _c(FLEETWATCH_REQUESTS, matchers='status="rejected"'),
        },
        truncated=_c(FLEETWATCH_REQUESTS, matchers='finish_reason="length"'),
    ),
)
