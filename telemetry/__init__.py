"""Telemetry for LLM serving: request records, metric profiles, spans, metrics, GPU counters.

Entry points: ``fleetwatch.telemetry.instrument.instrument(engine)`` (spans, Prometheus metrics and request
records from one step-loop observer), ``fleetwatch.telemetry.gpu.GpuSampler`` (NVML/GPM counters),
``fleetwatch.core.profiles`` (metric names per engine), ``fleetwatch.core.records`` (the request record).

Importing this package is cheap and has no side effects; each submodule pulls in only what it needs.
"""
