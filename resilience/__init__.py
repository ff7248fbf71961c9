"""Resilience primitives for the serving path: circuit breaker, retry budget, micro-batcher.

Depends on nothing else in fleetwatch and knows nothing of LLMs.
"""
