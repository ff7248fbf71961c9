"""Every serving metric fleetwatch exports, as one prometheus_client collector.

The step-loop thread writes plain numbers (``Series`` fields, ``BatchedHistogram.pending``);
``collect`` builds metric families at scrape time. Names, kinds and buckets come from the
``fleetwatch`` profile in ``fleetwatch.core.profiles``, so PromQL written from the profile matches.

Labels: ``model``, ``replica``, ``traffic_class`` (capped) and, only when enabled, ``tenant``
(capped). Engine-level series (step histograms, gauges) carry ``model`` and ``replica`` only.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Final

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from fleetwatch.core.profiles import FLEETWATCH, Profile, Signal
from fleetwatch.telemetry.hooks import StepStats
from fleetwatch.telemetry.metrics.drops import DropCounter
from fleetwatch.telemetry.metrics.histogram import BatchedHistogram
from fleetwatch.telemetry.metrics.labels import LabelCap
from fleetwatch.telemetry.metrics.steps import StepMetrics

__all__ = ["DROP_STAGES", "REQUEST_HISTOGRAMS", "Series", "SeriesKey", "ServingMetrics"]

INITIAL_OUTCOMES: Final = (
    ("ok", "stop"),
    ("ok", "length"),
    ("error", "error"),
    ("aborted", "abort"),
    ("rejected", "none"),
)
"""(status, finish_reason) pairs exported at 0 from a series' creation."""

DROP_STAGES: Final = ("requests", "spans")
"""Always exported (at 0 until something drops): finished requests waiting for span/record
building (``requests``) and spans waiting for an exporter (``spans``)."""

SeriesKey = tuple[str, ...]
"""Capped label values after model and replica: (traffic_class,) or (traffic_class, tenant)."""

REQUEST_HISTOGRAMS: Final = (
    Signal.TTFT,
    Signal.TPOT,
    Signal.ITL,
    Signal.E2E,
    Signal.QUEUE,
    Signal.PREFILL,
    Signal.DECODE,
)
_SERIES_COUNTERS: Final = (
    (Signal.PROMPT_TOKENS, "prompt_tokens"),
    (Signal.GENERATION_TOKENS, "generation_tokens"),
    (Signal.CACHED_TOKENS, "cached_tokens"),
    (Signal.PREEMPTIONS, "preemptions"),
)
_ENGINE_COUNTERS: Final = (
    (Signal.PREFIX_CACHE_QUERIES, "prefix_cache_queries"),
    (Signal.PREFIX_CACHE_HITS, "prefix_cache_hits"),
    (Signal.STEP_BYTES, "bytes_read"),
    (Signal.STEP_FLOPS, "flops"),
    (Signal.STEP_BUSY, "busy_s"),
)


class Series:
    """The bound children of one label combination: histograms and counters, plain fields.

    Written by the step-loop thread only; read by ``collect``.
    """

    __slots__ = (
        "cached_tokens",
        "decode",
        "e2e",
        "generation_tokens",
        "goodput",
        "itl",
        "outcomes",
        "preemptions",
        "prefill",
        "prompt_tokens",
        "queue",
        "tpot",
        "ttft",
    )

    def __init__(self, profile: Profile) -> None:
        def h(signal: Signal) -> BatchedHistogram:
            return BatchedHistogram(profile.metric(signal).buckets)

        self.ttft = h(Signal.TTFT)
        self.tpot = h(Signal.TPOT)
        self.itl = h(Signal.ITL)
        self.e2e = h(Signal.E2E)
        self.queue = h(Signal.QUEUE)
        self.prefill = h(Signal.PREFILL)
        self.decode = h(Signal.DECODE)
        # Every outcome starts at 0, so a rate over the first error sees it (Prometheus's
        # increase() cannot count an event on a series that did not exist before it).
        self.outcomes: dict[tuple[str, str], int] = dict.fromkeys(INITIAL_OUTCOMES, 0)
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.cached_tokens = 0
        self.preemptions = 0
        self.goodput = 0

    def histogram(self, signal: Signal) -> BatchedHistogram:
        h: BatchedHistogram = getattr(self, signal.value)
        return h

    def flush(self) -> None:
        for signal in REQUEST_HISTOGRAMS:
            self.histogram(signal).flush()


