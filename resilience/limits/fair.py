"""Weighted fair queueing across tenants by virtual finish times (start-time fair queueing).

Each tenant's items are served in its own order. An item of cost c pushed by a tenant of
weight w gets start S = max(V, F_prev(tenant)) and finish F = S + c / w, where V is the start
tag of the item in service (the system's virtual time) and F_prev the finish of the tenant's
previous item; ``pop`` serves the smallest finish (ties: earliest push). Under backlog each
tenant's served cost over any long stretch is proportional to its weight; a tenant that was
idle comes back at the current virtual time, with no credit saved up.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping
from typing import Generic, TypeVar

from fleetwatch.resilience.errors import ResilienceConfigError

__all__ = ["FairQueue"]

T = TypeVar("T")


class FairQueue(Generic[T]):
    """Not thread-safe: keep it behind the one task or lock that feeds the backend."""

    def __init__(self, weights: Mapping[str, float], default_weight: float = 1.0) -> None:
        for tenant, w in {**weights, "(default)": default_weight}.items():
            if not w > 0.0:
                raise ResilienceConfigError(f"fair queue: weight of {tenant} must be > 0, got {w}")
        self._weights = dict(weights)
        self._default = default_weight
        self._heap: list[tuple[float, int, float, str, T]] = []
        self._finish: dict[str, float] = {}
        self._virtual = 0.0
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def weight(self, tenant: str) -> float:
        return self._weights.get(tenant, self._default)

    def push(self, tenant: str, item: T, cost: float) -> None:
        if not cost >= 0.0:
            raise ValueError(f"cost must be >= 0, got {cost}")
        start = max(self._virtual, self._finish.get(tenant, 0.0))
        finish = start + cost / self.weight(tenant)
        self._finish[tenant] = finish
        heapq.heappush(self._heap, (finish, next(self._seq), start, tenant, item))

    def pop(self) -> tuple[str, T]:
        """The next item to serve; ``IndexError`` when empty."""
        _finish, _seq, start, tenant, item = heapq.heappop(self._heap)
        self._virtual = max(self._virtual, start)
        return tenant, item

    def forget(self, tenant: str, cost: float) -> None:
        """An item ``tenant`` pushed with ``cost`` left unserved (it stays in the heap and the
        caller skips it when popped): take its cost back off the tenant's finish, so a request
        cancelled while queued does not push the tenant's later ones back."""
        finish = self._finish.get(tenant)
        if finish is not None:
            self._finish[tenant] = max(self._virtual, finish - cost / self.weight(tenant))
