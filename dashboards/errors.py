"""The one exception type of this package: bad user input, named with where it was found."""

from __future__ import annotations

__all__ = ["DashboardError"]


class DashboardError(ValueError):
    """A dashboard could not be built (an expression names a metric its profile lacks). The command line prints it as one line and exits with status 2."""
