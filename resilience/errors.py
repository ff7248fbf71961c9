"""The one exception type of this package: bad user input, named with where it was found."""

from __future__ import annotations

__all__ = ["ResilienceConfigError"]


class ResilienceConfigError(ValueError):
    """A resilience primitive was configured with impossible values. The command line prints it as one line and exits with status 2."""
