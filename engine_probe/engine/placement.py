"""Where the engine computes: the torch device, and how many CPU threads torch may use.

The thread count comes from ``EngineConfig.num_threads``, else the ``THREADS_ENV`` environment
variable, else ``DEFAULT_CPU_THREADS`` on a CPU (a GPU run leaves torch's setting alone).
"""

from __future__ import annotations

import os

import torch

from fleetwatch.engine_probe.engine.config import EngineConfig
from fleetwatch.engine_probe.engine.errors import EngineConfigError

__all__ = ["DEFAULT_CPU_THREADS", "THREADS_ENV", "place", "resolve_device"]

THREADS_ENV = "FLEETWATCH_ENGINE_THREADS"
"""Environment variable read at engine construction when ``EngineConfig.num_threads`` is None."""

DEFAULT_CPU_THREADS = 1
"""torch intra-op threads on CPU when neither the config nor the environment says: a small
model's step is dominated by per-operator overhead, and on a shared, oversubscribed machine two
OpenMP threads waiting on each other made steps 5-12x slower (measured on the 2-core CI box)."""


def resolve_device(name: str) -> torch.device:
    """``"cuda"``, ``"cpu"`` or ``"auto"`` (CUDA when available) as a torch device."""
    if name == "cuda" or (name == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise EngineConfigError("EngineConfig.device is 'cuda' but no CUDA device is available")
        return torch.device("cuda")
    return torch.device("cpu")


def _requested_threads(configured: int | None) -> int | None:
    if configured is not None or not os.environ.get(THREADS_ENV):
        return configured
    raw = os.environ[THREADS_ENV]
    threads = int(raw) if raw.strip().isdigit() else 0
    if threads < 1:
        raise EngineConfigError(f"{THREADS_ENV} must be an integer >= 1, got {raw!r}")
    return threads


def place(config: EngineConfig) -> torch.device:
    """Resolve the configured device, set torch's intra-op thread count, return the device."""
    threads = _requested_threads(config.num_threads)
    device = resolve_device(config.device)
    if threads is None and device.type == "cpu":
        threads = DEFAULT_CPU_THREADS
    if threads is not None and threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    return device
