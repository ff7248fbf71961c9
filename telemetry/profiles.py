"""Metric profiles: one table from logical signals to each engine's concrete metric names.

Everything in fleetwatch that writes PromQL (SLO rules, outlier rules, dashboards) asks a
``Profile`` for a ``Signal`` instead of spelling metric names itself. A signal an engine does not
export is simply absent from its profile, and asking for it raises ``ProfileError`` saying so.

Names are the exposition names as Prometheus stores them: counters carry ``_total``; histograms
are given by their base name (``_bucket``, ``_sum`` and ``_count`` are appended).

Sources: vLLM 0.33 ``vllm/v1/metrics/loggers.py``; SGLang 0.5 ``metrics_collector.py``;
TGI ``router/src/server.rs``; OpenTelemetry GenAI server metric conventions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final, Literal

__all__ = [
    "PROFILES",
    "MetricRef",
    "OutcomeCounter",
    "Profile",
    "ProfileError",
    "Signal",
    "get_profile",
]


class ProfileError(ValueError):
    """A profile or signal was asked for that does not exist."""


class Signal(StrEnum):
    """Logical signals, independent of any engine's naming."""

    TTFT = "ttft"
    TPOT = "tpot"
    ITL = "itl"
    E2E = "e2e"
    QUEUE = "queue"
    PREFILL = "prefill"
    DECODE = "decode"
    PROMPT_TOKENS = "prompt_tokens"
    GENERATION_TOKENS = "generation_tokens"
    CACHED_TOKENS = "cached_tokens"
    PREFIX_CACHE_QUERIES = "prefix_cache_queries"
    PREEMPTIONS = "preemptions"
    GOODPUT = "goodput"
    RUNNING = "running"
    WAITING = "waiting"
    KV_USAGE = "kv_usage"
    STEP_DURATION = "step_duration"
    STEP_TOKENS = "step_tokens"
    GPU_AVAILABLE = "gpu_available"
    GPU_UTILIZATION = "gpu_utilization"
    GPU_SM_ACTIVE = "gpu_sm_active"
    GPU_SM_OCCUPANCY = "gpu_sm_occupancy"
    GPU_TENSOR_ACTIVE = "gpu_tensor_active"
    GPU_DRAM_ACTIVE = "gpu_dram_active"
    GPU_SM_CLOCK = "gpu_sm_clock"
    GPU_SM_CLOCK_MAX = "gpu_sm_clock_max"
    GPU_MEM_CLOCK = "gpu_mem_clock"
    GPU_CLOCK_EVENT = "gpu_clock_event"
    GPU_POWER = "gpu_power"
    GPU_ENERGY = "gpu_energy"
    GPU_TEMPERATURE = "gpu_temperature"
    MBU = "mbu"
    MFU = "mfu"
    TELEMETRY_DROPS = "telemetry_drops"
    PREFIX_CACHE_HITS = "prefix_cache_hits"
    ACHIEVED_BANDWIDTH = "achieved_bandwidth"
    ACHIEVED_FLOPS = "achieved_flops"
    STEP_BYTES = "step_bytes"
    STEP_FLOPS = "step_flops"
    STEP_BUSY = "step_busy"
    LABEL_OVERFLOW = "label_overflow"
    GPU_INFO = "gpu_info"
    GPU_GPM_AVAILABLE = "gpu_gpm_available"
    GPU_MEM_CLOCK_MAX = "gpu_mem_clock_max"
    GPU_MEMORY_USED = "gpu_memory_used"
    GPU_MEMORY_TOTAL = "gpu_memory_total"
    GPU_ECC_ERRORS = "gpu_ecc_errors"
    GPU_REMAPPED_ROWS = "gpu_remapped_rows"
    GPU_SAMPLE_ERRORS = "gpu_sample_errors"


Kind = Literal["histogram", "counter", "gauge"]


@dataclass(frozen=True, slots=True)
class MetricRef:
    """A concrete metric: exposition name, type, unit, bucket boundaries for histograms.

    ``matchers`` are label matchers that select this signal inside a shared metric, e.g.
    ``'outcome="ok"'``; empty when the metric carries only this signal.
    """

    name: str
    kind: Kind
    unit: str = ""
    buckets: tuple[float, ...] = ()
    matchers: str = ""

    def selector(self, extra: str = "", suffix: str = "") -> str:
        """PromQL selector, e.g. ``foo_bucket{model="m",le="0.5"}``."""
        parts = [p for p in (self.matchers, extra) if p]
        labels = "{" + ",".join(parts) + "}" if parts else ""
        return f"{self.name}{suffix}{labels}"


