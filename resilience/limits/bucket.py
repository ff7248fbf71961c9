"""Token buckets per tenant with reservation at admission and settlement at finish."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from fleetwatch.resilience.errors import ResilienceConfigError

__all__ = ["CostWeights", "Reservation", "TenantLimiter", "TokenBucket"]


@dataclass(frozen=True, slots=True)
class CostWeights:
    """Cost units per input unit and per output unit."""

    input_weight: float = 1.0
    output_weight: float = 1.0

    def __post_init__(self) -> None:
        if self.input_weight < 0.0 or self.output_weight < 0.0:
            raise ResilienceConfigError("cost weights must be >= 0")

    def cost(self, input_units: float, output_units: float) -> float:
        return self.input_weight * input_units + self.output_weight * output_units


class TokenBucket:
    """``rate_per_s`` cost units refill per second up to ``burst``; starts full."""

    def __init__(
        self, rate_per_s: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if not rate_per_s > 0.0 or not burst > 0.0:
            raise ResilienceConfigError(
                f"token bucket: rate_per_s and burst must be > 0, got {rate_per_s}, {burst}"
            )
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._level = burst
        self._at = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        if now > self._at:
            self._level = min(self.burst, self._level + (now - self._at) * self.rate_per_s)
        self._at = max(self._at, now)

    @property
    def level(self) -> float:
        with self._lock:
            self._refill()
            return self._level

    def try_take(self, units: float) -> bool:
        """Take ``units`` if the bucket holds them; never goes below zero."""
        if units < 0.0:
            raise ValueError(f"units must be >= 0, got {units}")
        with self._lock:
            self._refill()
            if units > self._level:
                return False
            self._level -= units
            return True

    def seconds_until(self, units: float) -> float:
        """Seconds until the bucket holds ``units`` (0 if it does now; ``inf`` if ``units`` is
        more than ``burst``, which it never holds)."""
        if units > self.burst:
            return float("inf")
        with self._lock:
            self._refill()
            return max(0.0, units - self._level) / self.rate_per_s

    def give_back(self, units: float) -> None:
        """Return units taken and not used (capped at ``burst``)."""
        if units < 0.0:
            raise ValueError(f"units must be >= 0, got {units}")
        with self._lock:
            self._refill()
            self._level = min(self.burst, self._level + units)


@dataclass(slots=True)
class Reservation:
    """What one admitted request holds until it settles."""

    tenant: str
    input_units: float
    max_output_units: float
    reserved: float
    settled: bool = False


class TenantLimiter:
    """One ``TokenBucket`` per tenant: ``limits`` maps tenant -> (rate per s, burst) in cost units;
    ``default`` applies to tenants not listed (None: they are refused)."""

    def __init__(
        self,
        limits: Mapping[str, tuple[float, float]],
        *,
        weights: CostWeights | None = None,
        default: tuple[float, float] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.weights = weights or CostWeights()
        self._default = default
        self._clock = clock
        self._buckets = {t: TokenBucket(r, b, clock) for t, (r, b) in limits.items()}
        self._lock = threading.Lock()

    def bucket(self, tenant: str) -> TokenBucket | None:
        with self._lock:
            found = self._buckets.get(tenant)
            if found is None and self._default is not None:
                found = self._buckets[tenant] = TokenBucket(*self._default, self._clock)
            return found

    def admit(self, tenant: str, input_units: float, max_output_units: float) -> Reservation | None:
        """Reserve the worst case; None when the tenant's bucket cannot cover it now."""
        if input_units < 0.0 or max_output_units < 0.0:
            raise ValueError("input_units and max_output_units must be >= 0")
        bucket = self.bucket(tenant)
        reserved = self.weights.cost(input_units, max_output_units)
        if bucket is None or not bucket.try_take(reserved):
            return None
        return Reservation(tenant, input_units, max_output_units, reserved)

    def release(self, reservation: Reservation) -> None:
        """Refund a whole reservation: the request never ran (cancelled while queued)."""
        if reservation.settled:
            raise ValueError("reservation already settled")
        reservation.settled = True
        bucket = self.bucket(reservation.tenant)
        if bucket is not None and reservation.reserved > 0.0:
            bucket.give_back(reservation.reserved)

    def settle(self, reservation: Reservation, output_units: float) -> float:
        """Charge what was used and refund the rest; returns the units charged. A request that
        produced more than it reserved is charged its reservation (the cap it was admitted on).
        Settling twice is an error."""
        if reservation.settled:
            raise ValueError("reservation already settled")
        if output_units < 0.0:
            raise ValueError(f"output_units must be >= 0, got {output_units}")
        reservation.settled = True
        used = min(
            reservation.reserved,
            self.weights.cost(
                reservation.input_units, min(output_units, reservation.max_output_units)
            ),
        )
        bucket = self.bucket(reservation.tenant)
        if bucket is not None and reservation.reserved > used:
            bucket.give_back(reservation.reserved - used)
        return used
