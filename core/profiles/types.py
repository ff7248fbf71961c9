"""The profile types: ``Signal``, ``MetricRef``, ``OutcomeCounter``, ``Profile``, ``ProfileError``.

Names are the exposition names as Prometheus stores them: counters carry ``_total``; histograms
are given by their base name (``_bucket``, ``_sum`` and ``_count`` are appended). ``histogram``,
``counter`` and ``gauge`` make the ``MetricRef``s the engine tables are written with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from fleetwatch.core.links import Links

__all__ = [
    "Kind",
    "MetricRef",
    "OutcomeCounter",
    "Profile",
    "ProfileError",
    "Signal",
    "by",
    "counter",
    "gauge",
    "histogram",
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
    OUTPUT_LENGTH = "output_length"
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
    LABEL_TRUNCATED = "label_truncated"
    GPU_INFO = "gpu_info"
    GPU_GPM_AVAILABLE = "gpu_gpm_available"
    GPU_MEM_CLOCK_MAX = "gpu_mem_clock_max"
    GPU_MEMORY_USED = "gpu_memory_used"
    GPU_MEMORY_TOTAL = "gpu_memory_total"
    GPU_ECC_ERRORS = "gpu_ecc_errors"
    GPU_REMAPPED_ROWS = "gpu_remapped_rows"
    GPU_SAMPLE_ERRORS = "gpu_sample_errors"
    ENGINE_STARTUP = "engine_startup"
    ENGINE_READY = "engine_ready"
    MODEL_CACHE_BUDGET = "model_cache_budget"
    MODEL_CACHE_BYTES = "model_cache_bytes"
    MODEL_CACHE_RESIDENT = "model_cache_resident"
    MODEL_CACHE_PINNED = "model_cache_pinned"
    MODEL_CACHE_LOADS = "model_cache_loads"
    MODEL_CACHE_EVICTIONS = "model_cache_evictions"
    MODEL_CACHE_REFUSALS = "model_cache_refusals"
    MODEL_CACHE_LOAD_TIME = "model_cache_load_time"


Kind = Literal["histogram", "counter", "gauge"]


@dataclass(frozen=True, slots=True)
class MetricRef:
    """A concrete metric: exposition name, type, unit, bucket boundaries for histograms.

    ``matchers`` are label matchers that select this signal inside a shared metric, e.g.
    ``'outcome="ok"'``; empty when the metric carries only this signal. ``scope`` are the
    label scheme's matchers, which pick one fleet's series out of a shared Prometheus
    (``job="vllm",namespace=~"llm-.*"``; see ``labels.LabelScheme``): every selector carries
    them, but unlike ``matchers`` they say nothing of which signal the series holds.
    """

    name: str
    kind: Kind
    unit: str = ""
    buckets: tuple[float, ...] = ()
    matchers: str = ""
    scope: str = ""

    def selector(self, extra: str = "", suffix: str = "") -> str:
        """PromQL selector, e.g. ``foo_bucket{model="m",le="0.5"}``."""
        parts = [p for p in (self.matchers, self.scope, extra) if p]
        labels = "{" + ",".join(parts) + "}" if parts else ""
        return f"{self.name}{suffix}{labels}"


@dataclass(frozen=True, slots=True)
class OutcomeCounter:
    """How an engine counts finished requests by outcome.

    ``total`` counts every finished request. ``bad`` maps an outcome (error, aborted, rejected)
    to the counter that counts it; an outcome missing from ``bad`` is not exported by the engine.
    ``good`` is set where the engine counts successes rather than failures (TGI): bad = total - good.
    ``truncated`` counts the answers cut at ``max_tokens`` (finish reason ``length``), where the
    engine says so: a share of the output shape, not a failure.
    """

    total: MetricRef
    bad: Mapping[str, MetricRef] = field(default_factory=dict)
    good: MetricRef | None = None
    truncated: MetricRef | None = None


@dataclass(frozen=True, slots=True)
class Profile:
    """The metric names, labels and buckets one engine exports, and the labels its fleet's
    Prometheus names replicas by.

    ``identity``, ``routing``, ``scope_labels`` and ``links`` are set by a label scheme
    (``labels.LabelScheme.apply``): the labels whose values name one replica (default: the
    engine's ``replica_label`` alone), the labels every aggregation keeps so alerts can be
    routed, and for each label the scheme's matchers constrain, a value they select (what
    generated promtool tests label their series with; "" leaves the label off).
    """

    name: str
    description: str
    replica_label: str
    model_label: str
    class_label: str | None
    signals: Mapping[Signal, MetricRef]
    outcomes: OutcomeCounter
    identity: tuple[str, ...] = ()
    routing: tuple[str, ...] = ()
    scope_labels: Mapping[str, str] = field(default_factory=dict)
    links: Links = field(default_factory=Links)
    """Where alerts link to (runbooks, Grafana, Prometheus), from the labels file."""

    @property
    def replica_labels(self) -> tuple[str, ...]:
        """The labels whose values, together, name one replica."""
        return self.identity or (self.replica_label,)

    @property
    def fleet_labels(self) -> tuple[str, ...]:
        """The labels one fleet shares, a fleet median is taken within: model and routing."""
        return _unique(self.model_label, *self.routing)

    @property
    def replica_set(self) -> tuple[str, ...]:
        """The labels one replica's series are aggregated by: its fleet's, then its own."""
        return _unique(*self.fleet_labels, *self.replica_labels)

    def replica_ref(self) -> str:
        """A Prometheus template naming the alert's replica (``{{ $labels.pod }}``; several
        identity labels joined by ``/``, as a replica key is)."""
        return "/".join("{{ $labels." + n + " }}" for n in self.replica_labels)

    def series_labels(self, model: str, replica: str) -> dict[str, str]:
        """The labels of a test series of ``replica`` serving ``model`` under this profile's
        scheme: replica labels, model, routing labels, then any label the scheme's matchers
        require; values the matchers select. The default scheme: ``{replica_label: replica,
        model_label: model}``."""
        fixed = dict(self.scope_labels)
        free = [n for n in self.replica_labels if n not in fixed]
        if not free:
            raise ProfileError(
                f"every replica label ({', '.join(self.replica_labels)}) is fixed by a matcher, "
                "so all replicas would share one name"
            )
        out: dict[str, str] = {}
        for n in self.replica_labels:
            out[n] = fixed[n] if n in fixed else replica if n == free[-1] else "fleet"
        out[self.model_label] = fixed.get(self.model_label, model)
        for n in self.routing:
            out.setdefault(n, fixed.get(n, "route"))
        for n, v in fixed.items():
            out.setdefault(n, v)
        return {k: v for k, v in out.items() if v}

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


def _unique(*names: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def by(labels: Sequence[str]) -> str:
    """Labels as a PromQL grouping list: ``model_name, instance``."""
    return ", ".join(labels)


def histogram(name: str, buckets: tuple[float, ...], unit: str = "seconds") -> MetricRef:
    return MetricRef(name, "histogram", unit, buckets)


def counter(name: str, unit: str = "", matchers: str = "") -> MetricRef:
    return MetricRef(name, "counter", unit, (), matchers)


def gauge(name: str, unit: str = "", matchers: str = "") -> MetricRef:
    return MetricRef(name, "gauge", unit, (), matchers)
