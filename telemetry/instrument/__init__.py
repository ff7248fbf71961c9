"""``instrument(engine)``: spans, Prometheus metrics and request records from one observer.

>>> from fleetwatch.telemetry.instrument import instrument                      # doctest: +SKIP
>>> inst = instrument(engine, registry=registry, record_sink=sink)   # doctest: +SKIP
>>> inst.detach()                                                    # doctest: +SKIP
"""

from fleetwatch.telemetry.instrument.api import Instrumentation, instrument
from fleetwatch.telemetry.instrument.observer import TelemetryObserver
from fleetwatch.telemetry.request_state import RequestState

__all__ = ["Instrumentation", "RequestState", "TelemetryObserver", "instrument"]
