"""The step loop's telemetry cost measured where it is spent.

The lockstep table's step-loop ratio (instrumented over bare) carries the run's noise, up to about
±1 % at batch 8 on this 2-core host, so it cannot always tell 1.005× from 1.015×. Here the work
telemetry adds to the step loop is timed where it runs, on the step-loop thread
(``time.thread_time_ns``): every callback into the telemetry observer, and the engine's own work
for observers (building the step's events and ``StepStats``, the step's cost estimate:
``fleetwatch.engine_probe.engine.step_events`` and ``StepCostModel.estimate``), which runs only when an
observer is attached. Nested regions count once (a callback inside ``report_progress``). The
meter's own cost per region, measured around a function that does nothing, is subtracted. What
remains is set against the rest of the step loop's CPU: the engine's own.

Not in it: a ``RequestInfo`` built per request in ``add_request``, and indirect costs (caches, the
allocator, garbage collection); the lockstep ratio keeps those, with its noise, so both are
reported side by side.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from fleetwatch.engine_probe.engine import step_events
from fleetwatch.telemetry.hooks import EngineObserver

__all__ = ["HOOKS", "Meter", "hook_table"]

HOOKS = tuple(
    name
    for name in vars(EngineObserver)
    if name.startswith("on_") and callable(getattr(EngineObserver, name))
)
"""Every callback of the hook protocol."""
ENGINE_SIDE = ("report_schedule", "report_progress", "step_stats", "state_stats")
"""The engine's work for observers, in ``fleetwatch.engine_probe.engine.step_events``."""


class Meter:
    """Thread CPU inside the functions it wraps; a region inside another counts once."""

    def __init__(self) -> None:
        self.ns = 0
        self.regions = 0
        self.nested = 0
        self._depth = 0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        clock = time.thread_time_ns

        def call(*args: Any, **kwargs: Any) -> Any:
            if self._depth:
                self.nested += 1
                self._depth += 1
                try:
                    return fn(*args, **kwargs)
                finally:
                    self._depth -= 1
            self._depth = 1
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self.ns += clock() - t0
                self._depth = 0
                self.regions += 1

        return call


def _noop(*args: Any) -> None:
    return None


def meter_cost(calls: int = 20_000) -> tuple[float, float]:
    """The meter's own thread CPU (ns) per outer region and per nested one, around a no-op."""
    m = Meter()
    outer = m.wrap(_noop)
    for _ in range(calls):
        outer()
    per_region = m.ns / calls
    m2 = Meter()
    inner = m2.wrap(_noop)

    def many() -> None:
        for _ in range(100):
            inner()

    wrapped = m2.wrap(many)
    base = Meter()
    plain = base.wrap(lambda: [_noop() for _ in range(100)])
    for _ in range(calls // 100):
        wrapped()
        plain()
    per_nested = max(0.0, (m2.ns - base.ns) / calls)
    return per_region, per_nested


@contextmanager
def metered(engine: Any, observer: Any, meter: Meter) -> Iterator[None]:
    """Attach ``observer`` to ``engine`` with every callback metered, and meter the engine's
    work for observers, until exit."""
    proxy = type("MeteredObserver", (), {})()
    for name in HOOKS:
        setattr(proxy, name, meter.wrap(getattr(observer, name)))
    saved = {name: getattr(step_events, name) for name in ENGINE_SIDE}
    cost = engine.cost
    for name, fn in saved.items():
        setattr(step_events, name, meter.wrap(fn))
    engine.cost = type("MeteredCost", (), {"estimate": staticmethod(meter.wrap(cost.estimate))})()
    detach = engine.attach(proxy)
    try:
        yield
    finally:
        detach()
        for name, fn in saved.items():
            setattr(step_events, name, fn)
        engine.cost = cost


def hook_table(
    batch: int,
    engine_for: Callable[[int], Any],
    instrument_for: Callable[[Any, str], Any],
    *,
    prompt: int,
    max_tokens: int,
    requests: int,
    rounds: int,
) -> dict[str, float]:
    """Per round: telemetry's step-loop CPU (net of the meter) over the engine's own step-loop
    CPU; medians over ``rounds`` (plus one warm-up)."""
    rng = random.Random(1000 + batch)
    per_region, per_nested = meter_cost()
    shares, per_req = [], []
    with tempfile.TemporaryDirectory() as tmp:
        engine = engine_for(batch)
        os.mkdir(os.path.join(tmp, "on"))
        inst = instrument_for(engine, os.path.join(tmp, "on"))
        inst.pause()  # attached metered instead, below
        for r in range(rounds + 1):
            meter = Meter()
            done = 0
            t0 = time.thread_time_ns()
            with metered(engine, inst.observer, meter):
                for _ in range(max(1, requests // batch)):
                    for _ in range(batch):
                        p = [rng.randrange(1, 2000) for _ in range(prompt)]
                        engine.add_request(p, max_tokens=max_tokens)
                    while engine.has_unfinished():
                        done += sum(o.finished for o in engine.step())
            loop = time.thread_time_ns() - t0
            assert inst.flush(), "telemetry did not hand over in time"
            if r == 0:
                continue
            net = max(0.0, meter.ns - meter.regions * per_region - meter.nested * per_nested)
            shares.append(net / (loop - meter.ns))
            per_req.append(net / done / 1e3)
        assert inst.drops.total == 0, f"telemetry dropped {inst.drops.snapshot()}"
        inst.detach()
    return {
        "batch": float(batch),
        "share": statistics.median(shares),
        "share_max": max(shares),
        "meter_ns_region": per_region,
        "hook_us_req": statistics.median(per_req),
    }
