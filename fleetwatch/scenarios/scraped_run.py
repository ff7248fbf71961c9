"""A reference engine under fleetwatch telemetry, scraped like Prometheus scrapes it.

One real ``engine_probe`` engine (tiny model, CPU) serves an open-loop arrival schedule on a
virtual clock (``engine_runs.VirtualClock``), with faults switched on and off at given times. Its
telemetry writes records (engine-clock seconds) and exports metrics to its own
``prometheus_client`` registry, which is read at every multiple of ``scrape_s``: the samples a
Prometheus scraping then would have stored. A scrape at T holds exactly the events stamped at or
before T: the registry is read before the first engine action that could stamp a later event
(a step, whose end is known only after it ran, is preceded by a read whenever a scrape time may
fall inside it).

The scrapes become promtool ``input_series`` (``ScrapedRun.input_series``), so rules can be
evaluated on what the exporter really exported, next to an offline backtest of the records.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
from prometheus_client import CollectorRegistry

from fleetwatch.fleet.errors import AnalysisError
from fleetwatch.records import to_frame
from fleetwatch.scenarios.engine_runs import VirtualClock
from fleetwatch.telemetry.instrument import instrument
from fleetwatch.telemetry.sink import MemoryRecordSink

__all__ = ["FaultWindow", "ScrapedRun", "run_scraped"]


@dataclass(frozen=True, slots=True)
class FaultWindow:
    """Faults in force from ``start_s`` to ``end_s`` (engine clock), as ``FaultConfig`` takes."""

    start_s: float
    end_s: float
    slowdown: float = 1.0
    error_rate: float = 0.0
    stall_every_steps: int = 0
    stall_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ScrapedRun:
    """The run's records and, per exported sample (``name{labels}``), its value at every scrape
    (at 0, ``scrape_s``, 2 x ``scrape_s``, ...)."""

    records: pd.DataFrame
    scrape_s: int
    samples: Mapping[str, Sequence[float]]
    steps: int

    @property
    def scrapes(self) -> int:
        return len(next(iter(self.samples.values()))) if self.samples else 0

    def input_series(self) -> list[dict[str, str]]:
        """Every sample as a promtool input series (``_`` where it did not exist yet)."""
        out = []
        for key, values in sorted(self.samples.items()):
            text = " ".join("_" if math.isnan(v) else f"{v:g}" for v in values)
            out.append({"series": key, "values": text})
        return out


def _key(name: str, labels: Mapping[str, str]) -> str:
    def quote(v: str) -> str:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'

    inner = ",".join(f"{k}={quote(v)}" for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}" if inner else name


def _read(registry: CollectorRegistry, families: frozenset[str]) -> dict[str, float]:
    """Counter totals and histogram bucket/count samples of ``families``, as a scrape sees them."""
    out = {}
    for family in registry.collect():
        if family.name not in families:
            continue
        for s in family.samples:
            if s.name.endswith(("_total", "_bucket", "_count")):
                out[_key(s.name, s.labels)] = float(s.value)
    return out


def run_scraped(
    *,
    duration_s: float,
    scrape_s: int,
    families: Sequence[str],
    rate_per_s: float = 1.0,
    faults: Sequence[FaultWindow] = (),
    goodput: tuple[float, float] | None = None,
    traffic_classes: Sequence[str] = ("default",),
    prompt_len: int = 24,
    max_tokens: int = 16,
    step_s: float = 0.005,
    seed: int = 0,
) -> ScrapedRun:
    """Serve Poisson arrivals for ``duration_s``, drain, and scrape every ``scrape_s`` until the
    last request finished. ``families`` are the metric family names to keep (histograms by
    their base name, counters without ``_total``)."""
    from fleetwatch.engine_probe.engine import (
        EngineConfig,
        FaultConfig,
        LLMEngine,
        ModelConfig,
        RequestParams,
    )

    mc = ModelConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_layers=1,
                     num_heads=2, num_kv_heads=1, max_position_embeddings=512)  # fmt: skip
    ec = EngineConfig(block_size=16, num_blocks=256, max_num_seqs=8, max_num_batched_tokens=64,
                      replica="r0", device="cpu", seed=seed, num_threads=1)  # fmt: skip
    clock = VirtualClock(step_s)
    engine = LLMEngine(mc, ec, faults=FaultConfig(seed=seed), clock=clock, sleep=clock.sleep)
    registry = CollectorRegistry()
    sink = MemoryRecordSink()
    inst = instrument(engine, registry=registry, record_sink=sink, record_times="engine",
                      goodput=goodput, model="reference", env={})  # fmt: skip
    assert inst.metrics is not None
    for cls in traffic_classes:  # exported at 0 from the first scrape, as after a first request
        inst.metrics.series(cls)
    horizon = step_s * max([1.0, *(f.slowdown for f in faults)]) + max(
        [0.0, *(f.stall_s for f in faults)]
    )
    rng = random.Random(seed)
    arrivals: list[tuple[float, list[int], int, str]] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate_per_s)
        if t >= duration_s:
            break
        n = rng.randint(prompt_len // 2, prompt_len * 3 // 2)
        arrivals.append((t, [rng.randrange(mc.vocab_size) for _ in range(n)],
                         rng.randint(max(2, max_tokens // 2), max_tokens),
                         traffic_classes[rng.randrange(len(traffic_classes))]))  # fmt: skip
    wanted = frozenset(families)
    scrapes: list[dict[str, float]] = []

    def scrape_before(limit: float, state: dict[str, float] | None = None) -> None:
        """Record every scrape time below ``limit``: nothing stamped after now happens before
        ``limit``, so the registry as it stands now is what those scrapes see."""
        while len(scrapes) * scrape_s < limit:
            state = state if state is not None else _read(registry, wanted)
            scrapes.append(state)

    def faults_at(now: float) -> FaultConfig:
        for f in faults:
            if f.start_s <= now < f.end_s:
                return FaultConfig(slowdown=f.slowdown, error_rate=f.error_rate,
                                   stall_every_steps=f.stall_every_steps, stall_s=f.stall_s,
                                   seed=seed)  # fmt: skip
        return FaultConfig(seed=seed)

    i = steps = 0
    while i < len(arrivals) or engine.has_unfinished():
        engine.set_faults(faults_at(clock.now))
        while i < len(arrivals) and arrivals[i][0] <= clock.now:
            _, prompt, max_out, cls = arrivals[i]
            engine.add_request(prompt, max_tokens=max_out, params=RequestParams(traffic_class=cls))
            i += 1
        if engine.has_unfinished():
            before = None
            if len(scrapes) * scrape_s < clock.now + horizon * 2:
                before = _read(registry, wanted)  # a scrape time may fall inside this step
            start = clock.now
            scrape_before(start)
            clock.begin_step()
            engine.step()
            clock.end_step()
            steps += 1
            if clock.now - start > horizon * 2:
                raise AnalysisError(f"a step took {clock.now - start} s, over the scrape horizon")
            if before is not None:
                scrape_before(clock.now, before)
        elif i < len(arrivals):
            scrape_before(arrivals[i][0])
            clock.now = arrivals[i][0]
    scrape_before(clock.now + 1e-9)
    scrape_before(math.ceil(clock.now / scrape_s) * scrape_s + scrape_s / 2)
    inst.detach()
    if inst.drops.total:
        raise AnalysisError(f"telemetry dropped {inst.drops.total} items")
    keys = sorted({k for s in scrapes for k in s})
    samples = {k: [s.get(k, math.nan) for s in scrapes] for k in keys}
    return ScrapedRun(to_frame(sink.records), scrape_s, samples, steps)
