"""The one exception type of this package: bad user input, named with where it was found."""

from __future__ import annotations

__all__ = ["ProbeError"]


class ProbeError(ValueError):
    """A probe run was configured wrongly or its target is unusable. The command line prints it as one line and exits with status 2."""
