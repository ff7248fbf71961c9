"""The one exception type of this package: bad user input, named with where it was found."""

from __future__ import annotations

__all__ = ["AnalysisError"]


class AnalysisError(ValueError):
    """Fleet analysis input is unusable (missing columns, too few replicas, unreadable source). The command line prints it as one line and exits with status 2."""
