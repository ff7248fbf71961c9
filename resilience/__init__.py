"""Resilience primitives for the serving path: circuit breaker, retries with a shared budget,
micro-batcher, and a retry-storm simulator.

- ``fleetwatch.resilience.breaker``: rate-based circuit breaker with resilience4j's semantics.
- ``fleetwatch.resilience.retry``: tenacity retry policy, jitter, Finagle-style retry budget, LLM HTTP
  retry classification.
- ``fleetwatch.resilience.batcher``: cancellation-safe asyncio micro-batcher with failure isolation.
- ``fleetwatch.resilience.storm``: pure retry-storm simulation behind ``fleetwatch resilience storm``.
- ``fleetwatch.resilience.limits``: per-tenant cost-unit token buckets (reserve at admission, settle at
  finish) and a weighted fair queue across tenants.

Depends on nothing else in fleetwatch; the only LLM knowledge is the HTTP retry table in
``fleetwatch.resilience.retry.classify``. Import the subpackages; this module imports nothing so that the
command line starts fast.
"""