class ServingMetrics(Collector):
    """Collector for request, step, utilisation and self-monitoring metrics of one engine.

    ``peak_bandwidth_bytes_per_s`` / ``peak_flops_per_s`` (declared, or measured with
    ``fleetwatch.telemetry.gpu.peak``) turn achieved bandwidth and FLOP/s into MBU and MFU; without them those
    two ratios are not exported at all. Achieved rates are over the last ``window_steps`` steps.
    ``goodput``: whether a goodput target is configured; without one the goodput counter is not
    exported at all (a counter stuck at 0 would read as "no request met the target").

    >>> from prometheus_client import CollectorRegistry
    >>> reg = CollectorRegistry()
    >>> m = ServingMetrics("m", "r0")
    >>> reg.register(m)
    >>> m.series("chat").prompt_tokens += 12
    >>> reg.get_sample_value("fleetwatch_prompt_tokens_total",
    ...     {"model": "m", "replica": "r0", "traffic_class": "chat"})
    12
    """

    def __init__(
        self,
        model: str,
        replica: str,
        *,
        profile: Profile = FLEETWATCH,
        tenant_label: bool = False,
        max_label_values: int = 64,
        peak_bandwidth_bytes_per_s: float | None = None,
        peak_flops_per_s: float | None = None,
        window_steps: int = 32,
        drops: DropCounter | None = None,
        goodput: bool = False,
    ) -> None:
        self.model = model
        self.goodput_enabled = goodput
        self.replica = replica
        self.profile = profile
        self.tenant_label = tenant_label
        self.caps: Mapping[str, LabelCap] = {
            "traffic_class": LabelCap("traffic_class", max_label_values),
            **({"tenant": LabelCap("tenant", max_label_values)} if tenant_label else {}),
        }
        self._tc_cap = self.caps["traffic_class"]
        self._tenant_cap = self.caps.get("tenant")
        self.peak_bandwidth = peak_bandwidth_bytes_per_s
        self.peak_flops = peak_flops_per_s
        self.drops = drops if drops is not None else DropCounter()
        self._series: dict[SeriesKey, Series] = {}
        self._series_lock = threading.Lock()
        self.steps = StepMetrics(profile, window_steps)

    # --- hot path -------------------------------------------------------------------------------

    def series(self, traffic_class: str, tenant: str | None = None) -> Series:
        """The bound children for these (raw, user-supplied) label values, created once."""
        key: SeriesKey = (self._tc_cap.get(traffic_class),)
        if self._tenant_cap is not None:
            key = (key[0], self._tenant_cap.get(tenant if tenant is not None else "none"))
        found = self._series.get(key)
        if found is not None:
            return found
        with self._series_lock:
            return self._series.setdefault(key, Series(self.profile))

    def record_step(self, stats: StepStats) -> None:
        """Once per step, and for each report of the engine's state between steps: one append
        (``StepMetrics.fold`` works it in at the next flush or scrape)."""
        self.steps.pending.append(stats)

    def flush(self) -> None:
        """Fold recorded steps and bin pending histogram observations (called every few steps
        and on scrape)."""
        self.steps.flush()
        for s in list(self._series.values()):
            s.flush()

    # --- scrape ---------------------------------------------------------------------------------

    def describe(self) -> Iterable[Metric]:
        """The metric families (so a registry refuses a second collector with the same names
        instead of exposing duplicates: use one registry per instrumented engine)."""
        return list(self.collect())

    def collect(self) -> Iterable[Metric]:
        steps = self.steps
        steps.fold()
        p = self.profile
        base = ["model", "replica"]
        base_values = [self.model, self.replica]
        extra = ["traffic_class", *(["tenant"] if self.tenant_label else [])]
        labels = base + extra
        with self._series_lock:
            series = list(self._series.items())

        for signal in REQUEST_HISTOGRAMS:
            ref = p.metric(signal)
            fam = HistogramMetricFamily(ref.name, _doc(signal), labels=labels, unit="")
            for key, s in series:
                buckets, total, _ = s.histogram(signal).snapshot()
                fam.add_metric([*base_values, *key], buckets, total)
            yield fam

        outcome = CounterMetricFamily(
            p.outcomes.total.name,
            "Finished requests by status (ok, error, aborted, rejected) and finish reason.",
            labels=[*labels, "status", "finish_reason"],
        )
        for key, s in series:
            for (status, reason), n in list(s.outcomes.items()):
                outcome.add_metric([*base_values, *key, status, reason], n)
        yield outcome

        counters = [
            *_SERIES_COUNTERS,
            *([(Signal.GOODPUT, "goodput")] if self.goodput_enabled else []),
        ]
        for signal, attr in counters:
            fam_c = CounterMetricFamily(p.metric(signal).name, _doc(signal), labels=labels)
            for key, s in series:
                fam_c.add_metric([*base_values, *key], getattr(s, attr))
            yield fam_c

        for signal, attr in _ENGINE_COUNTERS:
            fam_e = CounterMetricFamily(p.metric(signal).name, _doc(signal), labels=base)
            fam_e.add_metric(base_values, getattr(steps, attr))
            yield fam_e

        for signal, hist in (
            (Signal.STEP_DURATION, steps.duration),
            (Signal.STEP_TOKENS, steps.tokens),
        ):
            fam_h = HistogramMetricFamily(p.metric(signal).name, _doc(signal), labels=base)
            buckets, total, _ = hist.snapshot()
            fam_h.add_metric(base_values, buckets, total)
            yield fam_h

        gauges: list[tuple[Signal, float]] = []
        last = steps.last
        if last is not None:
            gauges += [
                (Signal.RUNNING, float(last.num_running)),
                (Signal.WAITING, float(last.num_waiting)),
                (Signal.KV_USAGE, last.kv_usage),
            ]
        rates = steps.achieved_rates()
        if rates is not None:
            bw, fl = rates
            gauges += [(Signal.ACHIEVED_BANDWIDTH, bw), (Signal.ACHIEVED_FLOPS, fl)]
            if self.peak_bandwidth:
                gauges.append((Signal.MBU, bw / self.peak_bandwidth))
            if self.peak_flops:
                gauges.append((Signal.MFU, fl / self.peak_flops))
        for signal, value in gauges:
            gauge = GaugeMetricFamily(p.metric(signal).name, _doc(signal), labels=base)
            gauge.add_metric(base_values, value)
            yield gauge

        dropped = CounterMetricFamily(
            p.metric(Signal.TELEMETRY_DROPS).name,
            _doc(Signal.TELEMETRY_DROPS),
            labels=[*base, "stage"],
        )
        stages = {stage: 0 for stage in DROP_STAGES} | dict(self.drops.snapshot())
        for stage, n in sorted(stages.items()):
            dropped.add_metric([*base_values, stage], n)
        yield dropped

        overflow = CounterMetricFamily(
            p.metric(Signal.LABEL_OVERFLOW).name,
            _doc(Signal.LABEL_OVERFLOW),
            labels=[*base, "label"],
        )
        for name, cap in self.caps.items():
            overflow.add_metric([*base_values, name], cap.folded)
        yield overflow

        truncated = CounterMetricFamily(
            p.metric(Signal.LABEL_TRUNCATED).name,
            _doc(Signal.LABEL_TRUNCATED),
            labels=[*base, "label"],
        )
        for name, cap in self.caps.items():
            truncated.add_metric([*base_values, name], cap.truncated)
        yield truncated


