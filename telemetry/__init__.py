"""Telemetry for LLM serving: request records, metric profiles, spans, metrics, GPU counters.

Entry points: ``fleetwatch.telemetry.instrument.instrument(engine)`` (spans, Prometheus metrics and request
records from one step-loop observer), ``fleetwatch.telemetry.gpu.GpuSampler`` (NVML/GPM counters),
``fleetwatch.telemetry.profiles`` (metric names per engine), ``fleetwatch.telemetry.records`` (the request record).

Importing this package is cheap and has no side effects; each submodule pulls in only what it needs.
"""
