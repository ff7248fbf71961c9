"""The one exception type of this package: bad user input, named with where it was found."""

from __future__ import annotations

__all__ = ["EngineConfigError"]


class EngineConfigError(ValueError):
    """An engine configuration or request is invalid. The command line prints it as one line and exits with status 2."""