_DOCS: Final[Mapping[Signal, str]] = {
    Signal.TTFT: "Time to first token (s): first token minus arrival.",
    Signal.TPOT: "Time per output token (s): (e2e - TTFT) / (output tokens - 1), per request.",
    Signal.ITL: "Inter-token latency (s): one observation per request per decode step.",
    Signal.E2E: "End-to-end request duration (s): finished minus arrival.",
    Signal.QUEUE: "Time waiting before first scheduled (s).",
    Signal.PREFILL: "First token minus scheduled (s), includes chunked prefill and preemption.",
    Signal.DECODE: "Finished minus first token (s).",
    Signal.PROMPT_TOKENS: "Prompt tokens of finished requests.",
    Signal.GENERATION_TOKENS: "Output tokens of finished requests.",
    Signal.CACHED_TOKENS: "Prompt tokens of finished requests served from the prefix cache.",
    Signal.PREEMPTIONS: "Preemptions (KV cache exhausted: request evicted to be resumed later).",
    Signal.GOODPUT: "Finished ok requests meeting both the TTFT and the TPOT goodput target.",
    Signal.PREFIX_CACHE_QUERIES: "Prompt tokens looked up in the prefix cache.",
    Signal.PREFIX_CACHE_HITS: "Prompt tokens found in the prefix cache.",
    Signal.STEP_BYTES: "Bytes (weights + KV) read by engine steps (model-shape estimate).",
    Signal.STEP_FLOPS: "FLOPs done by engine steps (model-shape estimate).",
    Signal.STEP_BUSY: "Seconds spent inside engine steps.",
    Signal.STEP_DURATION: "Engine step duration (s).",
    Signal.STEP_TOKENS: "Tokens computed per engine step (prefill + decode).",
    Signal.RUNNING: "Requests in the running batch.",
    Signal.WAITING: "Requests waiting to be scheduled.",
    Signal.KV_USAGE: "KV-cache blocks in use, 0..1.",
    Signal.ACHIEVED_BANDWIDTH: "Achieved memory bandwidth over recent steps (bytes/s).",
    Signal.ACHIEVED_FLOPS: "Achieved FLOP/s over recent steps.",
    Signal.MBU: "Memory bandwidth utilisation: achieved / peak bandwidth, 0..1.",
    Signal.MFU: "FLOPs utilisation: achieved / peak FLOP/s, 0..1.",
    Signal.TELEMETRY_DROPS: "Telemetry items dropped (queue full or exporter failure) by stage.",
    Signal.LABEL_OVERFLOW: "Label values folded into 'other' because the label hit its cap.",
    Signal.LABEL_TRUNCATED: "Label values cut to the longest kept length (128 characters).",
}


def _doc(signal: Signal) -> str:
    return _DOCS.get(signal, signal.value)
