"""Open-loop arrival schedules: the instants (seconds from the start) at which requests are due.

Pure functions of a seeded ``numpy.random.Generator``; the driver sends each request at its instant
whether or not earlier ones have finished, so the offered load does not bend to the server.

Gamma arrivals use the convention of ``vllm bench serve``: inter-arrival gaps are
Gamma(shape=burstiness, scale=1/(rate·burstiness)), so the mean rate is ``rate`` for any burstiness;
burstiness 1 is Poisson, below 1 is burstier (coefficient of variation 1/√burstiness), above 1 smoother.
"""

from __future__ import annotations

import numpy as np

from fleetwatch.engine_probe.probe.errors import ProbeError

__all__ = ["constant_arrivals", "gamma_arrivals", "poisson_arrivals"]


def _check(rate: float, n: int) -> None:
    if not rate > 0:
        raise ProbeError(f"rate must be > 0 requests/s, got {rate}")
    if n < 0:
        raise ProbeError(f"number of requests must be >= 0, got {n}")


def gamma_arrivals(
    rate: float, n: int, *, burstiness: float = 1.0, rng: np.random.Generator
) -> list[float]:
    """``n`` arrival instants (s) at mean ``rate`` per second; the first request goes at 0."""
    _check(rate, n)
    if not burstiness > 0:
        raise ProbeError(f"burstiness must be > 0, got {burstiness}")
    if n == 0:
        return []
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n - 1)
    return [0.0, *np.cumsum(gaps).tolist()]


def poisson_arrivals(rate: float, n: int, *, rng: np.random.Generator) -> list[float]:
    """Poisson process: exponential gaps at mean ``rate`` per second."""
    return gamma_arrivals(rate, n, burstiness=1.0, rng=rng)


def constant_arrivals(rate: float, n: int) -> list[float]:
    """Evenly spaced instants, ``1/rate`` apart."""
    _check(rate, n)
    return [i / rate for i in range(n)]
