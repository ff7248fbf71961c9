"""Injected faults at run time: which new requests fail, and how much longer a step takes.

The faults in force (a frozen ``FaultConfig``) may be replaced while the engine runs; each
decision reads them once. The random stream that picks failing requests is seeded by the first
``FaultConfig`` and kept across replacements, so a run is reproducible.
"""

from __future__ import annotations

import random

from fleetwatch.engine_probe.engine.config import FaultConfig

__all__ = ["FaultInjector"]


class FaultInjector:
    """The faults in force (``faults``) and their random stream."""

    def __init__(self, faults: FaultConfig) -> None:
        self.faults = faults
        self._rng = random.Random(faults.seed)

    def fails_at_first_token(self) -> bool:
        """Draw whether a new request ends in an injected error instead of its first token."""
        faults = self.faults
        return faults.error_rate > 0 and self._rng.random() < faults.error_rate

    def extra_step_s(self, step: int, took_s: float) -> float:
        """Seconds to add to step number ``step`` (1-based) that computed in ``took_s``: the
        slowdown's stretch, plus a stall every ``stall_every_steps`` steps."""
        faults = self.faults
        extra = (faults.slowdown - 1.0) * took_s
        every = faults.stall_every_steps
        if every and step % every == 0:
            extra += faults.stall_s
        return extra