@dataclass(frozen=True, slots=True)
class OutcomeCounter:
    """How an engine counts finished requests by outcome.

    ``total`` counts every finished request. ``bad`` maps an outcome (error, aborted, rejected)
    to the counter that counts it; an outcome missing from ``bad`` is not exported by the engine.
    ``good`` is set where the engine counts successes rather than failures (TGI): bad = total - good.
    """

    total: MetricRef
    bad: Mapping[str, MetricRef] = field(default_factory=dict)
    good: MetricRef | None = None


@dataclass(frozen=True, slots=True)
class Profile:
    """The metric names, labels and buckets one engine exports."""

    name: str
    description: str
    replica_label: str
    model_label: str
    class_label: str | None
    signals: Mapping[Signal, MetricRef]
    outcomes: OutcomeCounter

    def has(self, signal: Signal) -> bool:
        return signal in self.signals

    def metric(self, signal: Signal) -> MetricRef:
        """The concrete metric for ``signal``; ``ProfileError`` when the engine lacks it."""
        try:
            return self.signals[signal]
        except KeyError:
            raise ProfileError(
                f"profile '{self.name}' does not export signal '{signal.value}'"
            ) from None

    def metric_names(self) -> frozenset[str]:
        """Every series name this profile exports (histograms expanded)."""
        names: set[str] = set()
        refs = [*self.signals.values(), self.outcomes.total, *self.outcomes.bad.values()]
        if self.outcomes.good is not None:
            refs.append(self.outcomes.good)
        for ref in refs:
            if ref.kind == "histogram":
                names.update(ref.name + s for s in ("_bucket", "_sum", "_count"))
            else:
                names.add(ref.name)
        return frozenset(names)

    def with_buckets(self, signal: Signal, buckets: Sequence[float]) -> Profile:
        """A copy whose histogram for ``signal`` has custom buckets (vLLM's
        ``--custom-histogram-buckets``, SGLang's bucket env variables)."""
        ref = self.metric(signal)
        if ref.kind != "histogram":
            raise ProfileError(
                f"signal '{signal.value}' of profile '{self.name}' is not a histogram"
            )
        signals = dict(self.signals)
        signals[signal] = dataclasses.replace(ref, buckets=tuple(sorted(float(b) for b in buckets)))
        return dataclasses.replace(self, signals=signals)


def _b(*values: float) -> tuple[float, ...]:
    return tuple(sorted({float(v) for v in values}))


# vLLM 0.33 defaults (vllm/v1/metrics/buckets.py).
VLLM_TTFT_BUCKETS: Final = _b(
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10,
    20, 40, 80, 160, 640, 2560,
)  # fmt: skip
VLLM_TPOT_BUCKETS: Final = _b(
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80,
)  # fmt: skip
VLLM_PHASE_BUCKETS: Final = _b(
    0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680,
)  # fmt: skip

# OpenTelemetry GenAI server conventions.
GENAI_TTFT_BUCKETS: Final = _b(
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10
)
GENAI_TPOT_BUCKETS: Final = _b(
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5
)
GENAI_DURATION_BUCKETS: Final = _b(*(0.01 * 2**i for i in range(14)))

# fleetwatch's own: the union of the conventions' and vLLM's ranges, so a threshold that is a
# boundary in either is a boundary here, plus a few sub-10 ms ITL buckets for small models.
FLEETWATCH_TTFT_BUCKETS: Final = _b(*GENAI_TTFT_BUCKETS, *VLLM_TTFT_BUCKETS)
FLEETWATCH_TPOT_BUCKETS: Final = _b(0.001, 0.0025, 0.005, *GENAI_TPOT_BUCKETS, *VLLM_TPOT_BUCKETS)
FLEETWATCH_E2E_BUCKETS: Final = _b(0.005, *GENAI_DURATION_BUCKETS, *VLLM_PHASE_BUCKETS)
FLEETWATCH_PHASE_BUCKETS: Final = _b(
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, *VLLM_PHASE_BUCKETS
)
FLEETWATCH_STEP_BUCKETS: Final = _b(
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5
)
FLEETWATCH_STEP_TOKEN_BUCKETS: Final = _b(
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192
)

