"""Per-tenant token limits and weighted fair queueing at the HTTP front (``engine serve
--tenant-limits``; off by default, and then nothing here runs).

- Tenant: the ``X-Fleetwatch-Tenant`` header (``request_context``), absent -> ``default``. The
  OpenAI ``user`` field is not used: it names the calling application's end user, not the
  tenant, and one bucket per end user would be unbounded. Tenant names are bounded exactly as
  label values are in telemetry (``fleetwatch.telemetry.metrics.labels.LabelCap``): the first
  ``max_tenants`` distinct values (the default and tenants named in ``weights`` or
  ``overrides`` first) get a bucket, a fair-queue flow and label values of their own; later
  ones share ``other``.
- Cost: ``prompt_weight × prompt tokens + output_weight × output tokens``. At admission a
  request reserves its worst case (``max_tokens`` of output) from its tenant's token bucket
  (``rate_per_s`` and ``burst``, or the tenant's own in ``overrides``); at its end it is
  charged what it used and the rest is refunded; a request that produced no output (refused by
  the engine: queue full, KV capacity; aborted before its first token) is charged nothing.
  A tenant whose bucket cannot cover the reservation now gets 429 with ``Retry-After`` (whole
  seconds until the bucket refills enough); a request whose reservation exceeds ``burst`` can
  never be admitted and gets 400 naming the limit (not retryable).
- Fair queueing: admitted requests enter the engine at once while fewer than ``slots`` of them
  are in it (the engine's ``max_num_seqs`` by default). Beyond that they wait in a weighted fair
  queue (``fleetwatch.resilience.limits.FairQueue``: virtual finish times, cost = the reservation), so
  under contention a heavy tenant queues behind itself and the others are admitted first.

``TenantGate`` is the logic, synchronous and clock-injected (a virtual-clock harness drives it
beside an ``LLMEngine``); ``TenantAdmission`` puts it on the event loop: ``Hold.wait()`` until
admitted into the engine, ``Hold.done(output_tokens)`` at the end.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter
from prometheus_client import Gauge as PromGauge

from fleetwatch.engine_probe.serve.wire.errors import InvalidRequest
from fleetwatch.resilience.limits import CostWeights, FairQueue, Reservation, TenantLimiter
from fleetwatch.telemetry.metrics.labels import LabelCap

__all__ = [
    "DEFAULT_TENANT",
    "Hold",
    "Refusal",
    "TenantAdmission",
    "TenantGate",
    "TenantLimits",
    "TenantMetrics",
    "Ticket",
]

DEFAULT_TENANT = "default"


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """Per-tenant limits (cost units: weighted tokens) and fair-queue weights."""

    rate_per_s: float = 2000.0
    """Cost units a tenant's bucket refills per second."""
    burst: float = 16000.0
    """Cost units a tenant's bucket holds; a request reserving more is refused with 400."""
    prompt_weight: float = 1.0
    output_weight: float = 1.0
    weights: tuple[tuple[str, float], ...] = ()
    """Fair-queue weight by tenant (others: 1)."""
    overrides: tuple[tuple[str, float, float], ...] = ()
    """(tenant, rate per s, burst) for tenants whose bucket differs from the others'."""
    max_tenants: int = 64
    """Distinct tenants with a bucket and label of their own; the rest share ``other``."""
    slots: int | None = None
    """Requests in the engine at once before the fair queue holds the rest (None: the engine's
    ``max_num_seqs``)."""

    def __post_init__(self) -> None:
        finite = math.isfinite
        if not (finite(self.rate_per_s) and self.rate_per_s > 0):
            raise ValueError(
                f"TenantLimits.rate_per_s must be finite and > 0, got {self.rate_per_s}"
            )
        if not (finite(self.burst) and self.burst > 0):
            raise ValueError(f"TenantLimits.burst must be finite and > 0, got {self.burst}")
        for field_name, w in (
            ("prompt_weight", self.prompt_weight),
            ("output_weight", self.output_weight),
        ):
            if not (finite(w) and w >= 0):
                raise ValueError(f"TenantLimits.{field_name} must be finite and >= 0, got {w}")
        if self.max_tenants < 1:
            raise ValueError("TenantLimits.max_tenants must be >= 1")
        if self.slots is not None and self.slots < 1:
            raise ValueError("TenantLimits.slots must be >= 1")
        for name, w in self.weights:
            if not (finite(w) and w > 0):
                raise ValueError(
                    f"TenantLimits.weights: weight of {name!r} must be finite and > 0, got {w}"
                )
        for name, rate, burst in self.overrides:
            if not (finite(rate) and finite(burst) and rate > 0 and burst > 0):
                raise ValueError(
                    f"TenantLimits.overrides: rate and burst of {name!r} must be finite and > 0,"
                    f" got {rate:g}, {burst:g}"
                )
        named = self.named_tenants()
        if len(named) > self.max_tenants:
            raise ValueError(
                f"TenantLimits.max_tenants is {self.max_tenants} but {len(named)} tenants are named"
                f" ({', '.join(named)}): each needs a bucket of its own"
            )

    def named_tenants(self) -> list[str]:
        """The default tenant and those named in ``weights`` or ``overrides``, in that order."""
        out = [DEFAULT_TENANT]
        for name in [n for n, _ in self.weights] + [n for n, _, _ in self.overrides]:
            if name not in out:
                out.append(name)
        return out


