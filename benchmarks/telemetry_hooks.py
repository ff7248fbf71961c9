"""The step loop's telemetry cost measured where it is spent: inside the observer's callbacks.

The lockstep table's step-loop ratio (instrumented over bare) carries the run's noise, about ±1 %
at batch 8 on this 2-core host, so it cannot tell 1.005× from 1.015×. Here each callback the
engine makes into the telemetry observer is timed on the step-loop thread (``time.thread_time_ns``
before and after), and the same meter around an observer that does nothing gives the meter's own
cost per call, subtracted. What remains is the CPU the callbacks themselves cost, set against the
engine's own step-loop CPU (the loop's CPU less everything spent inside the meter). Indirect
costs (caches, allocator, garbage collection) are not in it; the lockstep ratio keeps them, with
its noise, so both are reported side by side.

Each round runs the metered telemetry engine and the metered do-nothing engine on the same seeded
prompts (their tokens asserted equal), one after the other, order alternating.
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from telemetry.hooks import EngineObserver, NullObserver

__all__ = ["HOOKS", "Meter", "hook_table"]

HOOKS = tuple(
    name
    for name in vars(EngineObserver)
    if name.startswith("on_") and callable(getattr(EngineObserver, name))
)
"""Every callback of the hook protocol."""


class Meter:
    """Forwards every hook to ``inner``, adding the step-loop thread's CPU inside it to ``ns``."""

    def __init__(self, inner: EngineObserver) -> None:
        self.inner = inner
        self.ns = 0
        self.calls = 0
        for name in HOOKS:
            setattr(self, name, self._timed(getattr(inner, name)))

    def _timed(self, fn: Callable[..., None]) -> Callable[..., None]:
        clock = time.thread_time_ns

        def call(*args: Any) -> None:
            t0 = clock()
            fn(*args)
            self.ns += clock() - t0
            self.calls += 1

        return call


def _run(
    engine: Any, meter: Meter, prompts: list[list[int]], max_tokens: int
) -> tuple[int, list[tuple[int, ...]]]:
    """The step loop's CPU (ns) for ``prompts``, with ``meter`` attached; and the tokens."""
    detach = engine.attach(meter)
    tokens: dict[str, list[int]] = {}
    t0 = time.thread_time_ns()
    ids = [engine.add_request(p, max_tokens=max_tokens) for p in prompts]
    while engine.has_unfinished():
        for o in engine.step():
            tokens.setdefault(o.request_id, []).extend(o.new_token_ids)
    loop = time.thread_time_ns() - t0
    detach()
    return loop, [tuple(tokens[i]) for i in ids]


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
    """Per round: the telemetry callbacks' own CPU (net of the meter) over the engine's own
    step-loop CPU; medians over ``rounds`` (plus one warm-up)."""
    rng = random.Random(1000 + batch)
    shares, per_call, hook_us = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        on_engine, null_engine = engine_for(batch), engine_for(batch)
        os.mkdir(os.path.join(tmp, "on"))
        inst = instrument_for(on_engine, os.path.join(tmp, "on"))
        inst.pause()  # the metered observer below is attached instead, round by round
        for r in range(rounds + 1):
            on, null = Meter(inst.observer), Meter(NullObserver())
            loops: dict[str, int] = {}
            answers: dict[str, list[tuple[int, ...]]] = {}
            for _ in range(max(1, requests // batch)):
                prompts = [[rng.randrange(1, 2000) for _ in range(prompt)] for _ in range(batch)]
                arms = [("on", on_engine, on), ("null", null_engine, null)]
                for name, eng, meter in arms if r % 2 == 0 else arms[::-1]:
                    loop, toks = _run(eng, meter, prompts, max_tokens)
                    loops[name] = loops.get(name, 0) + loop
                    answers.setdefault(name, []).extend(toks)
            assert answers["on"] == answers["null"], "tokens differ between the arms"
            assert inst.flush(), "telemetry did not hand over in time"
            if r == 0:
                continue
            own = null.ns / max(null.calls, 1)  # the meter's cost per call
            net = max(0.0, on.ns - own * on.calls)
            engine_cpu = loops["on"] - on.ns
            shares.append(net / engine_cpu)
            per_call.append(own)
            hook_us.append(net / len(answers["on"]) / 1e3)
        assert inst.drops.total == 0, f"telemetry dropped {inst.drops.snapshot()}"
        inst.detach()
    return {
        "batch": float(batch),
        "share": statistics.median(shares),
        "share_max": max(shares),
        "meter_ns_call": statistics.median(per_call),
        "hook_us_req": statistics.median(hook_us),
    }
