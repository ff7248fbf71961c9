"""``ServerConfig``: the limits of the HTTP front (queue, reader lag, idempotency, drain, sizes)."""

from __future__ import annotations

from dataclasses import dataclass, field

from fleetwatch.engine_probe.serve.front.limits import ConnectionLimits
from fleetwatch.engine_probe.serve.front.tenants import TenantLimits
from fleetwatch.engine_probe.serve.request_context import TRAFFIC_CLASS_RULE, valid_traffic_class

__all__ = ["ServerConfig"]


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Limits of the HTTP front. Counts, seconds, bytes."""

    max_queue: int = 256
    """Requests admitted but without a first output yet; one more is answered 429."""
    max_lag: int = 512
    """Outputs a streaming reader may fall behind before it is dropped."""
    idempotency_ttl_s: float = 300.0
    idempotency_max_keys: int = 4096
    idempotency_max_bytes: int = 64 << 20
    """Bytes of responses kept for ``Idempotency-Key`` replays (oldest keys dropped beyond)."""
    connections: ConnectionLimits = field(default_factory=ConnectionLimits)
    """Connection cap, header/body/keep-alive timeouts, header sizes (``limits``)."""
    drain_timeout_s: float = 30.0
    telemetry_timeout_s: float = 3.0
    """Deadline for flushing and detaching telemetry at stop (records, span export), off the loop."""
    max_body_bytes: int = 1 << 20
    max_tokens_cap: int | None = None
    write_buffer_bytes: int = 1 << 16
    """High-water mark of each connection's write buffer: beyond it a write waits (backpressure)."""
    socket_send_buffer_bytes: int | None = None
    """SO_SNDBUF for streaming connections (None: the kernel's default, usually megabytes)."""
    traffic_class: str = "default"
    """Traffic class of requests without an ``X-Fleetwatch-Traffic-Class`` header."""
    tenants: TenantLimits | None = None
    """Per-tenant token limits and fair queueing (``tenants``); None: off."""

    def __post_init__(self) -> None:
        for name in (
            "max_queue",
            "max_lag",
            "idempotency_max_keys",
            "idempotency_max_bytes",
            "max_body_bytes",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"ServerConfig.{name} must be >= 1")
        if not self.telemetry_timeout_s > 0:
            raise ValueError("ServerConfig.telemetry_timeout_s must be > 0")
        if not valid_traffic_class(self.traffic_class):
            raise ValueError(f"ServerConfig.traffic_class must be {TRAFFIC_CLASS_RULE}")
