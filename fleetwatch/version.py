"""The installed toolkit's version.

``fleetwatch`` itself is a namespace package (no ``__init__``), shared by two distributions: the
toolkit (``fleetwatch``: the command, the demo, slo, fleet, dashboards, engine_probe, records,
resilience) and the serving side (``fleetwatch-telemetry``: ``fleetwatch.telemetry``), so either can
be installed alone.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("fleetwatch")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
