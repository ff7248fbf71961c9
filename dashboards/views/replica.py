"""Replica drill-down: latency distributions, the scheduler, the KV cache, and the GPU."""

from __future__ import annotations

import dataclasses
from typing import Final

from grafana_foundation_sdk.models import units

from fleetwatch.core.profiles import Profile, Signal
from fleetwatch.dashboards.panels import Kind, PanelSpec, Query, RowSpec, legend_of
from fleetwatch.dashboards.promql import Scope
from fleetwatch.dashboards.views.common import LATENCY_SIGNALS
from fleetwatch.dashboards.views.startup import startup_rows

__all__ = ["CLOCK_EVENT_LABEL", "EFFICIENCY", "GPU_LABEL", "replica_rows"]

# Label that tells GPUs of one replica apart in the GPU gauges.
GPU_LABEL: Final = "gpu"
# Label of the clock-event gauge naming the NVML reason.
CLOCK_EVENT_LABEL: Final = "reason"

HEATMAPS: Final = (*LATENCY_SIGNALS, (Signal.QUEUE, "Queue time"))
PHASES: Final = ((Signal.QUEUE, "queue"), (Signal.PREFILL, "prefill"), (Signal.DECODE, "decode"))

# (signal, title, description, unit): plain GPU gauges, averaged per replica and GPU.
GPU_GAUGES: Final = (
    (
        Signal.GPU_SM_ACTIVE,
        "SM activity",
        "Share of cycles with at least one warp resident on an SM, averaged over SMs (DCGM "
        "SM_ACTIVE, NVML GPM SM_UTIL). How much of the chip is in use.",
        units.PercentUnit,
    ),
    (
        Signal.GPU_SM_OCCUPANCY,
        "SM occupancy",
        "Resident warps over the maximum an SM can hold. Low occupancy with high SM activity "
        "means small kernels that cannot hide latency.",
        units.PercentUnit,
    ),
    (
        Signal.GPU_TENSOR_ACTIVE,
        "Tensor pipe activity",
        "Share of cycles the tensor cores are busy. Prefill-heavy steps raise it; decode is "
        "memory-bound and keeps it low.",
        units.PercentUnit,
    ),
    (
        Signal.GPU_DRAM_ACTIVE,
        "DRAM bandwidth",
        "Memory bandwidth in use as a share of the theoretical peak. Decode at small batch sizes "
        "is bounded by this, not by compute.",
        units.PercentUnit,
    ),
    (
        Signal.GPU_POWER,
        "Power draw",
        "Board power. Sitting at the power limit together with a clock below max and a power "
        "cap reason means the GPU is power-throttled.",
        units.Watt,
    ),
    (
        Signal.GPU_TEMPERATURE,
        "GPU temperature",
        "Die temperature; thermal slowdown reasons appear near the GPU's slowdown threshold.",
        units.Celsius,
    ),
)

# (signal, title, description, unit): the engine's roofline gauges. They are exported per engine
# (labels model and replica, no gpu), from the model shape and step times over recent steps; the
# achieved rate and its share of the peak side by side.
EFFICIENCY: Final = (
    (
        Signal.ACHIEVED_BANDWIDTH,
        "Achieved memory bandwidth",
        "Bytes the engine's steps read (weights and KV cache, from the model shape) per second "
        "of step time, over recent steps. Decode at small batches should sit near the GPU's "
        "peak bandwidth; far below it, time goes somewhere other than reading memory.",
        units.BytesPerSecondSI,
    ),
    (
        Signal.MBU,
        "Model bandwidth utilization (MBU)",
        "Achieved memory bandwidth over the GPU's peak bandwidth: how close decode runs to its "
        "roofline. Exported only when the engine knows the peak (declared or measured).",
        units.PercentUnit,
    ),
    (
        Signal.ACHIEVED_FLOPS,
        "Achieved FLOP/s",
        "Model FLOPs the engine's steps do (from the model shape) per second of step time, over "
        "recent steps. Prefill-heavy steps raise it; decode stays memory-bound.",
        units.FlopsPerSecond,
    ),
    (
        Signal.MFU,
        "Model FLOPs utilization (MFU)",
        "Achieved FLOP/s over the GPU's peak FLOP/s. Exported only when the engine knows the peak.",
        units.PercentUnit,
    ),
)


def _heatmap(scope: Scope, signal: Signal, title: str) -> PanelSpec:
    ref = scope.profile.metric(signal)
    return PanelSpec(
        f"{title} distribution",
        f"Requests per {ref.name} bucket over time, for the chosen replicas. A second band "
        "appearing above the body is a tail with its own cause.",
        (Query(scope.buckets(ref)),),
        units.Seconds,
        Kind.HEATMAP,
    )


