"""The cold-start chain of an engine, phase by phase: ``StartupTimer`` and the phases themselves.

From process start to the first token an engine goes through distinct phases, and a cold start
that grew is only actionable when one knows which one grew:

- ``process_start``: from the process's creation to the timer (interpreter, imports: torch alone
  takes seconds); only where the process start time is known (Linux ``/proc``) and asked for,
- ``weights_load``: the model's weights into device memory (the reference engine initialises
  random weights of the configured shape: the same allocation and fill a real load ends with),
- ``kv_cache_alloc``: the paged KV cache (the second-largest allocation after the weights),
- ``warmup``: the first forward passes (allocator growth, kernel selection; compilation where an
  engine compiles), run on a tiny prompt before any client request,
- ``server_start``: telemetry attached and the HTTP listener up (``/health`` answers from here),
- ``readiness``: from warm to accepting traffic (starting the step loop, marking the server
  ready).

One process's phases follow each other without gaps, so their sum is its cold start. Where
several replicas start in one process, each replica's phases are its own work: ``server_start``
runs from the call that starts its server, ``warmup`` and ``readiness`` from their task's turn,
so time spent on another replica's start (building its engine) counts to none of them.

``StartupTimer`` stamps each phase with an injected clock (tests pass a fake one); its wall-clock
offset is captured once so the phases become span times. On CUDA a phase ends only after the
device finished its queued work (``torch.cuda.synchronize``), or the time would land in the next.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

if TYPE_CHECKING:
    import torch

    from fleetwatch.engine_probe.engine.config import EngineConfig, ModelConfig
    from fleetwatch.engine_probe.engine.model import KVCache, Transformer

__all__ = [
    "PHASES",
    "PhaseTime",
    "StartupTimer",
    "build_parts",
    "process_started_epoch_s",
    "startup_line",
    "warm_up",
]

PHASES: Final = (
    "process_start",
    "weights_load",
    "kv_cache_alloc",
    "server_start",
    "warmup",
    "readiness",
)
"""The phases of a cold start, in order (the ``phase`` label values: bounded)."""

WARMUP_PROMPT: Final = (1, 2, 3, 4, 5, 6, 7, 8)
WARMUP_TOKENS: Final = 4


@dataclass(frozen=True, slots=True)
class PhaseTime:
    """One phase: its name and start/end on the timer's clock (seconds)."""

    name: str
    start_s: float
    end_s: float

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