class Refusal(NamedTuple):
    """A request the limits refuse: the error and its headers."""

    error: InvalidRequest
    headers: dict[str, str]


@dataclass(eq=False, slots=True)
class Ticket:
    """One admitted request's reservation and place in the fair queue."""

    tenant: str
    reservation: Reservation
    cost: float
    dispatched: bool = False
    cancelled: bool = False
    finished: bool = False


class TenantMetrics:
    """Per-tenant series (tenant values bounded by the gate's ``LabelCap``)."""

    def __init__(self, registry: CollectorRegistry, replica: str) -> None:
        self.replica = replica
        self.requests = PromCounter(
            "fleetwatch_tenant_requests",
            "Requests by tenant and limit outcome (admitted, limited: 429, too_large: 400).",
            ["replica", "tenant", "outcome"],
            registry=registry,
        )
        self.charged = PromCounter(
            "fleetwatch_tenant_tokens_charged",
            "Cost units (weighted prompt + output tokens) charged to each tenant at settlement.",
            ["replica", "tenant"],
            registry=registry,
        )
        self.queued = PromGauge(
            "fleetwatch_tenant_queued_requests",
            "Admitted requests waiting in the fair queue for the engine, by tenant.",
            ["replica", "tenant"],
            registry=registry,
        )
        self.folded = PromCounter(
            "fleetwatch_tenant_overflow",
            "Requests whose tenant was beyond the distinct-tenant cap (counted as 'other').",
            ["replica"],
            registry=registry,
        ).labels(replica)