def _scheduler(scope: Scope) -> list[PanelSpec]:
    profile, replica = scope.profile, scope.replica
    legend = legend_of(replica)
    panels: list[PanelSpec] = []
    phases = [
        Query(scope.quantile(0.99, profile.metric(s), replica), f"{legend} {name} p99")
        for s, name in PHASES
        if profile.has(s)
    ]
    if phases:
        panels.append(
            PanelSpec(
                "Request phases p99",
                "Where a slow request spends its time: waiting in the queue, in prefill, in "
                "decode. Queue growth means demand above capacity.",
                tuple(phases),
                units.Seconds,
            )
        )
    depth = [
        Query(scope.gauge(profile.metric(s), replica, "sum"), f"{legend} {name}")
        for s, name in ((Signal.RUNNING, "running"), (Signal.WAITING, "waiting"))
        if profile.has(s)
    ]
    if depth:
        panels.append(
            PanelSpec(
                "Running and waiting requests",
                "Requests in the running batch and in the waiting queue. Waiting above zero "
                "for long means the replica is saturated (or its KV cache is full).",
                tuple(depth),
                units.Short,
            )
        )
    if profile.has(Signal.KV_USAGE):
        panels.append(
            PanelSpec(
                "KV-cache usage",
                "Share of KV-cache blocks in use (0..1). Near 1, new requests wait and running "
                "ones are preempted.",
                (Query(scope.gauge(profile.metric(Signal.KV_USAGE), replica, "max"), legend),),
                units.PercentUnit,
                min=0.0,
                max=1.0,
            )
        )
    if profile.has(Signal.PREEMPTIONS):
        panels.append(
            PanelSpec(
                "Preemptions per second",
                "Running requests evicted to free KV cache; each one recomputes or swaps and "
                "stalls its stream.",
                (Query(scope.rate(profile.metric(Signal.PREEMPTIONS), replica), legend),),
                units.OpsPerSecond,
            )
        )
    hit_signal = next(
        (s for s in (Signal.PREFIX_CACHE_HITS, Signal.CACHED_TOKENS) if profile.has(s)), None
    )
    if hit_signal is not None and profile.has(Signal.PREFIX_CACHE_QUERIES):
        hits = scope.rate(profile.metric(hit_signal), replica)
        queries = scope.rate(profile.metric(Signal.PREFIX_CACHE_QUERIES), replica)
        panels.append(
            PanelSpec(
                "Prefix-cache hit rate",
                "Prompt tokens served from the prefix cache over prompt tokens looked up. A "
                "replica with a lower hit rate than its peers does more prefill per request.",
                (Query(f"{hits} / {queries}", legend),),
                units.PercentUnit,
                min=0.0,
                max=1.0,
            )
        )
    if profile.has(Signal.STEP_TOKENS):
        ref = profile.metric(Signal.STEP_TOKENS)
        mean = f"{scope.rate(ref, replica, suffix='_sum')} / {scope.rate(ref, replica, suffix='_count')}"
        panels.append(
            PanelSpec(
                "Tokens per engine step",
                "Tokens scheduled per step (prefill chunks plus one per decoding request). "
                "Spikes are long prefills sharing steps with decodes.",
                (
                    Query(mean, f"{legend} mean"),
                    Query(scope.quantile(0.99, ref, replica), f"{legend} p99"),
                ),
                units.Short,
            )
        )
    if profile.has(Signal.STEP_DURATION):
        ref = profile.metric(Signal.STEP_DURATION)
        panels.append(
            PanelSpec(
                "Engine step duration p50 and p99",
                "Wall time of one scheduler step; every running stream waits this long per token.",
                (
                    Query(scope.quantile(0.5, ref, replica), f"{legend} p50"),
                    Query(scope.quantile(0.99, ref, replica), f"{legend} p99"),
                ),
                units.Seconds,
            )
        )
    return panels


def _gpu_available(scope: Scope) -> PanelSpec:
    ref = scope.profile.metric(Signal.GPU_AVAILABLE)
    replica = scope.replica
    return PanelSpec(
        "GPU available",
        "Whether each replica's GPU sampler can read its GPU through NVML: 1, or 0 with the "
        "reason NVML gave (no driver, no device). On a host without a GPU this reads "
        "'no GPU on this host' and the GPU panels beside it are empty by design, not broken.",
        (
            Query(
                f"max by ({replica}, reason) ({ref.selector(scope.hardware())})",
                f"{legend_of(replica)} {legend_of('reason')}",
            ),
        ),
        units.Short,
        Kind.STAT,
        width=24,
        height=4,
        value_names=((0, "no GPU on this host"), (1, "GPU available")),
        value_colors=((0, "orange"), (1, "green")),
    )


