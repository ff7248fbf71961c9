"""Telemetry for LLM serving: request records, metric profiles, spans, metrics, GPU counters.

Importing this package is cheap and has no side effects; each submodule pulls in only what it needs.
"""