class TenantGate:
    """Limits and fair queue for one engine (see the module docstring). Not thread-safe: keep it
    on one thread (the event loop, or a harness's loop)."""

    def __init__(
        self,
        limits: TenantLimits,
        slots: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        metrics: TenantMetrics | None = None,
    ) -> None:
        self.limits = limits
        self.slots = limits.slots if limits.slots is not None else max(1, slots)
        self.weights = CostWeights(limits.prompt_weight, limits.output_weight)
        self.limiter = TenantLimiter(
            {name: (rate, burst) for name, rate, burst in limits.overrides},
            weights=self.weights,
            default=(limits.rate_per_s, limits.burst),
            clock=clock,
        )
        self.queue: FairQueue[Ticket] = FairQueue(dict(limits.weights))
        self.cap = LabelCap("tenant", limits.max_tenants)
        for name in limits.named_tenants():
            self.cap.get(name)
        self.metrics = metrics
        self.in_engine = 0
        self.queued: Counter[str] = Counter()

    def tenant(self, raw: str | None) -> str:
        """The bounded tenant name for a header value (None: the default tenant)."""
        if raw is None:
            return DEFAULT_TENANT
        folded = self.cap.folded
        name = self.cap.get(raw)
        if self.metrics is not None and self.cap.folded > folded:
            self.metrics.folded.inc()
        return name

    def _count(self, tenant: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.requests.labels(self.metrics.replica, tenant, outcome).inc()

    def _gauge(self, tenant: str) -> None:
        if self.metrics is not None:
            self.metrics.queued.labels(self.metrics.replica, tenant).set(self.queued[tenant])

    def admit(self, tenant: str, prompt_tokens: int, max_tokens: int) -> Ticket | Refusal:
        """Reserve the request's worst case from its tenant's bucket, or the refusal."""
        cost = self.weights.cost(prompt_tokens, max_tokens)
        limits = self.limits
        bucket = self.limiter.bucket(tenant)
        assert bucket is not None  # every tenant has one (the default's settings at least)
        if cost > bucket.burst:
            self._count(tenant, "too_large")
            return Refusal(
                InvalidRequest(
                    400,
                    f"request reserves {cost:g} token units ({limits.prompt_weight:g} x "
                    f"{prompt_tokens} prompt + {limits.output_weight:g} x {max_tokens} max_tokens),"
                    f" more than the tenant burst of {bucket.burst:g}: it can never be admitted;"
                    " lower max_tokens or shorten the prompt",
                    "max_tokens",
                    code="tenant_burst_exceeded",
                    reason="TenantBurstExceeded",
                ),
                {},
            )
        reservation = self.limiter.admit(tenant, prompt_tokens, max_tokens)
        if reservation is None:
            self._count(tenant, "limited")
            wait = bucket.seconds_until(cost)
            return Refusal(
                InvalidRequest(
                    429,
                    f"tenant {tenant!r} is over its token rate ({bucket.rate_per_s:g} units/s,"
                    f" burst {bucket.burst:g}); this request reserves {cost:g}",
                    code="rate_limit_exceeded",
                    reason="TenantRateLimited",
                ),
                {"Retry-After": str(max(1, math.ceil(wait)))},
            )
        self._count(tenant, "admitted")
        return Ticket(tenant, reservation, cost)

    def enqueue(self, ticket: Ticket) -> list[Ticket]:
        """Put an admitted request in the fair queue; returns the tickets that enter the engine
        now (in order; ``ticket`` among them when a slot was free)."""
        self.queue.push(ticket.tenant, ticket, ticket.cost)
        self.queued[ticket.tenant] += 1
        self._gauge(ticket.tenant)
        return self._dispatch()

    def _dispatch(self) -> list[Ticket]:
        out: list[Ticket] = []
        while self.in_engine < self.slots and len(self.queue):
            tenant, ticket = self.queue.pop()
            if ticket.cancelled:
                continue
            self.queued[tenant] -= 1
            self._gauge(tenant)
            ticket.dispatched = True
            self.in_engine += 1
            out.append(ticket)
        return out

    def cancel(self, ticket: Ticket) -> None:
        """A queued request left before entering the engine: refund its whole reservation."""
        if ticket.dispatched or ticket.cancelled:
            return
        ticket.cancelled = True
        self.queue.forget(ticket.tenant, ticket.cost)
        self.queued[ticket.tenant] -= 1
        self._gauge(ticket.tenant)
        self.limiter.release(ticket.reservation)

    def finish(self, ticket: Ticket, output_tokens: int, *, ran: bool = True) -> list[Ticket]:
        """A dispatched request ended having produced ``output_tokens``: charge it (``ran``
        False: the engine refused or dropped it before any output, and the whole reservation is
        refunded), free its slot; returns the tickets that enter the engine now."""
        if not ticket.dispatched or ticket.finished:
            return []
        ticket.finished = True
        charged = 0.0
        if ran:
            charged = self.limiter.settle(ticket.reservation, output_tokens)
        else:
            self.limiter.release(ticket.reservation)
        if self.metrics is not None and charged:
            self.metrics.charged.labels(self.metrics.replica, ticket.tenant).inc(charged)
        self.in_engine -= 1
        return self._dispatch()


@dataclass(eq=False, slots=True)
class Hold:
    """One request's passage through the gate on the event loop."""

    admission: TenantAdmission
    ticket: Ticket
    _ready: asyncio.Future[None] | None = field(default=None, repr=False)

    @property
    def tenant(self) -> str:
        return self.ticket.tenant

    async def wait(self) -> None:
        """Return once the request may enter the engine."""
        gate = self.admission.gate
        self.admission.wake(gate.enqueue(self.ticket))
        if self.ticket.dispatched:
            return
        self._ready = asyncio.get_running_loop().create_future()
        self.admission.waiting[self.ticket] = self
        try:
            await self._ready
        except asyncio.CancelledError:
            self.admission.waiting.pop(self.ticket, None)
            gate.cancel(self.ticket)  # no-op when it was let in meanwhile: done() frees the slot
            raise

    def done(self, output_tokens: int, *, ran: bool = True) -> None:
        """The request ended (or never entered the engine): settle, free its slot. ``ran``
        False: it produced no output (refused by the engine, aborted first): nothing charged."""
        gate = self.admission.gate
        if self.ticket.dispatched:
            self.admission.wake(gate.finish(self.ticket, output_tokens, ran=ran))
        else:
            self.admission.waiting.pop(self.ticket, None)
            gate.cancel(self.ticket)


class TenantAdmission:
    """``TenantGate`` on the event loop: ``admit`` -> ``Hold`` or ``Refusal``."""

    def __init__(self, gate: TenantGate) -> None:
        self.gate = gate
        self.waiting: dict[Ticket, Hold] = {}

    @classmethod
    def build(
        cls,
        limits: TenantLimits,
        *,
        slots: int,
        registry: CollectorRegistry,
        replica: str,
        clock: Callable[[], float],
    ) -> TenantAdmission:
        return cls(TenantGate(limits, slots, clock=clock, metrics=TenantMetrics(registry, replica)))

    def tenant(self, raw: str | None) -> str:
        return self.gate.tenant(raw)

    def admit(self, tenant: str, prompt_tokens: int, max_tokens: int) -> Hold | Refusal:
        got = self.gate.admit(tenant, prompt_tokens, max_tokens)
        return got if isinstance(got, Refusal) else Hold(self, got)

    def wake(self, tickets: list[Ticket]) -> None:
        for ticket in tickets:
            hold = self.waiting.pop(ticket, None)
            if hold is not None and hold._ready is not None and not hold._ready.done():
                hold._ready.set_result(None)
