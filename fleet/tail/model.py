"""The service-time model: one group of features per suspect, fitted by least squares.

Service time (latency minus queue and preemption stall) is fitted on uncached prompt tokens,
output tokens (e2e only), the prompt tokens of *other* long-prompt prefills in flight on the same
replica (prefill interference), and, when one replica is over-represented in the tail, an
indicator for it interacted with the first two sizes (a slow replica is slower per token, not by
a constant). The groups keep their order: it is the order suspects are listed in before ranking.
The fit is solved from the normal equations the second pass sums (``sums.TailSums``).
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetwatch.fleet.tail.cohorts import F64
from fleetwatch.fleet.tail.sums import INTERFERENCE, OUTPUT, PROMPT, REPLICA, TailSums

__all__ = ["INTERFERENCE", "OUTPUT", "PROMPT", "REPLICA", "Fit", "fit_service"]


@dataclass(frozen=True, slots=True)
class Fit:
    """Each suspect's feature columns (as positions into the sums' columns, 0 the intercept)
    and the coefficients; ``long_threshold`` is the uncached-token size of a long prefill."""

    groups: dict[str, tuple[int, ...]]
    beta: F64
    long_threshold: float
    bad_replica: str | None

    @property
    def features(self) -> tuple[str, ...]:
        return tuple(self.groups)


def fit_service(sums: TailSums) -> Fit:
    """Solve the service-time fit from the second pass's sums."""
    sizes = {name: (3 if name == REPLICA else 1) for name in sums.plan.groups()}
    groups: dict[str, tuple[int, ...]] = {}
    k = 1
    for name, size in sizes.items():
        groups[name] = tuple(range(k, k + size))
        k += size
    return Fit(groups, sums.solve(), sums.plan.long_threshold, sums.plan.worst)
