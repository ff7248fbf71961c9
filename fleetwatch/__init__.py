"""fleetwatch: SRE observability and reliability for LLM inference fleets.

This package is the command-line front door only; the work lives in ``telemetry``, ``slo``,
``resilience``, ``engine_probe`` and ``dashboards``.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("fleetwatch")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