def _gpu(scope: Scope) -> list[PanelSpec]:
    profile, replica = scope.profile, scope.replica
    by = f"{replica}, {GPU_LABEL}"
    legend = f"{legend_of(replica)} gpu {legend_of(GPU_LABEL)}"
    panels: list[PanelSpec] = []
    if profile.has(Signal.GPU_AVAILABLE):
        panels.append(_gpu_available(scope))
    if profile.has(Signal.GPU_UTILIZATION):
        panels.append(
            PanelSpec(
                "utilization.gpu: the number that misleads",
                "nvidia-smi's utilization (NVML utilization.gpu, DCGM GPU_UTIL): the share of "
                "time ANY kernel ran. A one-SM kernel reads 100%; a memory-bound decode step can "
                "read low. It measures time busy, not chip busy: read SM activity, tensor "
                "activity and DRAM bandwidth beside it.",
                (
                    Query(
                        scope.gauge(profile.metric(Signal.GPU_UTILIZATION), by, device=True), legend
                    ),
                ),
                units.PercentUnit,
                min=0.0,
                max=1.0,
            )
        )
    for signal, title, description, unit in GPU_GAUGES:
        if profile.has(signal):
            panels.append(
                PanelSpec(
                    title,
                    description,
                    (Query(scope.gauge(profile.metric(signal), by, device=True), legend),),
                    unit,
                )
            )
    if profile.has(Signal.GPU_SM_CLOCK) and profile.has(Signal.GPU_SM_CLOCK_MAX):
        clock = scope.gauge(profile.metric(Signal.GPU_SM_CLOCK), by, device=True)
        peak = scope.gauge(profile.metric(Signal.GPU_SM_CLOCK_MAX), by, device=True)
        panels.append(
            PanelSpec(
                "SM clock against max",
                "Current SM clock over the maximum clock. Below 1 under load means the GPU is "
                "slowing itself down: see the throttle reasons.",
                (Query(f"{clock} / {peak}", legend),),
                units.PercentUnit,
                min=0.0,
                max=1.0,
            )
        )
    if profile.has(Signal.GPU_CLOCK_EVENT):
        ref = profile.metric(Signal.GPU_CLOCK_EVENT)
        panels.append(
            PanelSpec(
                "Throttle reasons",
                "Active clock-event reasons (NVML clocks event reasons): power cap, HW slowdown, "
                "SW/HW thermal, power brake. Any of these while latency rises is replica-side.",
                (
                    Query(
                        f"max by ({replica}, {GPU_LABEL}, {CLOCK_EVENT_LABEL}) "
                        f"({ref.selector(scope.hardware())})",
                        f"{legend_of(replica)} gpu {legend_of(GPU_LABEL)} {legend_of(CLOCK_EVENT_LABEL)}",
                    ),
                ),
                units.Short,
                Kind.STATE,
                value_names=((0, "off"), (1, "active")),
            )
        )
    return [p if p.kind is Kind.STAT else _needs_gpu(p, profile) for p in panels]


def _needs_gpu(panel: PanelSpec, profile: Profile) -> PanelSpec:
    where = " ('GPU available' says why)" if profile.has(Signal.GPU_AVAILABLE) else ""
    return dataclasses.replace(panel, empty_when=f"on a replica without a GPU{where}")


def _efficiency(scope: Scope) -> list[PanelSpec]:
    profile, replica = scope.profile, scope.replica
    return [
        PanelSpec(
            title,
            description,
            (Query(scope.gauge(profile.metric(signal), replica), legend_of(replica)),),
            unit,
            empty_when=(
                "unless the engine was given its GPU's peak (declared or measured)"
                if signal in (Signal.MBU, Signal.MFU)
                else ""
            ),
        )
        for signal, title, description, unit in EFFICIENCY
        if profile.has(signal)
    ]


def replica_rows(profile: Profile) -> tuple[RowSpec, ...]:
    scope = Scope(profile)
    rows = [
        RowSpec(
            "Latency distributions",
            tuple(_heatmap(scope, s, title) for s, title in HEATMAPS if profile.has(s)),
        ),
        RowSpec("Scheduler and KV cache", tuple(_scheduler(scope))),
    ]
    gpu = _gpu(scope)
    if gpu:
        rows.append(RowSpec("GPU", tuple(gpu)))
    efficiency = _efficiency(scope)
    if efficiency:
        rows.append(RowSpec("GPU efficiency", tuple(efficiency)))
    rows.extend(startup_rows(scope))
    if profile.has(Signal.TELEMETRY_DROPS):
        legend = legend_of(scope.replica)
        rows.append(
            RowSpec(
                "Telemetry",
                (
                    PanelSpec(
                        "Telemetry drops per second",
                        "Spans, records or samples dropped by telemetry's bounded export "
                        "queues. Above zero, every panel here under-counts.",
                        (
                            Query(
                                scope.rate(profile.metric(Signal.TELEMETRY_DROPS), scope.replica),
                                legend,
                            ),
                        ),
                        units.OpsPerSecond,
                    ),
                ),
            )
        )
    return tuple(row for row in rows if row.panels)
