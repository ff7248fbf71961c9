"""Prometheus series of the connection limits: open connections, connections closed by a limit
(by reason), ``accept()`` failures, request errors, and the bytes the idempotency table holds."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from fleetwatch.engine_probe.serve.front.limits import ConnectionGuard

__all__ = ["ConnectionMetrics"]


class ConnectionMetrics(Collector):
    """Reads the guard's counts at scrape time (labels: ``replica``, and a fixed ``reason``)."""

    def __init__(
        self,
        replica: str,
        guard: ConnectionGuard,
        accept_errors: Callable[[], int],
        idempotency_bytes: Callable[[], int] | None = None,
        request_errors: Callable[[], int] | None = None,
    ) -> None:
        self.replica = replica
        self.guard = guard
        self.accept_errors = accept_errors
        self.idempotency_bytes = idempotency_bytes
        self.request_errors = request_errors

    def describe(self) -> Iterable[Metric]:
        return list(self.collect())

    def collect(self) -> Iterable[Metric]:
        g = self.guard
        r = [self.replica]
        open_ = GaugeMetricFamily(
            "fleetwatch_http_connections_open", "Open HTTP connections.", labels=["replica"]
        )
        open_.add_metric(r, g.open)
        yield open_
        cap = GaugeMetricFamily(
            "fleetwatch_http_connections_max",
            "The cap on open HTTP connections.",
            labels=["replica"],
        )
        cap.add_metric(r, g.max_connections)
        yield cap
        closed = CounterMetricFamily(
            "fleetwatch_http_connections_limited",
            "HTTP connections refused or closed by a limit: refused (503 at the cap), replaced "
            "(a connection without a request head, closed at the cap for a new one), "
            "header_timeout, body_timeout (408).",
            labels=["replica", "reason"],
        )
        s = g.stats
        for reason, n in (
            ("refused", s.refused),
            ("replaced", s.evicted),
            ("header_timeout", s.header_timeouts),
            ("body_timeout", s.body_timeouts),
        ):
            closed.add_metric([self.replica, reason], n)
        yield closed
        accept = CounterMetricFamily(
            "fleetwatch_http_accept_errors",
            "accept() failures on the listening socket (out of descriptors or buffers).",
            labels=["replica"],
        )
        accept.add_metric(r, self.accept_errors())
        yield accept
        if self.request_errors is not None:
            errors = CounterMetricFamily(
                "fleetwatch_http_request_errors",
                "Requests aiohttp could not parse or handle (400s, 500s), in this process; "
                "logged at most once a minute.",
                labels=["replica"],
            )
            errors.add_metric(r, self.request_errors())
            yield errors
        if self.idempotency_bytes is not None:
            idem = GaugeMetricFamily(
                "fleetwatch_http_idempotency_bytes",
                "Bytes of responses kept for Idempotency-Key replays.",
                labels=["replica"],
            )
            idem.add_metric(r, self.idempotency_bytes())
            yield idem
