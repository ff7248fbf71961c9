"""Resilience primitives for the serving path: circuit breaker, retries with a shared budget,
micro-batcher, and a retry-storm simulator.

- ``resilience.breaker``: rate-based circuit breaker with resilience4j's semantics.
- ``resilience.retry``: tenacity retry policy, jitter, Finagle-style retry budget, LLM HTTP
  retry classification.
- ``resilience.batcher``: cancellation-safe asyncio micro-batcher with failure isolation.
- ``resilience.storm``: pure retry-storm simulation behind ``fleetwatch resilience storm``.
- ``resilience.limits``: per-tenant cost-unit token buckets (reserve at admission, settle at
  finish) and a weighted fair queue across tenants.

Depends on nothing else in fleetwatch; the only LLM knowledge is the HTTP retry table in
``resilience.retry.classify``. Import the subpackages; this module imports nothing so that the
command line starts fast.
"""