class StartupTimer:
    """Times the phases of one cold start on ``clock``; ``offset_s`` maps them to epoch seconds.

    >>> ticks = iter([0.0, 1.0, 3.5])
    >>> t = StartupTimer(clock=lambda: next(ticks), wall_clock=lambda: 100.0)
    >>> with t.phase("weights_load"):
    ...     pass
    >>> [(p.name, p.seconds) for p in t.phases]
    [('weights_load', 2.5)]
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sync: Callable[[], None] | None = None,
    ) -> None:
        self.clock = clock
        self.started_s = clock()
        self.offset_s = wall_clock() - self.started_s
        """Epoch seconds minus clock seconds, captured at creation."""
        self.sync = sync
        """Called before each phase ends (a device synchronise), or None."""
        self.phases: list[PhaseTime] = []

    @contextmanager
    def phase(self, name: str, *, from_now: bool = False) -> Iterator[None]:
        """Time the block as phase ``name`` (recorded only when the block completes). A phase
        starts where the previous one ended: time between them counts to the later one; with
        ``from_now`` it starts now (a phase run by a task whose turn may come after other work:
        that wait is not this phase's)."""
        start = self.phases[-1].end_s if self.phases and not from_now else self.clock()
        yield
        if self.sync is not None:
            self.sync()
        self.phases.append(PhaseTime(name, start, self.clock()))

    def mark(self, name: str, start_s: float) -> PhaseTime:
        """Record phase ``name`` from ``start_s`` to now (for a phase that spans callbacks)."""
        p = PhaseTime(name, start_s, self.clock())
        self.phases.append(p)
        return p

    def since_process_start(self, process_start_epoch_s: float | None = None) -> None:
        """Record ``process_start``: from the process's creation (epoch seconds; default: read
        from ``/proc``) to the timer's creation. Nothing where the start is unknown."""
        epoch = process_start_epoch_s
        if epoch is None:
            epoch = process_started_epoch_s()
        if epoch is None:
            return
        start = min(epoch - self.offset_s, self.started_s)
        self.phases.insert(0, PhaseTime("process_start", start, self.started_s))

    @property
    def last_end_s(self) -> float:
        return self.phases[-1].end_s if self.phases else self.started_s

    @property
    def total_s(self) -> float:
        """The cold start: the phases' seconds added up (0 without phases). One process alone
        runs them without gaps; beside other replicas' starts, the gaps are their work."""
        return sum(p.seconds for p in self.phases)

    def seconds(self) -> dict[str, float]:
        """Seconds per phase (a phase timed twice adds up)."""
        out: dict[str, float] = {}
        for p in self.phases:
            out[p.name] = out.get(p.name, 0.0) + p.seconds
        return out


def process_started_epoch_s() -> float | None:
    """When this process was created (epoch seconds, 10 ms resolution) from Linux's ``/proc``;
    None elsewhere."""
    import os

    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            stat = f.read()
        with open("/proc/stat", encoding="ascii") as f:
            btime = next(int(ln.split()[1]) for ln in f if ln.startswith("btime "))
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _device_sync(device: torch.device) -> Callable[[], None] | None:
    if device.type != "cuda":
        return None
    import torch

    return lambda: torch.cuda.synchronize(device)


def build_parts(
    model_config: ModelConfig,
    engine_config: EngineConfig,
    device: torch.device,
    dtype: torch.dtype,
    timer: StartupTimer | None,
) -> tuple[Transformer, KVCache]:
    """The model and its KV cache, each timed as its phase when ``timer`` is given.

    One extra KV block: the scratch slot that static-batching padding rows write to."""
    from fleetwatch.engine_probe.engine.model import KVCache, Transformer

    blocks, size = engine_config.num_blocks + 1, engine_config.block_size
    if timer is None:
        return Transformer(model_config, device, dtype), KVCache(
            model_config, blocks, size, device, dtype
        )
    if timer.sync is None:
        timer.sync = _device_sync(device)
    with timer.phase("weights_load"):
        model = Transformer(model_config, device, dtype)
    with timer.phase("kv_cache_alloc"):
        kv = KVCache(model_config, blocks, size, device, dtype)
    return model, kv


class Generates(Protocol):
    """What :func:`warm_up` drives: an engine's model config and its blocking ``generate``."""

    @property
    def model_config(self) -> ModelConfig: ...

    def generate(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> object: ...


def warm_up(
    engine: Generates,
    timer: StartupTimer | None = None,
    prompt: Sequence[int] = WARMUP_PROMPT,
    max_tokens: int = WARMUP_TOKENS,
) -> None:
    """Run one tiny request through ``engine`` (prefill and a few decode steps) as ``warmup``.

    Call it before observers are attached and before the step loop starts: the warm-up request is
    not traffic (no record, span or count) and the engine is driven from this thread."""
    vocab = engine.model_config.vocab_size
    ids = [t % vocab for t in prompt]
    if timer is None:
        engine.generate([ids], max_tokens=max_tokens)
        return
    with timer.phase("warmup", from_now=True):
        engine.generate([ids], max_tokens=max_tokens)


def startup_line(timer: StartupTimer | None) -> str:
    """``1.234 s (weights_load 0.9 s, kv_cache_alloc 0.1 s, ...)`` for a terminal."""
    if timer is None or not timer.phases:
        return "no startup timed"
    parts = ", ".join(f"{name} {s:.3g} s" for name, s in timer.seconds().items())
    return f"started in {timer.total_s:.3g} s ({parts})"