# SGLang 0.5 defaults (override with Profile.with_buckets when the server sets its bucket envs).
SGLANG_TTFT_BUCKETS: Final = VLLM_TTFT_BUCKETS
SGLANG_ITL_BUCKETS: Final = _b(
    0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1,
    0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8,
)  # fmt: skip
SGLANG_E2E_BUCKETS: Final = _b(
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 800
)
SGLANG_QUEUE_BUCKETS: Final = _b(
    0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300,
    400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000,
)  # fmt: skip
# TGI's router histograms (metrics-exporter-prometheus defaults on its exposition).
TGI_DURATION_BUCKETS: Final = _b(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


def _h(name: str, buckets: tuple[float, ...], unit: str = "seconds") -> MetricRef:
    return MetricRef(name, "histogram", unit, buckets)


def _c(name: str, unit: str = "", matchers: str = "") -> MetricRef:
    return MetricRef(name, "counter", unit, (), matchers)


def _g(name: str, unit: str = "", matchers: str = "") -> MetricRef:
    return MetricRef(name, "gauge", unit, (), matchers)


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
        **_GPU_SIGNALS,
    },
    outcomes=OutcomeCounter(
        total=_c(FLEETWATCH_REQUESTS),
        bad={
            "error": _c(FLEETWATCH_REQUESTS, matchers='status="error"'),
            "aborted": _c(FLEETWATCH_REQUESTS, matchers='status="aborted"'),
            "rejected": _c(FLEETWATCH_REQUESTS, matchers='status="rejected"'),
        },
    ),
)

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
        Signal.CACHED_TOKENS: _c("vllm:prefix_cache_hits_total", "tokens"),
        Signal.PREFIX_CACHE_QUERIES: _c("vllm:prefix_cache_queries_total", "tokens"),
        Signal.PREEMPTIONS: _c("vllm:num_preemptions_total"),
        Signal.RUNNING: _g("vllm:num_requests_running"),
        Signal.WAITING: _g("vllm:num_requests_waiting"),
        Signal.KV_USAGE: _g("vllm:kv_cache_usage_perc", "ratio"),
        Signal.STEP_TOKENS: _h(
            "vllm:iteration_tokens_total", FLEETWATCH_STEP_TOKEN_BUCKETS, "tokens"
        ),
    },
    outcomes=OutcomeCounter(
        total=_c(_VLLM_SUCCESS),
        bad={
            "error": _c(_VLLM_SUCCESS, matchers='finished_reason="error"'),
            "aborted": _c(_VLLM_SUCCESS, matchers='finished_reason="abort"'),
        },
    ),
)

SGLANG: Final = Profile(
    name="sglang",
    description="SGLang 0.5 /metrics",
    replica_label="instance",
    model_label="model_name",
    class_label=None,
    signals={
        Signal.TTFT: _h("sglang:time_to_first_token_seconds", SGLANG_TTFT_BUCKETS),
        Signal.ITL: _h("sglang:inter_token_latency_seconds", SGLANG_ITL_BUCKETS),
        Signal.E2E: _h("sglang:e2e_request_latency_seconds", SGLANG_E2E_BUCKETS),
        Signal.QUEUE: _h("sglang:queue_time_seconds", SGLANG_QUEUE_BUCKETS),
        Signal.PROMPT_TOKENS: _c("sglang:prompt_tokens_total", "tokens"),
        Signal.GENERATION_TOKENS: _c("sglang:generation_tokens_total", "tokens"),
        Signal.RUNNING: _g("sglang:num_running_reqs"),
        Signal.WAITING: _g("sglang:num_queue_reqs"),
        Signal.KV_USAGE: _g("sglang:token_usage", "ratio"),
    },
    outcomes=OutcomeCounter(
        total=_c("sglang:num_requests_total"),
        bad={"aborted": _c("sglang:num_aborted_requests_total")},
    ),
)

TGI: Final = Profile(
    name="tgi",
    description="Text Generation Inference router /metrics (no TTFT metric)",
    replica_label="instance",
    model_label="model",
    class_label=None,
    signals={
        Signal.E2E: _h("tgi_request_duration", TGI_DURATION_BUCKETS),
        Signal.QUEUE: _h("tgi_request_queue_duration", TGI_DURATION_BUCKETS),
        Signal.TPOT: _h("tgi_request_mean_time_per_token_duration", TGI_DURATION_BUCKETS),
        Signal.WAITING: _g("tgi_queue_size"),
        Signal.RUNNING: _g("tgi_batch_current_size"),
    },
    outcomes=OutcomeCounter(
        total=_c("tgi_request_count"),
        good=_c("tgi_request_success"),
    ),
)

PROFILES: Final[Mapping[str, Profile]] = {p.name: p for p in (FLEETWATCH, VLLM, SGLANG, TGI)}


def get_profile(name: str) -> Profile:
    """Look a profile up by name (``fleetwatch``, ``vllm``, ``sglang``, ``tgi``)."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ProfileError(
            f"unknown metric profile '{name}' (known: {', '.join(PROFILES)})"
        ) from None
